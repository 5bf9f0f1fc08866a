"""bench/mutate.py, the mutation-testing script, on a tiny package of its own: a mutation its test
catches is counted killed, one no test reads survives, and the table says so; bad input is one
line and exit 2. (The script itself is not run on the project here: that takes minutes.)"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench/mutate.py"

CALC = '''"""A package for the mutation script's test."""


def double(x):
    return x * 2


def limit():
    return 10
'''

TEST = '''from fakepkg.calc import double


def test_double():
    assert double(3) == 6
'''

GOLDEN = '''from fakepkg.calc import limit


def test_limit_is_what_was_recorded():
    assert limit() == 10
'''

CATALOGUE = '''[[mutation]]
id = "K1"
module = "fakepkg/calc.py"
original = "return x * 2"
replacement = "return x * 3"

[[mutation]]
id = "S1"
module = "fakepkg/calc.py"
original = "return 10"
replacement = "return 11"

[[mutation]]
id = "E1"
module = "fakepkg/calc.py"
original = "def limit():"
replacement = "def limit(): # no change"
equivalent = "a comment"
'''


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git checkout holding fakepkg/calc.py, the one test that reads double() and a golden
    test that reads limit()."""
    (tmp_path / "fakepkg").mkdir()
    (tmp_path / "fakepkg/__init__.py").write_text("")
    (tmp_path / "fakepkg/calc.py").write_text(CALC)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test_calc.py").write_text(TEST)
    (tmp_path / "tests/test_golden.py").write_text(GOLDEN)  # run on survivors, never a kill
    (tmp_path / "mutations.toml").write_text(CATALOGUE)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=30)
    return tmp_path


def mutate(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(repo), "--timeout", "60",
                           *args], capture_output=True, text=True, timeout=120, cwd=repo)


def test_a_caught_mutation_is_killed_and_an_unread_one_survives(repo):
    done = mutate(repo, str(repo / "mutations.toml"), "--json", str(repo / "out.json"))
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("fakepkg/calc.py"))
    # tried, equivalent, killed, survived, kill rate (1 of the 2 judged), golden moved (S1)
    assert row.split()[1:] == ["3", "1", "1", "1", "50%", "1"]
    assert "S1       fakepkg/calc.py:9  golden moved" in done.stdout
    assert "'return 10' -> 'return 11'" in done.stdout
    result = json.loads((repo / "out.json").read_text())
    assert {m["id"]: m["status"] for m in result["mutations"]} == {
        "K1": "killed", "S1": "survived", "E1": "equivalent"}
    assert "test_double" in next(m for m in result["mutations"] if m["id"] == "K1")["killed_by"]
    assert (repo / "fakepkg/calc.py").read_text() == CALC  # the tree itself is never touched


def load_script():
    spec = importlib.util.spec_from_file_location("mutate", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutate"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_generated_mutations_are_capped_and_the_same_for_a_seed(repo):
    generate = load_script().generate
    # calc.py's sites: x * 2 (the *, the 2 up and down), return 10 (up and down)
    every = [(m.line, m.original, m.replacement) for m in generate(repo, "fakepkg/calc.py", 0, 99)]
    assert sorted(every) == [(5, "*", "/"), (5, "2", "1"), (5, "2", "3"),
                             (9, "10", "11"), (9, "10", "9")]
    again = [m.id for m in generate(repo, "fakepkg/calc.py", 3, 2)]
    assert again == [m.id for m in generate(repo, "fakepkg/calc.py", 3, 2)] and len(again) == 2
    done = mutate(repo, "--modules", "fakepkg/calc.py", "--per-module", "1", "--seed", "3",
                  "--json", str(repo / "a.json"))
    assert done.returncode == 0, done.stderr
    assert [m["id"] for m in json.loads((repo / "a.json").read_text())["mutations"]] == again[:1]


@pytest.mark.parametrize("args, message", [
    (["--jobs", "0", "--modules", "fakepkg/calc.py"], "--jobs 0"),
    (["--modules", "fakepkg/nothere.py"], "no such Python file"),
    ([], "give a catalogue"),
])
def test_bad_input_is_one_line_and_exit_2(repo, args, message):
    done = mutate(repo, *args)
    assert done.returncode == 2
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_stale_catalogue_entry_is_refused_in_one_line(repo):
    (repo / "fakepkg/calc.py").write_text(CALC.replace("return 10", "return 12"))
    done = mutate(repo, str(repo / "mutations.toml"))
    assert done.returncode == 2
    assert done.stderr.strip() == ("mutate.py: S1: fakepkg/calc.py: its text is not in the "
                                   "module (--skip-stale reports it and goes on)")
