"""Run the golden cases in-process and keep their outcomes: what tests/test_golden.py checks and
bench/golden.py records and compares.

An outcome is the case's argv, exit code and stdout; stderr only when the exit code is 2 (bad input:
the one error line is the output); the file it wrote where its argv names one ({out}). Other
stderr is progress and is ignored. The outcomes of a run are one folder: `<name>.txt` per case
(stdout as printed, so a re-recording diffs line by line), `<name>.written` for a file a case
wrote, and `index.json` (argv, exit code, error line of every case).

As a script it runs every case against whichever `zerosim` is first on sys.path, from the
checkout it belongs to, and writes the folder (bench/golden.py runs it so, with a checkout of
another commit first on PYTHONPATH):

    PYTHONPATH=CHECKOUT python tests/golden/harness.py --root CHECKOUT --out FOLDER
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

if __package__:
    from .cases import CASES, OUT, Case
else:  # a script run against another checkout, whose tests/ has no golden/
    from cases import CASES, OUT, Case

EXPECTED = Path(__file__).resolve().parent / "expected"
INDEX = "index.json"
BAD_INPUT = 2  # zerosim.contract.EXIT_BAD_INPUT, written out: the harness outlives module moves
ROOT_MARK = "<root>"


@dataclass(frozen=True)
class Outcome:
    argv: tuple[str, ...]
    code: int
    stdout: str
    error: str
    """stderr when code is 2 (the one error line), else empty."""
    written: str | None = None
    """The file the case wrote ({out} in its argv); None for a case that names none."""
    raised: str = ""
    """`Type: message (file:line)` when main raised instead of returning (exit code 1, as the
    interpreter would give), else empty."""


def outcome(case: Case, code: int, stdout: str, stderr: str, root: Path,
            written: str | None = None, out_stem: str | None = None, raised: str = "") -> Outcome:
    """The outcome as recorded: the checkout's absolute path, should one be printed, replaced by
    <root>, so that a run in /tmp/golden-base and one in the repository compare equal; the
    temporary file's path by {out} again."""
    def normal(text: str) -> str:
        if out_stem:
            text = text.replace(out_stem, OUT)
        return text.replace(str(root), ROOT_MARK)
    return Outcome(case.argv, code, normal(stdout), normal(stderr) if code == BAD_INPUT else "",
                   None if written is None else normal(written), normal(raised))


def run_case(main: Callable[[list[str]], int], case: Case, root: Path) -> Outcome:
    """`zerosim ARGV` in-process through `main` (cwd must be root); SystemExit is the exit code.
    Any other exception is caught, so that one broken case does not end a whole recording."""
    with tempfile.TemporaryDirectory(prefix="zerosim-golden-") as scratch:
        stem = str(Path(scratch) / "out")
        argv = [arg.replace(OUT, stem) for arg in case.argv]
        out, err = io.StringIO(), io.StringIO()
        raised = ""
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except Exception as exc:  # noqa: BLE001  (reported as the case's outcome)
                where = traceback.extract_tb(exc.__traceback__)[-1]
                code, raised = 1, (f"{type(exc).__name__}: {exc} "
                                   f"({where.filename}:{where.lineno})")
        written = None
        if argv != list(case.argv):  # the file, or "" when the command wrote none
            written = "".join(_text(path) for path in sorted(Path(scratch).iterdir()))
        return outcome(case, code, out.getvalue(), err.getvalue(), root, written, stem, raised)


