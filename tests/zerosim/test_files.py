"""zerosim.files: write_text and write_bytes write a whole file or none, through a link to what it
names, never into a pipe or a device other than /dev/null (refused: test_special_files.py);
check_writable refuses, before any work, a place no file can be written. (A full disk:
test_full_disk.py.)"""

import json
import os
import stat
from pathlib import Path

import pytest

from zerosim.errors import InputError
from zerosim.files import check_writable, write_bytes, write_text


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    out = tmp_path / "r.json"
    out.write_text("old")

    with pytest.raises(TypeError):
        write_bytes(out, object(), "results")  # not bytes: fails after the temporary exists
    assert out.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["r.json"]
    write_text(out, "new", "results")
    assert out.read_text() == "new"
    write_bytes(out, b"\x89PNG", "results")
    assert out.read_bytes() == b"\x89PNG"


def test_text_utf8_cannot_hold_is_escaped_not_a_traceback(tmp_path):
    out = tmp_path / "r.csv"
    write_text(out, "model.name\ncaf\u00e9 \ud800\n", "sweep results")  # a lone surrogate (JSON)
    assert out.read_bytes() == b"model.name\ncaf\xc3\xa9 \\ud800\n"


def test_a_link_is_followed_and_stays_a_link(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_text(link, "new", "--out")
    assert link.is_symlink() and real.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_a_device_is_refused_not_written(tmp_path):
    """Review H3: what is no regular file is refused before it is opened (a named pipe's open
    waits for a reader forever); the link to it stays. test_special_files.py: every command."""
    link = tmp_path / "zero"
    link.symlink_to("/dev/zero")
    with pytest.raises(InputError, match="cannot write --trace .*zero: a character device, not a "
                                         "regular file"):
        write_text(link, "discarded", "--trace")
    assert stat.S_ISCHR(os.stat("/dev/zero").st_mode) and link.is_symlink()


def test_dev_null_is_written_as_nothing_and_read_as_empty(tmp_path):
    """os.devnull ends at once both ways, so it is taken (it was refused as "a character
    device"), by its name or through a link; nothing is made beside it or the link."""
    from zerosim.files import read_text

    link = tmp_path / "null"
    link.symlink_to(os.devnull)
    for path in (Path(os.devnull), link):
        check_writable(path, "--trace")
        write_text(path, "discarded", "--trace")
        write_bytes(path, b"discarded", "--out")
        assert read_text(path, "scenario file") == ""
    assert link.is_symlink() and [p.name for p in tmp_path.iterdir()] == ["null"]


def test_an_unwritable_place_is_one_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot write --out .*no/such/dir/r.json"):
        write_text(tmp_path / "no" / "such" / "dir" / "r.json", "x", "--out")


@pytest.mark.parametrize("make, fragment", [
    (lambda tmp: tmp / "folder", "it is a folder"),
    (lambda tmp: tmp / "no" / "such" / "r.csv", "no folder"),
    (lambda tmp: tmp / "plain.txt" / "r.csv", "plain.txt is a file, not a folder"),
])
def test_a_place_no_file_can_go_is_refused_and_left_as_it_was(tmp_path, make, fragment):
    (tmp_path / "folder").mkdir()
    (tmp_path / "plain.txt").write_text("plain")
    with pytest.raises(InputError, match=fragment) as error:
        check_writable(make(tmp_path), "--out")
    assert str(make(tmp_path)) in str(error.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "plain.txt"]
    assert list((tmp_path / "folder").iterdir()) == []
    check_writable(tmp_path / "r.csv", "--out")  # a new file in a folder: fine, nothing made
    check_writable(tmp_path / "plain.txt", "--out")  # an old file: replaced at the end
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "plain.txt"]


def test_check_writable_names_the_problem_once(tmp_path):
    """Its own refusal (an InputError, hence a ValueError) is not wrapped in a second one."""
    with pytest.raises(InputError) as caught:
        check_writable(tmp_path, "--out")
    assert str(caught.value) == f"cannot write --out {tmp_path}: it is a folder"


def test_reading_stops_at_the_limit(tmp_path):
    """/dev/urandom as a scenario hung reading; a file past MAX_TEXT_CHARS is one line."""
    from zerosim.files import MAX_TEXT_CHARS, read_text

    if os.path.exists("/dev/urandom"):
        with pytest.raises(InputError, match="cannot read scenario file /dev/urandom"):
            read_text(Path("/dev/urandom"), "scenario file")
    big = tmp_path / "big.toml"
    big.write_text("#" * (MAX_TEXT_CHARS + 1))
    with pytest.raises(InputError, match="longer than the 16,777,216 characters"):
        read_text(big, "scenario file")
    big.write_text("#" * MAX_TEXT_CHARS)
    assert len(read_text(big, "scenario file")) == MAX_TEXT_CHARS


def test_deep_json_is_one_line(tmp_path):
    from zerosim.files import MAX_NESTING, read_json_object

    for depth, fine in ((MAX_NESTING, True), (MAX_NESTING + 1, False), (5000, False)):
        path = tmp_path / "m.json"
        text = '{"a": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"
        path.write_text(text)
        if fine:  # an object holding depth - 1 nested arrays: depth levels in all
            assert read_json_object(path, "measurement") == json.loads(text)
        else:
            with pytest.raises(InputError, match=f"nested more than {MAX_NESTING} levels"):
                read_json_object(path, "measurement")


@pytest.mark.skipif(not os.path.exists("/dev/stdout"), reason="needs /dev/stdout")
@pytest.mark.parametrize("stdout", ["a pipe", "a file"])
def test_a_trace_to_dev_stdout_comes_before_the_table(tmp_path, stdout):
    """`--trace /dev/stdout` writes through the command's own stdout, in order with the table:
    into a pipe (its realpath, pipe:[N], is no path: that failed), or into a file the shell
    redirected stdout to (replacing it by rename lost the table)."""
    import subprocess
    import sys

    from tests.conftest import ROOT, SCENARIOS

    argv = [sys.executable, "-m", "zerosim", "simulate", str(SCENARIOS / "tiny_gpt_4rank_cpu.toml"),
            "--stage", "3", "--trace", "/dev/stdout"]
    if stdout == "a pipe":
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
        out = done.stdout
    else:
        with open(tmp_path / "out.txt", "w") as file:
            done = subprocess.run(argv, cwd=ROOT, stdout=file, stderr=subprocess.PIPE, text=True,
                                  timeout=120)
        out = (tmp_path / "out.txt").read_text()
    assert done.returncode == 0, done.stderr
    trace, _, table = out.partition("\n")  # the trace is one line of JSON, then the table
    assert json.loads(trace)["stepEvents"]
    assert table.splitlines()[-1].startswith("3 ZeRO-3")
