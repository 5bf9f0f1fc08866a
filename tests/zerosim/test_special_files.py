"""Review H3 and P3: a path that names no regular file (a named pipe, a socket, a device, a loop
of links), given as any input or output of a zerosim command, is refused in one line, exit 2,
before anything opens it. open() on a named pipe waits for a writer (or reader) that never comes:
each command here runs under an alarm, so a command that opens the pipe fails the test in seconds
instead of hanging it. Also T2: an hf_config name past the system's limit, or one zerosim may not
look at, is one line, not a traceback."""

import errno
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, SCENARIOS, assert_one_line_error, run_zerosim
from tests.zerosim.results import write_sweep

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
ALARM_S = 20
"""A refused path ends within a second (zerosim's import and the scenario's check); a command
that opened the pipe would wait forever."""


class Hung(BaseException):
    """Raised by the alarm: no except clause of the code under test (OSError, ValueError,
    Exception) can take it for its own failure."""


def run_bounded(*argv):
    """run_zerosim, failed with Hung if it takes more than ALARM_S seconds."""
    def ring(signum, frame):
        raise Hung(f"zerosim {' '.join(map(str, argv))} still running after {ALARM_S} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(ALARM_S)
    try:
        return run_zerosim(*argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def make_special(folder: Path, name: str, kind: str) -> Path:
    """A named pipe, a listening socket's file or a link to /dev/zero (a device with no end;
    /dev/null, which ends at once, is taken), named `name` in `folder`."""
    path = folder / name
    if kind == "named pipe":
        os.mkfifo(path)
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        cwd = os.getcwd()
        os.chdir(folder)  # a socket's address is at most 107 bytes: bound by its short name
        try:
            server.bind(name)
        finally:
            os.chdir(cwd)
        make_special.sockets.append(server)
    else:
        path.symlink_to("/dev/zero")
    return path


make_special.sockets = []


@pytest.fixture(autouse=True)
def _close_sockets():
    yield
    while make_special.sockets:
        make_special.sockets.pop().close()


def argv_with(case: str, special: Path, folder: Path, rows) -> tuple:
    """One command with `special` in one of the places a user names a file (review H3's list);
    the command's other inputs are good (a plot's sweep file: `rows`)."""
    write_sweep(folder / "s.csv", rows)
    return {
        "scenario": ("memory", special),
        "hf_config": ("memory", TINY, "--set", f"model.hf_config={special}"),
        "--deepspeed": ("memory", TINY, "--deepspeed", special),
        "cluster.profile": ("simulate", TINY, "--set", f"cluster.profile={special}"),
        "validate input": ("validate", special),
        "plot input": ("plot", special, "--kind", "memory", "-o", folder / "f.html"),
        "--trace": ("simulate", TINY, "--stage", "3", "--trace", special),
        "sweep --out": ("sweep", TINY, "--vary", "cluster.nodes=1,2", "--jobs", "1", "--quiet",
                        "--out", special),
        "plot -o": ("plot", folder / "s.csv", "--kind", "memory", "-o", special),
    }[case]


CASES = ["scenario", "hf_config", "--deepspeed", "cluster.profile", "validate input", "plot input",
         "--trace", "sweep --out", "plot -o"]
SUFFIX = {"--trace": ".json", "sweep --out": ".json", "plot -o": ".html", "--deepspeed": ".json",
          "scenario": ".toml"}


@pytest.mark.parametrize("case", CASES)
def test_a_named_pipe_anywhere_is_refused_at_once(tmp_path, rows, case):
    pipe = make_special(tmp_path, "p" + SUFFIX.get(case, ".json"), "named pipe")
    result = run_bounded(*argv_with(case, pipe, tmp_path, rows))
    assert_one_line_error(result, str(pipe), "a named pipe, not a regular file")


@pytest.mark.parametrize("kind", ["socket", "character device"])
@pytest.mark.parametrize("case", ["scenario", "hf_config", "--trace", "sweep --out"])
def test_sockets_and_devices_are_refused_too(tmp_path, rows, case, kind):
    special = make_special(tmp_path, "s" + SUFFIX.get(case, ".json"), kind)
    result = run_bounded(*argv_with(case, special, tmp_path, rows))
    assert_one_line_error(result, str(special), f"a {kind}, not a regular file")


@pytest.mark.parametrize("case", ["--trace", "sweep --out", "plot -o"])
def test_dev_null_as_an_output_takes_nothing_and_succeeds(tmp_path, rows, case):
    """It was refused as "a character device" unless stdout pointed there too. sweep --out and
    plot -o want a name with their suffix: a link so named to /dev/null."""
    null = Path(os.devnull)
    if case != "--trace":
        null = tmp_path / ("null" + SUFFIX[case])
        null.symlink_to(os.devnull)
    result = run_bounded(*argv_with(case, null, tmp_path, rows))
    assert result.code == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({"s.csv", null.name} - {"null"})


def test_dev_null_as_a_scenario_is_read_as_empty(tmp_path):
    """Empty: the scenario's own complaint (no [model]), not a refusal of the device."""
    result = run_bounded("memory", os.devnull)
    assert result.code == 2 and "character device" not in result.stderr, result
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr


def test_standard_input_as_a_scenario_says_to_write_a_file():
    """`cat s.toml | zerosim memory /dev/stdin`: a pipe, refused (reading it could wait forever);
    the line says standard input is not read, so the user writes the file."""
    done = subprocess.run([sys.executable, "-m", "zerosim", "memory", "/dev/stdin"],
                          input=TINY.read_text(), capture_output=True, text=True, timeout=ALARM_S,
                          cwd=ROOT)
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.splitlines() == [
        "zerosim: error: cannot read scenario file /dev/stdin: a named pipe, not a regular file "
        "(zerosim reads and writes files only; standard input is not read: write it to a file)"]


def test_a_named_pipe_in_the_references_folder_is_refused(tmp_path):
    """validate --references reads every *.toml in the folder."""
    refs = tmp_path / "refs"
    refs.mkdir()
    make_special(refs, "run.toml", "named pipe")
    result = run_bounded("validate", "--references", refs)
    assert result.code == 2 and "a named pipe, not a regular file" in result.stderr, result
    assert "Traceback" not in result.stderr


def test_a_loop_of_links_as_trace_is_refused_and_stays(tmp_path):
    """Review P3: realpath of a loop is the link itself, which the rename replaced by a file."""
    loop1, loop2 = tmp_path / "loop1", tmp_path / "loop2"
    loop1.symlink_to(loop2)
    loop2.symlink_to(loop1)
    result = run_bounded("simulate", TINY, "--trace", loop1)
    assert_one_line_error(result, f"cannot write --trace {loop1}: a loop of symbolic links")
    assert loop1.is_symlink() and os.readlink(loop1) == str(loop2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop1", "loop2"]


def test_a_dangling_link_as_trace_writes_its_target_and_stays(tmp_path):
    link, target = tmp_path / "t.json", tmp_path / "real.json"
    link.symlink_to(target)
    result = run_bounded("simulate", TINY, "--stage", "3", "--trace", link)
    assert result.code == 0, result.stderr
    assert link.is_symlink() and target.read_text().startswith("{")


def test_an_hf_config_name_past_the_limit_is_one_line(tmp_path, monkeypatch):
    """Review T2: Path.is_dir raised ENAMETOOLONG (a 300-character name; the limit is 255)."""
    monkeypatch.chdir(tmp_path)
    name = "a" * 300
    result = run_bounded("memory", TINY, "--set", f"model.hf_config={name}")
    assert_one_line_error(result, "cannot read hf_config", name, "too long")


def test_an_hf_config_zerosim_may_not_look_at_is_one_line(tmp_path, monkeypatch):
    """Review T2, EACCES: a folder it may not enter (injected: the tests may run as root, who
    enters every folder)."""
    secret = tmp_path / "secret" / "config.json"
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        if str(path).startswith(str(secret.parent)):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    result = run_bounded("memory", TINY, "--set", f"model.hf_config={secret}")
    assert_one_line_error(result, f"cannot read hf_config {secret}", "Permission denied")
