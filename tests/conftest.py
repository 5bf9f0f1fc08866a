import ast
import contextlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from zerosim import cli

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
ZERO_PAPER = SCENARIOS / "zero_paper_7b5_64gpu.toml"


class CliResult:
    def __init__(self, code: int, stdout: str, stderr: str):
        self.code, self.stdout, self.stderr = code, stdout, stderr

    @property
    def json(self):
        return json.loads(self.stdout)


def run_zerosim(*argv: str) -> CliResult:
    """`zerosim ARGV` in-process; SystemExit (argparse) counts as the exit code."""
    return run_main(cli.main, *argv)


def typed_flags(parser, path=()):
    """(subcommand path, flag) of every option that converts its text (type=), found by walking
    the parser, so a flag added later is covered without a line in a test."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from typed_flags(sub, (*path, name))
        elif action.option_strings and action.type is not None:
            yield path, action.option_strings[0]


def run_main(main, *argv) -> CliResult:
    """A command's main(argv) in-process, its output captured."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return CliResult(code, out.getvalue(), err.getvalue())


def assert_one_line_error(result: CliResult, *fragments: str) -> None:
    """Exit 2, nothing on stdout, exactly one line on stderr naming the problem, no traceback."""
    assert result.code == 2, (result.code, result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture
def write(tmp_path):
    """write(name, text) -> path of a file under tmp_path."""
    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path
    return _write


@pytest.fixture
def scratch(tmp_path):
    """The folder of an example's files: memory (tmpfs) where there is one. Every output is
    synced to disk before it replaces the old one (files.write_bytes), which a loaded disk makes
    seconds per file, and plot writes 4 MB."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(dir=shm, prefix="zerosim-fuzz-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


# ---- the fuzz budget: tests/fuzzing.py counts the inputs, tests/test_fuzz_budget.py checks them --

FUZZ_BUDGET_TEST = "tests/test_fuzz_budget.py"
FUZZ_RAN: set[tuple[str, str]] = set()
"""(file, test function) of every fuzz test that ran to its end in this session (passed, or
failed as an xfail expects)."""


def fuzz_tests() -> set[tuple[str, str]]:
    """Every fuzz test of the suite, read from the sources: (file relative to the repository,
    function name) of each test function that calls generated(). Read with `ast`, so a test
    that a -k or a path left uncollected still counts."""
    found = set()
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") and any(
                    isinstance(call, ast.Call) and getattr(call.func, "id", None) == "generated"
                    for call in ast.walk(node)):
                found.add((path.relative_to(ROOT).as_posix(), node.name))
    return found


def pytest_collection_modifyitems(items) -> None:
    """The budget test runs last, after every fuzz test has counted its inputs."""
    items.sort(key=lambda item: item.nodeid.startswith(FUZZ_BUDGET_TEST + "::"))


def pytest_runtest_logreport(report) -> None:
    if report.when == "call" and (report.passed or hasattr(report, "wasxfail")):
        file, _, name = report.nodeid.partition("::")
        FUZZ_RAN.add((file, name.partition("[")[0]))
