"""The golden harness: every case of tests/golden/cases.py (zerosim command lines) and the stdout of
bench/zero_family.py, run against a checkout and compared with what a reference commit printed.
It proves that a reorganisation of the code changes no output.

    python bench/golden.py record --ref a84d8a7    # re-record tests/golden/expected/ from a commit
    python bench/golden.py record --root CHECKOUT  # ... from a checkout already on disk
    python bench/golden.py check                   # this tree against the recording
    python bench/golden.py check --root CHECKOUT   # another checkout against it

A commit runs from a temporary `git worktree` (removed afterwards), its folder first on
PYTHONPATH and as the working directory, so that its own `zerosim` is imported rather than the
editable install's. The cases are always this tree's (tests/golden/cases.py), run in-process by
tests/golden/harness.py in one child process. `check` prints one line per case (its first
differing line where it differs), then: cases, identical, different, seconds; exit 1 when any
differs. tests/test_golden.py checks the same cases under pytest (not zero_family.py: ~6 s).
About 15 s on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.golden import harness  # noqa: E402  (after the repository is on sys.path)

BENCH = "bench/zero_family.py"
BENCH_EXPECTED = harness.EXPECTED / "bench_zero_family.txt"


def _env(checkout: Path) -> dict[str, str]:
    """The environment that imports the checkout's zerosim first."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(checkout), env.get("PYTHONPATH")]))
    return env


def run_cases(checkout: Path, folder: Path) -> None:
    """Every case against `checkout`, its outcomes written to `folder`."""
    subprocess.run([sys.executable, str(ROOT / "tests/golden/harness.py"), "--root", str(checkout),
                    "--out", str(folder)], cwd=checkout, env=_env(checkout), check=True,
                   stderr=subprocess.DEVNULL)


def run_bench(checkout: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(checkout / BENCH)], cwd=checkout, env=_env(checkout),
                          capture_output=True, text=True)


class Worktree:
    """`git worktree add --detach` of a ref in a temporary folder, removed on exit."""

    def __init__(self, ref: str):
        self.ref, self.path = ref, Path(tempfile.mkdtemp(prefix="zerosim-golden-ref-"))

    def __enter__(self) -> Path:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet",
                        str(self.path), self.ref], check=True)
        return self.path

    def __exit__(self, *exc) -> None:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(self.path)],
                       check=False)
        shutil.rmtree(self.path, ignore_errors=True)


def record(checkout: Path) -> int:
    began = time.perf_counter()
    run_cases(checkout, harness.EXPECTED)
    bench = run_bench(checkout)
    if bench.returncode:
        print(bench.stderr, file=sys.stderr)
        raise SystemExit(f"{BENCH} exited {bench.returncode} in {checkout}")
    BENCH_EXPECTED.write_text(bench.stdout, encoding="utf-8", newline="")
    outcomes = harness.read()
    size = sum(path.stat().st_size for path in harness.EXPECTED.iterdir())
    print(f"recorded {len(outcomes)} cases and {BENCH} from {checkout} into "
          f"{harness.EXPECTED.relative_to(ROOT)}/ ({size / 1e6:.2f} MB) in "
          f"{time.perf_counter() - began:.1f} s")
    return 0


def check(checkout: Path, bench: bool) -> int:
    began = time.perf_counter()
    expected = harness.read()
    with tempfile.TemporaryDirectory(prefix="zerosim-golden-check-") as folder:
        run_cases(checkout, Path(folder))
        actual = harness.read(Path(folder))
    names = list(dict.fromkeys([*expected, *actual]))
    differences = {}
    for name in names:
        if name not in actual:
            differences[name] = "recorded, but no longer a case (python bench/golden.py record)"
        else:
            differences[name] = harness.first_difference(expected.get(name), actual[name])
    if bench:
        result = run_bench(checkout)
        got = result.stdout if result.returncode == 0 else None
        want = BENCH_EXPECTED.read_text(encoding="utf-8") if BENCH_EXPECTED.exists() else None
        name = BENCH
        names.append(name)
        if got is None:
            last = (result.stderr.strip().splitlines() or [""])[-1]
            differences[name] = f"exited {result.returncode}: {last}"
        elif want is None:
            differences[name] = "not recorded (python bench/golden.py record)"
        else:
            differences[name] = harness.first_line_apart("stdout", want, got)
    different = [name for name in names if differences[name]]
    for name in names:
        print(f"{'DIFFERENT' if differences[name] else 'identical'}  {name}"
              + (f": {differences[name]}" if differences[name] else ""))
    print(f"\ncases {len(names)}, identical {len(names) - len(different)}, "
          f"different {len(different)}, seconds {time.perf_counter() - began:.1f} "
          f"(checkout {checkout})")
    return 1 if different else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="record tests/golden/expected/ from a commit")
    source = rec.add_mutually_exclusive_group(required=True)
    source.add_argument("--ref", help="a git ref, run from a temporary worktree (e.g. a84d8a7)")
    source.add_argument("--root", type=Path, help="a checkout on disk (e.g. /tmp/golden-base)")
    chk = commands.add_parser("check", help="compare a checkout with the recording")
    chk.add_argument("--root", type=Path, default=ROOT, help="the checkout (default: this one)")
    chk.add_argument("--no-bench", action="store_true", help=f"the cases only, not {BENCH}")
    args = parser.parse_args(argv)
    if args.command == "check":
        return check(args.root.resolve(), bench=not args.no_bench)
    if args.root:
        return record(args.root.resolve())
    with Worktree(args.ref) as checkout:
        return record(checkout)


if __name__ == "__main__":
    sys.exit(main())
