"""Paths in what zero_real writes (the measurement's `scenario`, the profile's provenance
`scenario` and `command`) are as the user typed them, relative to the working directory: files
travel, and must not carry this machine's folders. The real runs' files are checked in
test_cli.py and test_calibrate.py; here the rule itself, and every committed file."""

import json
import os
import shlex
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tests.conftest import ROOT, SCENARIOS  # noqa: E402
from zero_real.run.runconfig import portable_path  # noqa: E402

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
COMMITTED = sorted([*ROOT.glob("profiles/*.json"), *ROOT.glob("docs/**/*.json")])


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A working directory holding sc/tiny.toml."""
    (tmp_path / "sc").mkdir()
    shutil.copy(TINY, tmp_path / "sc" / "tiny.toml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_path_is_kept_as_typed_or_made_relative_to_the_working_directory(here):
    assert portable_path("sc/tiny.toml") == "sc/tiny.toml"
    assert portable_path("./sc/tiny.toml") == "./sc/tiny.toml"
    assert portable_path("../other/tiny.toml") == "../other/tiny.toml"
    assert portable_path(str(here / "sc" / "tiny.toml")) == os.path.join("sc", "tiny.toml")
    assert portable_path(str(here)) == "."
    outside = str(here.parent / "elsewhere.toml")  # nothing shorter to write: kept
    assert portable_path(outside) == outside


@pytest.mark.parametrize("typed", ["sc/tiny.toml", "ABSOLUTE"])
def test_run_records_the_scenario_relative_to_the_working_directory(dry_run, here, typed):
    scenario = str(here / "sc" / "tiny.toml") if typed == "ABSOLUTE" else typed
    cfg = dry_run("run", scenario, "--stage", "1").launched
    assert cfg.scenario_path == "sc/tiny.toml"  # train.measurement writes it as `scenario`


def test_calibrate_records_its_paths_relative_to_the_working_directory(here):
    from zero_real.calibration.calibrate import reproduce
    from zero_real.cli import build_parser

    args = build_parser().parse_args(["calibrate", str(here / "sc" / "tiny.toml"), "--nproc", "2",
                                      "--out", str(here / "p.json")])
    assert reproduce(args) == (
        "zero-real calibrate sc/tiny.toml --nproc 2 --backend gloo --collectives native,ring "
        "--min-size-KiB 1 --max-size-MiB 256 --seconds-per-size 0.3 --rounds 3 --timeout-s 30 --out p.json")


def test_the_recorded_command_parses_back_to_the_same_settings(here):
    """Numbers as typed, not rounded to 6 digits (--max-size-MiB 1048576 was 1.04858e+06)."""
    from zero_real.calibration.calibrate import reproduce
    from zero_real.cli import build_parser

    argv = ["calibrate", "sc/tiny.toml", "--nproc", "3", "--min-size-KiB", "0.123456789",
            "--max-size-MiB", "1048576", "--seconds-per-size", "0.3333333333", "--micro-batches",
            "4,1", "--timeout-s", "2147483", "--run-timeout-s", "1e-3", "--set",
            "model.name='a b'", "--out", "p.json"]
    args = build_parser().parse_args(argv)
    again = build_parser().parse_args(shlex.split(reproduce(args))[1:])
    assert vars(again) == vars(args)


def test_the_committed_profile_says_what_calibrate_writes_for_its_command(monkeypatch):
    """Its provenance was fixed by hand (the measurements untouched): it must be exactly what the
    code writes today for the command it records, run from the repository's root."""
    from zero_real.calibration.calibrate import reproduce
    from zero_real.cli import build_parser

    monkeypatch.chdir(ROOT)
    provenance = json.loads((ROOT / "profiles" / "cpu_gloo_tiny.json").read_text())["provenance"]
    argv = shlex.split(provenance["command"])
    assert argv[0] == "zero-real"
    args = build_parser().parse_args(argv[1:])
    assert reproduce(args) == provenance["command"]
    assert provenance["scenario"] == portable_path(args.scenario)
    assert provenance["scenario"] == "scenarios/tiny_gpt_4rank_cpu.toml"
    assert (ROOT / provenance["scenario"]).is_file()


def _strings(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, str):
        yield value


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_committed_file_names_an_absolute_path(path: Path):
    words = [w.strip("\"'") for s in _strings(json.loads(path.read_text())) for w in s.split()
             if "/" in w or "\\" in w]
    absolute = [w for w in words if os.path.isabs(w) or w.startswith("~") or w[1:3] == ":\\"]
    assert absolute == [], path