def write(outcomes: dict[str, Outcome], folder: Path) -> None:
    """The folder holds exactly these outcomes (files of cases no longer listed removed)."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.txt"):
        if stale.stem not in outcomes and not stale.name.startswith("bench_"):
            stale.unlink()
    for stale in folder.glob("*.written"):
        if stale.stem not in outcomes or outcomes[stale.stem].written is None:
            stale.unlink()
    index = {}
    for name, result in outcomes.items():
        (folder / f"{name}.txt").write_text(result.stdout, encoding="utf-8", newline="")
        if result.written is not None:
            (folder / f"{name}.written").write_text(result.written, encoding="utf-8", newline="")
        index[name] = {"argv": list(result.argv), "code": result.code, "error": result.error}
        if result.raised:
            index[name]["raised"] = result.raised
    (folder / INDEX).write_text(json.dumps(index, indent=1, ensure_ascii=False) + "\n",
                                encoding="utf-8")


def read(folder: Path = EXPECTED) -> dict[str, Outcome]:
    index = json.loads((folder / INDEX).read_text(encoding="utf-8"))
    def written(name: str) -> str | None:
        path = folder / f"{name}.written"
        return _text(path) if path.exists() else None
    return {name: Outcome(tuple(entry["argv"]), entry["code"], _text(folder / f"{name}.txt"),
                          entry["error"], written(name), entry.get("raised", ""))
            for name, entry in index.items()}


def _text(path: Path) -> str:
    with open(path, encoding="utf-8", newline="") as file:  # "\r" stays as printed
        return file.read()


def first_difference(expected: Outcome | None, actual: Outcome) -> str | None:
    """None when equal, else one line saying where they part (the first differing line)."""
    if expected is None:
        return "not recorded (python bench/golden.py record)"
    if expected.argv != actual.argv:
        return (f"argv changed since recording (python bench/golden.py record): "
                f"recorded {' '.join(expected.argv)}")
    if expected.raised != actual.raised:
        return (f"raised {actual.raised}" if actual.raised else "returned") + (
            f", recorded raising {expected.raised}" if expected.raised
            else f", recorded exit code {expected.code}")
    if expected.code != actual.code:
        return f"exit code {actual.code}, recorded {expected.code}" + (
            f"; stderr: {actual.error.strip()}" if actual.error else "")
    return (first_line_apart("stderr", expected.error, actual.error)
            or first_line_apart("stdout", expected.stdout, actual.stdout)
            or first_line_apart("the written file", expected.written, actual.written))


def first_line_apart(what: str, want: str | None, got: str | None) -> str | None:
    if want == got:
        return None
    if want is None or got is None:
        def some(text: str | None) -> str:
            return "none" if text is None else "some"
        return f"{what}: {some(got)}, recorded {some(want)}"
    want_lines, got_lines = want.splitlines(), got.splitlines()
    for number, (a, b) in enumerate(zip(want_lines, got_lines), start=1):
        if a != b:
            column = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            return (f"{what} line {number} column {column + 1}: {_clip(b, column)!r}, "
                    f"recorded {_clip(a, column)!r}")
    if len(want_lines) != len(got_lines):
        return f"{what} has {len(got_lines)} lines, recorded {len(want_lines)}"
    return f"{what} differs in its line endings"


def _clip(line: str, column: int, before: int = 60, after: int = 120) -> str:
    """The line around `column`, where a long line (a CSV header, a JSON array) parts."""
    start, end = max(0, column - before), column + after
    return ("..." if start else "") + line[start:end] + ("..." if end < len(line) else "")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the golden cases; write their outcomes.")
    parser.add_argument("--root", type=Path, required=True, help="the checkout that is run")
    parser.add_argument("--out", type=Path, required=True, help="folder of the outcomes")
    args = parser.parse_args(argv)
    root, out = args.root.resolve(), args.out.resolve()
    import zerosim
    from zerosim import cli
    where = Path(zerosim.__file__).resolve()
    if root not in where.parents:
        parser.exit(2, f"zerosim comes from {where}, not from --root {root} (put it first on "
                       f"PYTHONPATH)\n")
    os.chdir(root)
    outcomes = {}
    for case in CASES:
        began = time.perf_counter()
        outcomes[case.name] = run_case(cli.main, case, root)
        print(f"{time.perf_counter() - began:7.3f} s  {case.name}", file=sys.stderr)
    write(outcomes, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
