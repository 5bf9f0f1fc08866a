"""Every zerosim command that writes a file (simulate --trace, sweep --out, plot -o) on a full
disk, and given a place no file can go.

A full disk is injected at the door every write goes through, `io.open` (`open`, pathlib and
`os.fdopen` all use it): a file opened for writing in the test's folder takes a few hundred bytes,
then fails with ENOSPC, whatever the code writing it does. Then once more on a real 16 KiB tmpfs
where the machine lets a user mount one (user and mount namespaces). Either way the command must
exit 2 with one line naming the file, leave the previous file byte for byte and nothing else
behind. A place no file can go is refused in one line before any work."""

import builtins
import errno
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, SCENARIOS, assert_one_line_error, run_zerosim
from tests.zerosim.results import write_sweep

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
PREVIOUS = b"the previous result, which a failed write must leave as it was\n"
FREE_BYTES = 300


class FullDisk:
    """A file whose writes fail with ENOSPC once `budget` bytes have gone through."""

    def __init__(self, real, budget: list[int]):
        self._real, self._budget = real, budget

    def write(self, data):
        size = len(data.encode("utf-8") if isinstance(data, str) else data)
        if size <= self._budget[0]:
            self._budget[0] -= size
            return self._real.write(data)
        self._real.write(data[:self._budget[0]])  # as a disk does: part of it lands
        self._real.flush()
        self._budget[0] = 0
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._real.close()

    def __getattr__(self, name):
        return getattr(self._real, name)


def fill_disk(monkeypatch, folder: Path) -> None:
    """From now on the disk under `folder` takes FREE_BYTES more bytes."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd to see where a file descriptor points")
    real_open, budget, inside = io.open, [FREE_BYTES], os.path.realpath(folder)

    def open_(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        name = os.readlink(f"/proc/self/fd/{file}") if isinstance(file, int) else file
        if any(flag in mode for flag in "wax+") and \
                Path(os.path.realpath(name)).is_relative_to(inside):
            return FullDisk(handle, budget)
        return handle

    monkeypatch.setattr(io, "open", open_)
    monkeypatch.setattr(builtins, "open", open_)


def png_works() -> bool:
    from zerosim.tradeoffs import figures

    if not figures.kaleido_ready():
        return False
    try:
        import plotly.graph_objects as go

        go.Figure().to_image(format="png", width=10, height=10)
    except Exception:  # kaleido without a Chrome it can drive
        return False
    return True


def command(name: str, folder: Path, out_name: str) -> tuple:
    """A writing command's argv, writing `out_name` in `folder`; its input under folder/in."""
    out = folder / out_name
    return {
        "simulate": ("simulate", TINY, "--trace", out),
        "sweep": ("sweep", TINY, "--vary", "cluster.nodes=1,2", "--jobs", "1", "--quiet",
                  "--out", out),
        "plot": ("plot", folder / "in" / "s.csv", "--kind", "memory", "-o", out),
    }[name]


WRITES = [("simulate", "trace.json"), ("sweep", "r.csv"), ("sweep", "r.json"),
          ("plot", "fig.html"), ("plot", "fig.png")]


@pytest.fixture
def folder(tmp_path, rows):
    """A folder with the plot commands' input in it."""
    (tmp_path / "in").mkdir()
    write_sweep(tmp_path / "in" / "s.csv", rows)
    return tmp_path


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("name, out_name", WRITES, ids=[f"{n} {o}" for n, o in WRITES])
def test_a_full_disk_leaves_the_previous_file_and_nothing_else(folder, monkeypatch, name,
                                                               out_name):
    if out_name.endswith(".png") and not png_works():
        pytest.skip("no PNG engine here (kaleido >= 1 and a Chrome or Chromium it can drive)")
    out = folder / out_name
    out.write_bytes(PREVIOUS)
    before = listing(folder)
    fill_disk(monkeypatch, folder)
    result = run_zerosim(*command(name, folder, out_name))
    assert_one_line_error(result, str(out), "No space left on device")
    assert out.read_bytes() == PREVIOUS
    assert listing(folder) == before  # no partial file, no temporary


