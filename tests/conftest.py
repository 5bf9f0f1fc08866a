import contextlib
import io
import json
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
