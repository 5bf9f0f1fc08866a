"""Reviews P1 and P2: a write is whole or absent even when the writer dies in the middle. The
issue's bar: SIGKILL at random instants during 50 writes of a large output leaves no file but the
complete previous one (the temporary is nameless until the instant before its rename). A signal
that unwinds (SIGTERM, Ctrl-C) at any bytecode of files.py leaves nothing either; a temporary a
killed writer left is removed by the next write, also when it bears this process's PID; without
/proc a write names its temporary from the start."""

import errno
import os
import random
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from zerosim.files import write_bytes

SIZE = 2 * 2**20
"""The output's size: a trace or sweep file of MBs (the review's temporaries: 2-5.7 MB)."""
TRIALS = 50

WRITER = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from zerosim.files import write_bytes
    out, size = Path(sys.argv[1]), int(sys.argv[2])
    print("ready", flush=True)
    n = 0
    while True:
        n += 1
        head = f"{os.getpid()} {n}\\n".encode()
        write_bytes(out, head + b"x" * size + b"\\nend " + head, "output")
""")


def content(head: bytes) -> bytes:
    return head + b"x" * SIZE + b"\nend " + head


def assert_complete(path: Path) -> None:
    """One of the writer's files, whole: its first line again at its end, and SIZE bytes between."""
    data = path.read_bytes()
    head = data[:data.index(b"\n") + 1]
    assert data == content(head), (path, len(data))


def wait_ready(writer: subprocess.Popen) -> None:
    """Until the writer says it is about to write (its imports done), at most 30 s."""
    readable, _, _ = select.select([writer.stdout], [], [], 30)
    assert readable and writer.stdout.readline() == b"ready\n", "the writer did not start"


def entries(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


@pytest.mark.skipif(sys.platform != "linux", reason="O_TMPFILE is Linux's")
def test_sigkill_at_random_instants_leaves_only_the_complete_previous_file(tmp_path):
    out = tmp_path / "out.json"
    out.write_bytes(content(b"0 0\n"))
    rng = random.Random(28)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    in_the_instant = 0
    for trial in range(TRIALS):
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(out), str(SIZE)],
                                  stdout=subprocess.PIPE, env=env, cwd=Path(__file__).parents[2])
        try:
            wait_ready(writer)
            try:  # from the first write's start to a few writes in: every phase, many times
                writer.wait(timeout=rng.uniform(0.0, 0.15))
            except subprocess.TimeoutExpired:
                pass
            assert writer.poll() is None, f"the writer died by itself: {writer.returncode}"
            writer.kill()
            assert writer.wait(timeout=30) == -signal.SIGKILL
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait(timeout=30)
            writer.stdout.close()
        left = entries(tmp_path)
        assert_complete(out)
        if left != ["out.json"]:
            # Only a kill in the instant between the link and the rename leaves anything: the
            # complete new file under the killed writer's name, which the next write removes.
            assert left == ["." + out.name + f".{writer.pid}.tmp", "out.json"], (trial, left)
            assert_complete(tmp_path / left[0])
            in_the_instant += 1
    write_bytes(out, content(b"last 1\n"), "output")
    assert entries(tmp_path) == ["out.json"] and out.read_bytes() == content(b"last 1\n")
    # 2 of 300 kills here: a few microseconds between the two system calls, in writes of ~30 ms
    assert in_the_instant <= TRIALS // 10, f"{in_the_instant} of {TRIALS} kills left one"


class Interrupted(BaseException):
    """What a signal handler raises (KeyboardInterrupt, commandline.Terminated) at a bytecode."""


def write_interrupted_at(out: Path, nth: int, data: bytes) -> bool:
    """write_bytes, with Interrupted raised at the nth bytecode it runs in zerosim/files.py;
    False when the write ended before that."""
    import zerosim.files as files

    count = [0]

    def tracer(frame, event, arg):
        if frame.f_code.co_filename != files.__file__:
            return None
        frame.f_trace_opcodes = True
        if event == "opcode":
            count[0] += 1
            if count[0] == nth:
                raise Interrupted
        return tracer

    sys.settrace(tracer)
    try:
        write_bytes(out, data, "output")
    except Interrupted:
        return True
    finally:
        sys.settrace(None)
    return False