def test_a_real_full_tmpfs(tmp_path):
    """The same on a real filesystem of 16 KiB (the trace is about 66 KB), where one can be
    mounted without privileges: a user namespace maps us to root in a mount namespace of our own."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to mount a tmpfs in a namespace")
    mount, seen = tmp_path / "mnt", tmp_path / "seen"
    mount.mkdir()
    seen.mkdir()
    script = ('mount -t tmpfs -o size=16k zerosim-full "$1" || exit 97\n'
              'printf "%s" "$4" > "$1/trace.json"\n'
              '"$3" -m zerosim simulate "$5" --trace "$1/trace.json" > /dev/null 2> "$2/stderr"\n'
              'echo $? > "$2/rc"; ls -A "$1" > "$2/ls"; cp "$1/trace.json" "$2/after" || true\n')
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script,
                           "sh", mount, seen, sys.executable, PREVIOUS.decode(), TINY],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    if not (seen / "rc").exists():  # unshare or mount refused: the command never ran
        pytest.skip(f"cannot mount a tmpfs here without privileges: {done.stderr.strip()}")
    stderr = (seen / "stderr").read_text().splitlines()
    assert (seen / "rc").read_text().strip() == "2", stderr
    assert len(stderr) == 1 and "trace.json: No space left on device" in stderr[0], stderr
    assert (seen / "ls").read_text().split() == ["trace.json"]
    assert (seen / "after").read_bytes() == PREVIOUS


# ---- a place no file can go: refused before any work --------------------------------------------

def unwritable_folder(tmp_path: Path) -> Path:
    """A folder that takes no new file: ours with no write permission, or for root (whom
    permissions do not stop) sysfs, where no one creates files."""
    if os.geteuid() != 0:
        folder = tmp_path / "locked"
        folder.mkdir(mode=0o500)
        return folder
    try:
        fd, name = tempfile.mkstemp(dir="/sys")
    except OSError:
        return Path("/sys")
    os.close(fd)
    os.unlink(name)
    pytest.skip("running as root, and /sys takes files here")


PLACES = {  # how to make the place, and what the one line says
    "a folder": (lambda tmp, out: (tmp / out).mkdir() or tmp / out, "it is a folder"),
    "a missing folder": (lambda tmp, out: tmp / "no" / "such" / out, "no folder"),
    "a path through a file": (lambda tmp, out: tmp / "in" / "s.csv" / out,
                              "s.csv is a file, not a folder"),
    "an unwritable folder": (lambda tmp, out: unwritable_folder(tmp) / out, "Permission denied"),
}
WORK = {"simulate": ["zerosim.cli.simulation.load", "zerosim.sim.engine.simulate"],
        "sweep": ["zerosim.tradeoffs.sweep.run_sweep"],
        "plot": ["zerosim.tradeoffs.figures.build_figure"]}
PLACED = [(name, out, place) for name, out in WRITES[:-1] for place in PLACES]


@pytest.mark.parametrize("name, out_name, place", PLACED,
                         ids=[f"{n} {o} in {p}" for n, o, p in PLACED])
def test_a_place_no_file_can_go_is_refused_before_any_work(folder, monkeypatch, name, out_name,
                                                           place):
    make, fragment = PLACES[place]
    out = make(folder, out_name)
    for target in WORK[name]:
        monkeypatch.setattr(target, _no_work(target))
    before = listing(folder)
    argv = [str(out) if str(a).endswith(out_name) else a for a in command(name, folder, out_name)]
    result = run_zerosim(*argv)
    assert_one_line_error(result, str(out), fragment)
    assert listing(folder) == before


def _no_work(target: str):
    def work(*args, **kwargs):
        raise AssertionError(f"{target} ran before the output path was checked")
    return work
