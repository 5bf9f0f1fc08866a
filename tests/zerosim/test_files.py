"""zerosim.files.write_text: a whole file or none, through a link to what it names, and into what
cannot be replaced (a device) as it is."""

import os
import stat

import pytest

from zerosim.errors import InputError
from zerosim.files import write_text


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    out = tmp_path / "r.json"
    out.write_text("old")

    with pytest.raises(TypeError):
        write_text(out, object(), "results")  # not text: fails after the temporary exists
    assert out.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["r.json"]
    write_text(out, "new", "results")
    assert out.read_text() == "new"


def test_a_link_is_followed_and_stays_a_link(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_text(link, "new", "--out")
    assert link.is_symlink() and real.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_a_device_is_written_to_not_replaced(tmp_path):
    link = tmp_path / "null"
    link.symlink_to(os.devnull)
    write_text(link, "discarded", "--trace")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode) and link.is_symlink()


def test_an_unwritable_place_is_one_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot write --out .*no/such/dir/r.json"):
        write_text(tmp_path / "no" / "such" / "dir" / "r.json", "x", "--out")