def test_a_signal_that_unwinds_at_any_instant_leaves_the_old_or_the_new_file_only(tmp_path):
    """Review P1: SIGTERM (Terminated) between the temporary's creation and the try that removes
    it left a 0-byte temporary. Here the exception comes at every bytecode of files.py in turn."""
    out = tmp_path / "out.json"
    old, new = b"old\n" * 1000, b"new\n" * 1000
    nth = 0
    while True:
        nth += 1
        out.write_bytes(old)
        interrupted = write_interrupted_at(out, nth, new)
        assert entries(tmp_path) == ["out.json"], (nth, entries(tmp_path))
        assert out.read_bytes() in (old, new), nth
        if not interrupted:
            break
    assert nth > 50 and out.read_bytes() == new  # the instants were many; the last write ran


def test_the_next_write_removes_a_killed_writers_temporary(tmp_path):
    """A temporary named for a process that no longer runs is removed; a running writer's stays."""
    out = tmp_path / "r.csv"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=30)
    stale = tmp_path / f".r.csv.{dead.pid}.tmp"
    running = tmp_path / f".r.csv.{os.getppid()}.tmp"  # pytest's parent: running
    other = tmp_path / f".s.csv.{dead.pid}.tmp"  # another output's: not this write's to remove
    for path in (stale, running, other):
        path.write_text("partial")
    write_bytes(out, b"a,b\n", "sweep results")
    assert entries(tmp_path) == sorted([running.name, other.name, "r.csv"])


UNWINDING_WRITER = textwrap.dedent("""
    import argparse, os, sys
    from pathlib import Path
    from zerosim.commandline import dispatch
    from zerosim.files import write_bytes
    out, size = Path(sys.argv[1]), int(sys.argv[2])

    def loop(args):
        print("ready", flush=True)
        n = 0
        while True:
            n += 1
            head = f"{os.getpid()} {n}\\n".encode()
            write_bytes(out, head + b"x" * size + b"\\nend " + head, "output")

    sys.exit(dispatch("writer", argparse.Namespace(func=loop)))
""")


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)],
                         ids=["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_unwind_a_command_mid_write(tmp_path, signum, code):
    """A command ends on SIGTERM and on SIGHUP (a closed terminal, a dropped ssh session) as on
    Ctrl-C: the write under way is undone, the exit code is the shell's (128 + the signal), one
    line says so. SIGHUP's default killed zerosim at once."""
    out = tmp_path / "out.json"
    out.write_bytes(content(b"0 0\n"))
    rng = random.Random(signum)
    for trial in range(10):
        writer = subprocess.Popen([sys.executable, "-c", UNWINDING_WRITER, str(out), str(SIZE)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  cwd=Path(__file__).parents[2])
        try:
            wait_ready(writer)
            try:
                writer.wait(timeout=rng.uniform(0.0, 0.15))
            except subprocess.TimeoutExpired:
                pass
            writer.send_signal(signum)
            _, err = writer.communicate(timeout=30)
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.communicate(timeout=30)
        assert (writer.returncode, err) == (code, b"writer: terminated\n"), trial
        assert entries(tmp_path) == ["out.json"], (trial, entries(tmp_path))
        assert_complete(out)


def test_a_dead_writers_temporary_with_this_processs_pid_does_not_fail_the_write(tmp_path):
    """PIDs come again (a container's first processes have the same few): a killed writer's
    `.NAME.PID.tmp` with this process's PID stayed, as a live writer's, and linkat failed at the
    end of the write with "File exists". This process names its temporary only at the end, so
    one with its PID now is a dead writer's."""
    out = tmp_path / "r.csv"
    out.write_text("old")
    (tmp_path / f".r.csv.{os.getpid()}.tmp").write_text("partial")
    write_bytes(out, b"a,b\n", "sweep results")
    assert entries(tmp_path) == ["r.csv"] and out.read_bytes() == b"a,b\n"


@pytest.fixture
def no_proc(monkeypatch):
    """A system with no /proc mounted (a chroot, some containers): nothing under it exists, and
    linkat through /proc/self/fd fails with ENOENT, as the kernel answers there."""
    real_link, real_isdir, real_exists = os.link, os.path.isdir, os.path.exists

    def link(src, dst, *args, **kwargs):
        if str(src).startswith("/proc/"):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(src))
        return real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "link", link)
    for name, real in (("isdir", real_isdir), ("exists", real_exists)):
        monkeypatch.setattr(os.path, name,
                            lambda p, real=real: not str(p).startswith("/proc") and real(p))


def test_without_proc_a_write_takes_a_named_temporary_and_succeeds(tmp_path, no_proc):
    """O_TMPFILE's file is named through /proc/self/fd at the end: without /proc that failed
    after all the work ("No such file or directory"); now the temporary is named from the start."""
    out = tmp_path / "trace.json"
    out.write_text("old")
    write_bytes(out, b"new", "--trace")
    assert entries(tmp_path) == ["trace.json"] and out.read_bytes() == b"new"
