"""What `zero-real run --out` and `calibrate --out` leave behind. A path that cannot be written
is refused before anything starts (in-process, launching disabled: conftest.dry_run); a disk
that fills at the end (ENOSPC injected into the write, or the kernel refusing a file past a size
limit) leaves the previous file whole and no partial or temporary file, with one error line and
exit 2. The run and the calibration are replaced by their results, so the tests cost nothing."""

import contextlib
import errno
import json
import os
import resource
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tests.conftest import SCENARIOS, assert_one_line_error, run_main  # noqa: E402

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
BIG = {"blob": "x" * 200_000}  # a result far larger than any write buffer


def _argv(command: str, out) -> list:
    if command == "run":
        return ["run", TINY, "--stage", "1", "--out", out]
    return ["calibrate", TINY, "--nproc", "2", "--out", out]


def _unwritable_folder(tmp_path: Path) -> Path:
    """A folder that refuses new files, even to root (who ignores a folder's mode)."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    for candidate in (folder, Path("/sys")):
        try:
            fd, name = tempfile.mkstemp(dir=candidate)
        except OSError:
            return candidate
        os.close(fd)
        os.unlink(name)
    pytest.skip("no folder here refuses a new file")


@pytest.mark.parametrize("command", ["run", "calibrate"])
@pytest.mark.parametrize("case", ["a folder", "a missing folder", "inside a file", "read-only",
                                  "empty"])
def test_an_output_that_cannot_be_written_is_refused_before_anything_starts(dry_run, tmp_path,
                                                                            command, case):
    (tmp_path / "file").write_text("mine")
    out = {"a folder": tmp_path, "a missing folder": tmp_path / "no" / "m.json",
           "inside a file": tmp_path / "file" / "m.json", "empty": "",
           "read-only": case == "read-only" and _unwritable_folder(tmp_path) / "m.json"}[case]
    done = dry_run(*_argv(command, out))
    assert done.launched is None  # the case: `--out DIR` failed after a 9 s run
    assert_one_line_error(done.result, f"--out {out}" if out else "--out is empty")
    assert (tmp_path / "file").read_text() == "mine"


@pytest.mark.parametrize("command", ["run", "calibrate"])
def test_a_writable_output_reaches_the_launch(dry_run, tmp_path, command):
    out = tmp_path / "m.json"
    assert dry_run(*_argv(command, out)).launched is not None
    assert not out.exists() and not list(tmp_path.iterdir())  # the check left nothing behind


class _FillsUp:
    """A file whose first write stores half its bytes, then finds the disk full (ENOSPC)."""

    def __init__(self, f):
        self.f = f

    def write(self, data):
        self.f.write(data[:len(data) // 2])
        self.f.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def _enospc(monkeypatch) -> str:
    """From now on, files zerosim.files opens fill the disk half-way (os.fdopen, os.write)."""
    fdopen, write = os.fdopen, os.write

    def half_write(fd, data):
        write(fd, data[:len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fdopen", lambda *a, **kw: _FillsUp(fdopen(*a, **kw)))
    monkeypatch.setattr(os, "write", half_write)
    return os.strerror(errno.ENOSPC)


@contextlib.contextmanager
def _size_limit():
    """set(n): the kernel writes no file past n bytes from now on (RLIMIT_FSIZE; Python ignores
    SIGXFSZ, so the write fails with EFBIG after writing up to the limit): a full disk for any
    writer, however it writes. Restored on the way out."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    try:
        yield lambda n: resource.setrlimit(resource.RLIMIT_FSIZE, (n, hard))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def _finish_with(command: str, monkeypatch, fill) -> None:
    """The command's work returns at once with BIG as its result, and fill() runs just before
    the result is written."""
    from zero_real.calibration import calibrate
    from zero_real.run import launch, train

    def result(*args, **kwargs):
        fill()
        return BIG

    if command == "run":
        monkeypatch.setattr(train, "run", result)
    else:
        monkeypatch.setattr(launch, "spawn", lambda *args, **kwargs: [])
        monkeypatch.setattr(calibrate, "assemble", lambda *args: {
            "provenance": {"hardware": "h"}, "measurements": {}})
        monkeypatch.setattr(calibrate, "fit", result)


@pytest.mark.parametrize("command", ["run", "calibrate"])
@pytest.mark.parametrize("previous", ["an earlier result", None])
@pytest.mark.parametrize("fault", ["ENOSPC", "size limit"])
def test_a_full_disk_keeps_the_previous_file_and_leaves_no_partial_one(monkeypatch, tmp_path,
                                                                       command, previous, fault):
    from zero_real import cli

    out = tmp_path / "m.json"
    if previous is not None:
        out.write_text(previous)
    with _size_limit() as limit:
        if fault == "ENOSPC":
            reason = []
            _finish_with(command, monkeypatch, lambda: reason.append(_enospc(monkeypatch)))
        else:
            reason = [os.strerror(errno.EFBIG)]
            _finish_with(command, monkeypatch, lambda: limit(len(json.dumps(BIG)) // 3))
        result = run_main(cli.main, *_argv(command, out))
        monkeypatch.undo()
    assert result.code == 2 and result.stdout == "", (result.code, result.stderr)
    *progress, error = result.stderr.splitlines()
    assert error == f"zero-real: error: cannot write --out {out}: {reason[0]}"
    assert [line.split(": ", 1)[1] for line in progress] == (  # calibrate: worlds 1..N
        ["starting 1 process(es)"] if command == "run"
        else ["starting 1 process(es)", "starting 2 process(es)"])
    assert [p.name for p in tmp_path.iterdir()] == ([out.name] if previous else [])
    if previous is not None:
        assert out.read_text() == previous
