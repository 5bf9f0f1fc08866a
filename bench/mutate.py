"""Mutation testing: how many single changes to a module the tests that cover it catch (issue 28).

    python bench/mutate.py bench/mutations/review-2026-11-27.toml       # a catalogue, by hand
    python bench/mutate.py CATALOGUE --only G1 G2 --jobs 2 --json out.json
    python bench/mutate.py --changed-since main                         # generated, by AST
    python bench/mutate.py --modules zerosim/sim/groups.py --per-module 30 --seed 1

A mutation is one exact text of one module and what replaces it: a catalogue's are written by
hand (TOML, bench/mutations/*.toml; the original must occur exactly once, else the run is
refused); the automatic mode makes them from the syntax tree of the modules a change touched
(numbers +-1 or x1.1, comparisons flipped, + - * / swapped, and/or, min/max, `not` dropped,
True/False), a seeded sample of at most --per-module per module. Each one runs in a private copy
of the tree (its tracked and untracked, not ignored, files: never the tree itself, where others
work), under `nice`, with PYTHONDONTWRITEBYTECODE=1 (a same-length change restored within a
second can be served from a stale __pycache__): `pytest -q -x` on the module's tests
(bench/mutations/coverage.toml, else the tests that import it), within a timeout (a hang is
counted as killed, and said). A survivor is also run against tests/test_golden.py: golden
outputs are re-recorded, not reasoned about, so a move there is reported, never counted as a
kill, but it proves the mutation changes an output. The table: per module, tried, equivalent
(a catalogue's `equivalent = "why"`: not run), killed, survived, the kill rate of the others;
then every survivor. Exit 0 for a completed run (it measures; it does not gate), 2 for bad input.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import contextlib
import io
import json
import os
import queue
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tokenize
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COVERAGE = ROOT / "bench/mutations/coverage.toml"
GOLDEN = "tests/test_golden.py"
PACKAGES = ("zerosim", "zero_real")
RUNNING: set = set()          # the pytest processes running now, killed when the run is stopped
STOP = threading.Event()


class BadInput(Exception):
    """One line naming what is wrong with the command line or a catalogue: exit 2."""


@dataclass
class Mutation:
    id: str
    module: str
    original: str
    replacement: str
    equivalent: str = ""          # why it cannot change an output; not run
    offset: int | None = None     # where the original starts (generated ones); else found once
    line: int = 0
    site: str = ""                # the whole line(s) of the site, before -> after (the report)
    status: str = ""              # killed, timeout, survived, equivalent, error
    killed_by: str = ""
    golden: str = ""              # moved, same, or "" (not run)
    seconds: float = 0.0


class Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise BadInput(message)


def arguments(argv):
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("catalogue", nargs="?", type=Path, help="a TOML catalogue of mutations")
    p.add_argument("--changed-since", metavar="REF",
                   help="generate for the modules changed since REF")
    p.add_argument("--modules", nargs="+", default=[], help="generate for these modules")
    p.add_argument("--only", nargs="+", default=[], help="only these catalogue ids")
    p.add_argument("--root", type=Path, default=ROOT, help="the tree to copy (default: this one)")
    p.add_argument("--tests", nargs="+", default=[], help="test files for every module (overrides)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--per-module", type=int, default=20, help="generated mutations per module")
    p.add_argument("--jobs", type=int, default=1, help="private copies run side by side")
    p.add_argument("--timeout", type=float, default=0.0,
                   help="seconds per mutation (default: 3x the unmutated run + 60 s)")
    p.add_argument("--no-golden", action="store_true",
                   help="skip tests/test_golden.py on survivors")
    p.add_argument("--skip-stale", action="store_true",
                   help="list a catalogue entry whose text is gone or ambiguous, not refuse")
    p.add_argument("--json", type=Path, help="write the table and every mutation here")
    a = p.parse_args(argv)
    if not a.catalogue and not a.changed_since and not a.modules:
        raise BadInput("give a catalogue, --changed-since REF or --modules PATH ...")
    if a.jobs < 1 or a.jobs > (os.cpu_count() or 1):
        raise BadInput(f"--jobs {a.jobs}: between 1 and the {os.cpu_count()} cores")
    if a.per_module < 1 or a.timeout < 0:
        raise BadInput("--per-module must be at least 1 and --timeout not negative")
    if not (a.root / ".git").exists():
        raise BadInput(f"--root {a.root}: not a git checkout")
    folder = a.json.resolve().parent if a.json else None
    if folder and not (folder.is_dir() and os.access(folder, os.W_OK)):
        raise BadInput(f"--json {a.json}: its folder does not exist or cannot be written")
    for test in a.tests:
        if not (a.root / test).is_file():
            raise BadInput(f"--tests {test}: no such file under {a.root}")
    return a


# ---- what to mutate -------------------------------------------------------------------------

def read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise BadInput(f"{path}: {e}") from None


def catalogue(path: Path, only: list[str]) -> tuple[list[Mutation], list[dict]]:
    """The catalogue's mutations to run, and its entries whose site no longer exists (`gone`)."""
    entries = read_toml(path).get("mutation", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise BadInput(f"{path}: mutations are [[mutation]] tables")
    ids = [e.get("id") for e in entries]
    for wanted in only:
        if wanted not in ids:
            raise BadInput(f"--only {wanted}: no such id in {path}")
    out, gone = [], []
    for e in entries:
        if only and e.get("id") not in only:
            continue
        missing = [k for k in ("id", "module") if not isinstance(e.get(k), str)]
        if missing:
            raise BadInput(f"{path}: entry {e.get('id', '?')} lacks {', '.join(missing)}")
        if "gone" in e:
            gone.append({"id": e["id"], "module": e["module"], "why": e["gone"]})
            continue
        if not isinstance(e.get("original"), str) or not isinstance(e.get("replacement"), str):
            raise BadInput(f"{path}: entry {e['id']} needs original and replacement text")
        if e["original"] == e["replacement"]:
            raise BadInput(f"{path}: entry {e['id']} replaces its text by itself")
        if not isinstance(e.get("equivalent", ""), str):
            raise BadInput(f"{path}: entry {e['id']}: equivalent is the reason, as text")
        out.append(Mutation(e["id"], e["module"], e["original"], e["replacement"],
                            equivalent=e.get("equivalent", "")))
    if len(set(ids)) != len(ids):
        raise BadInput(f"{path}: an id is used twice")
    return out, gone


def locate(root: Path, mutations: list[Mutation], skip_stale: bool) -> list[dict]:
    """Each catalogue mutation's offset in `root`; the stale or ambiguous ones refused (or,
    with skip_stale, dropped and returned)."""
    stale = []
    for m in list(mutations):
        path = root / m.module
        text = path.read_text(encoding="utf-8") if path.is_file() else None
        count = text.count(m.original) if text is not None else 0
        if count == 1:
            place(m, text, text.index(m.original))
            continue
        why = ("no such module" if text is None else "its text is not in the module" if not count
               else f"its text occurs {count} times")
        if not skip_stale:
            raise BadInput(f"{m.id}: {m.module}: {why} (--skip-stale reports it and goes on)")
        stale.append({"id": m.id, "module": m.module, "why": why})
        mutations.remove(m)
    return stale


SWAPS = {ast.Lt: "<=", ast.LtE: "<", ast.Gt: ">=", ast.GtE: ">", ast.Eq: "!=", ast.NotEq: "==",
         ast.Add: "-", ast.Sub: "+", ast.Mult: "/", ast.Div: "*", ast.FloorDiv: "*",
         ast.And: "or", ast.Or: "and"}
OPERATOR = {"<", "<=", ">", ">=", "==", "!=", "+", "-", "*", "/", "//", "and", "or"}


def place(m: Mutation, text: str, offset: int) -> None:
    """Pin `m` at `offset` of `text`: its line and its whole line(s), before -> after."""
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset + len(m.original))
    end = len(text) if end < 0 else end
    before = text[start:end]
    after = text[start:offset] + m.replacement + text[offset + len(m.original):end]
    m.offset, m.line = offset, text.count("\n", 0, offset) + 1
    m.site = f"{' '.join(before.split())!r} -> {' '.join(after.split())!r}"


def _offsets(text: str) -> list[int]:
    starts, at = [], 0
    for line in text.splitlines(keepends=True):
        starts.append(at)
        at += len(line)
    return starts + [at]


def _operator_between(text: str, start: int, end: int) -> tuple[int, str] | None:
    """The offset and spelling of the one operator token in text[start:end] (between operands)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text[start:end]).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    found = [t for t in tokens if t.string in OPERATOR]
    if len(found) != 1 or found[0].start[0] != 1:  # operands on one line with the operator only
        return None
    return start + found[0].start[1], found[0].string


def generate(root: Path, module: str, seed: int, cap: int) -> list[Mutation]:
    """At most `cap` mutations of `module`, sampled with `seed` from every candidate site."""
    text = (root / module).read_text(encoding="utf-8")
    tree, starts, lines = ast.parse(text), _offsets(text), text.splitlines(keepends=True)
    at = lambda line, col: starts[line - 1] + len(lines[line - 1].encode()[:col].decode())
    scopes = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, scopes) and n.body and isinstance(n.body[0], ast.Expr)}
    in_fstrings = {id(n) for f in ast.walk(tree) if isinstance(f, ast.JoinedStr)
                   for n in ast.walk(f)}  # positions inside f-strings are not to be trusted
    sites: list[tuple[int, str, str]] = []          # (offset, original, replacement)
    for node in ast.walk(tree):
        if id(node) in in_fstrings:
            continue
        if isinstance(node, ast.Constant) and id(node) not in docstrings:
            o, e = at(node.lineno, node.col_offset), at(node.end_lineno, node.end_col_offset)
            source, v = text[o:e], node.value
            if isinstance(v, bool):
                sites.append((o, source, str(not v)))
            elif isinstance(v, int) and source.isdigit():
                sites += [(o, source, str(v + 1))] + ([(o, source, str(v - 1))] if v else [])
            elif isinstance(v, float) and re.fullmatch(r"[\d.eE+-]+", source):
                sites.append((o, source, repr(v * 1.1)))
        elif isinstance(node, (ast.BinOp, ast.Compare, ast.BoolOp)):
            if isinstance(node, ast.Compare):
                ops, operands = node.ops, [node.left, *node.comparators]
            elif isinstance(node, ast.BoolOp):
                ops, operands = [node.op] * (len(node.values) - 1), node.values
            else:
                ops, operands = [node.op], [node.left, node.right]
            for op, left, right in zip(ops, operands, operands[1:]):
                if type(op) not in SWAPS or left.end_lineno != right.lineno:
                    continue
                found = _operator_between(text, at(left.end_lineno, left.end_col_offset),
                                          at(right.lineno, right.col_offset))
                if found:
                    sites.append((found[0], found[1], SWAPS[type(op)]))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("min", "max")):
            o = at(node.func.lineno, node.func.col_offset)
            sites.append((o, node.func.id, "max" if node.func.id == "min" else "min"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            o = at(node.lineno, node.col_offset)
            inner = at(node.operand.lineno, node.operand.col_offset)
            sites.append((o, text[o:inner], ""))
    out, unmutated = [], ast.dump(tree)
    for offset, original, replacement in sorted(set(sites)):
        mutated = text[:offset] + replacement + text[offset + len(original):]
        try:
            if ast.dump(ast.parse(mutated)) == unmutated:
                continue
        except SyntaxError:
            continue
        out.append(Mutation("", module, original, replacement))
        place(out[-1], text, offset)
    chosen = sorted(random.Random(seed).sample(out, min(cap, len(out))), key=lambda m: m.offset)
    for n, m in enumerate(chosen, 1):
        m.id = f"{Path(module).stem}:{m.line}:{n}"
    return chosen


def changed_modules(root: Path, ref: str) -> list[str]:
    """The package modules that differ from `ref` in the working tree, new untracked ones too."""
    git = ["git", "-C", str(root)]
    got = subprocess.run([*git, "diff", "--name-only", ref, "--", "*.py"], capture_output=True,
                         text=True)
    if got.returncode:
        raise BadInput(f"--changed-since {ref}: {(got.stderr.strip().splitlines() or ['?'])[0]}")
    new = subprocess.run([*git, "ls-files", "-o", "--exclude-standard", "--", "*.py"],
                         capture_output=True, text=True, check=True).stdout
    return [p for p in dict.fromkeys(got.stdout.split() + new.split())
            if p.split("/")[0] in PACKAGES and (root / p).is_file()]


def tests_for(root: Path, module: str, coverage: dict, override: list[str]) -> list[str]:
    """The test files that run against `module`: the override, the coverage table's (those that
    exist), else every test file that imports the module, those named after it first (none:
    the mutation is reported as an error, to be listed in coverage.toml)."""
    if override:
        return override
    listed = coverage.get(module)
    if listed is None:
        dotted = module.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        package, _, name = dotted.rpartition(".")
        pattern = re.compile(rf"\b{re.escape(dotted)}\b"
                             rf"|from {re.escape(package)} import .*\b{name}\b")
        listed = sorted((str(p.relative_to(root)) for p in (root / "tests").rglob("test_*.py")
                         if pattern.search(p.read_text(encoding="utf-8", errors="replace"))
                         and p != root / GOLDEN),  # reported apart, never a kill
                        key=lambda path: (name not in Path(path).name, path))
    return [t for t in listed if (root / t).is_file()]


# ---- running them -----------------------------------------------------------------------------

def make_copy(root: Path, into: Path) -> Path:
    files = subprocess.run(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard", "-z"],
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        source = root / name
        if source.is_file() and "__pycache__" not in name:
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def environment(copy: Path) -> dict:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(copy), env.get("PYTHONPATH")]))
    return env


def pytest(copy: Path, tests: list[str], timeout_s: float) -> tuple[int | None, str, float]:
    """(exit code, or None past the timeout; its output; seconds)."""
    began = time.perf_counter()
    proc = subprocess.Popen(["nice", "-n", "10", sys.executable, "-m", "pytest", "-q", "-x",
                             "-p", "no:randomly", "-p", "no:cacheprovider", *tests],
                            cwd=copy, env=environment(copy), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    RUNNING.add(proc)
    try:
        if STOP.is_set():
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=timeout_s)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the pytest and whatever it started
        out, _ = proc.communicate()
        code = None
    finally:
        RUNNING.discard(proc)
    return code, out, time.perf_counter() - began


def each(jobs: int, work, items) -> None:
    """work(item) for every item, `jobs` at a time; on Ctrl-C or SIGTERM the queued ones are
    dropped and the running pytests killed (each runs in a session of its own)."""
    pool = concurrent.futures.ThreadPoolExecutor(jobs)
    try:
        list(pool.map(work, items))
    except BaseException:
        STOP.set()
        for proc in list(RUNNING):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def first_failure(output: str) -> str:
    for line in output.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split(" ", 1)[1][:160]
    return (output.strip().splitlines() or ["?"])[-1][:160]


def run_one(m: Mutation, copy: Path, tests: list[str], timeout_s: float,
            golden_s: float | None) -> None:
    """Apply `m` in `copy`, run its tests (and, if it survives and golden_s, the golden cases
    within golden_s), restore."""
    path = copy / m.module
    text = path.read_text(encoding="utf-8")
    assert text[m.offset:m.offset + len(m.original)] == m.original, m.id
    path.write_text(text[:m.offset] + m.replacement + text[m.offset + len(m.original):],
                    encoding="utf-8")
    try:
        code, out, m.seconds = pytest(copy, tests, timeout_s)
        if code is None:
            m.status, m.killed_by = "timeout", f"no end within {timeout_s:.0f} s"
        elif code in (1, 2):  # tests failed, or collection failed (the module no longer imports)
            m.status, m.killed_by = "killed", first_failure(out)
        elif code == 0:
            m.status = "survived"
            if golden_s:
                gcode, _, _ = pytest(copy, [GOLDEN], golden_s)
                m.golden = "same" if gcode == 0 else "moved"
        else:
            m.status, m.killed_by = "error", f"pytest exited {code}: {first_failure(out)}"
    finally:
        path.write_text(text, encoding="utf-8")


def run_all(root: Path, mutations: list[Mutation], tests: dict, args) -> list[str]:
    """Every mutation, in --jobs private copies; returns the test files that fail unmutated
    (dropped from every list: they would kill everything)."""
    work = Path(tempfile.mkdtemp(prefix="mutate-"))
    try:
        copies: queue.Queue = queue.Queue()
        for n in range(args.jobs):
            copies.put(make_copy(root, work / f"copy{n}"))
        packages = sorted({m.module.split("/")[0] for m in mutations})
        show = ("import importlib, sys\n"
                "for p in sys.argv[1:]: print(importlib.import_module(p).__file__)")
        probe = subprocess.run([sys.executable, "-c", show, *packages],
                               cwd=work / "copy0", env=environment(work / "copy0"),
                               capture_output=True, text=True)
        if probe.returncode or any(not f.startswith(str(work)) for f in probe.stdout.split()):
            last = (probe.stderr.strip().splitlines() or [probe.stdout.strip()])[-1]
            raise BadInput(f"the copy does not import its own {', '.join(packages)}: {last}")
        files = sorted({t for ts in tests.values() for t in ts})
        golden = not args.no_golden and (root / GOLDEN).is_file()
        files += [GOLDEN] if golden and GOLDEN not in files else []
        base_s, broken = {}, []

        def baseline(test: str) -> None:
            c = copies.get()
            try:
                code, out, base_s[test] = pytest(c, [test], 3600)
                if code not in (0, 5):
                    broken.append(test)
                    print(f"unmutated: {test} fails ({first_failure(out)}); left out",
                          file=sys.stderr)
            finally:
                copies.put(c)

        each(args.jobs, baseline, files)
        for module in tests:
            tests[module] = [t for t in tests[module] if t not in broken]
        golden_s = 3 * base_s[GOLDEN] + 60 if golden and GOLDEN not in broken else None
        done = [0]

        def one(m: Mutation) -> None:
            if m.equivalent:
                m.status = "equivalent"
            elif not tests[m.module]:
                m.status, m.killed_by = "error", ("no test file imports the module: list its "
                                                  "tests in bench/mutations/coverage.toml")
            else:
                limit = args.timeout or 3 * sum(base_s[t] for t in tests[m.module]) + 60
                c = copies.get()
                try:
                    run_one(m, c, tests[m.module], limit, golden_s)
                finally:
                    copies.put(c)
            done[0] += 1
            print(f"[{done[0]}/{len(mutations)}] {m.id} {m.module}:{m.line} {m.status}"
                  f"{' golden ' + m.golden if m.golden else ''} ({m.seconds:.0f} s)"
                  f"{': ' + m.killed_by if m.killed_by else ''}",
                  file=sys.stderr, flush=True)

        each(args.jobs, one, mutations)
        return broken
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---- the report -------------------------------------------------------------------------------

def table(mutations: list[Mutation]) -> list[dict]:
    rows = {}
    for m in mutations:
        r = rows.setdefault(m.module, dict(module=m.module, tried=0, equivalent=0, killed=0,
                                           timeout=0, survived=0, golden_moved=0, error=0))
        r["tried"] += 1
        key = {"killed": "killed", "timeout": "killed", "survived": "survived",
               "equivalent": "equivalent"}.get(m.status, "error")
        r[key] += 1
        r["timeout"] += m.status == "timeout"
        r["golden_moved"] += m.golden == "moved"
    total = dict(module="all", **{k: sum(r[k] for r in rows.values())
                                  for k in ("tried", "equivalent", "killed", "timeout", "survived",
                                            "golden_moved", "error")})
    out = list(rows.values()) + [total]
    for r in out:
        judged = r["killed"] + r["survived"]
        r["kill_rate"] = round(r["killed"] / judged, 4) if judged else None
    return out


def report(rows, mutations, extra: dict) -> str:
    width = max([len(r["module"]) for r in rows] + [6])
    lines = [f"{'module':<{width}}  tried  equiv  killed  survived  kill rate  golden moved",
             "-" * (width + 57)]
    for r in rows:
        rate = "-" if r["kill_rate"] is None else f"{100 * r['kill_rate']:.0f}%"
        killed = f"{r['killed']}" + (f" ({r['timeout']}t)" if r["timeout"] else "")
        lines.append(f"{r['module']:<{width}}  {r['tried']:>5}  {r['equivalent']:>5}  "
                     f"{killed:>6}  {r['survived']:>8}  {rate:>9}  {r['golden_moved']:>12}"
                     + (f"  ({r['error']} not run: error)" if r["error"] else ""))
    lines.append("kill rate: killed / (killed + survived), equivalent ones left out; "
                 "(Nt): N of the killed hung past the timeout; golden moved: survivors that "
                 "change a golden output (reported, not counted as killed)")
    survivors = [m for m in mutations if m.status == "survived"]
    lines.append(f"\nsurvivors ({len(survivors)}):")
    for m in survivors:
        lines.append(f"  {m.id:<8} {m.module}:{m.line}  golden {m.golden or 'not run'}\n"
                     f"           {m.site}")
    for m in mutations:
        if m.status in ("timeout", "error"):
            lines.append(f"{m.status}: {m.id} {m.module}:{m.line}: {m.killed_by}")
    for key, title in (("gone", "catalogue entries whose site no longer exists"),
                       ("stale", "catalogue entries not found in this tree (left out)"),
                       ("broken", "test files failing unmutated (left out of every list)")):
        if extra.get(key):
            lines.append(f"\n{title}:")
            lines += [f"  {e['id']} {e['module']}: {e['why']}" if isinstance(e, dict) else f"  {e}"
                      for e in extra[key]]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = arguments(argv)
    root = args.root.resolve()
    coverage = read_toml(COVERAGE).get("modules", {}) if COVERAGE.is_file() else {}
    mutations, gone, stale = [], [], []
    if args.catalogue:
        mutations, gone = catalogue(args.catalogue, args.only)
        stale = locate(root, mutations, args.skip_stale)
    modules = list(args.modules) + (changed_modules(root, args.changed_since)
                                    if args.changed_since else [])
    for module in dict.fromkeys(modules):
        if not (root / module).is_file() or not module.endswith(".py"):
            raise BadInput(f"--modules {module}: no such Python file under {root}")
        try:
            mutations += generate(root, module, args.seed, args.per_module)
        except (SyntaxError, UnicodeDecodeError) as e:
            raise BadInput(f"{module}: cannot be parsed ({e})") from None
    tests = {m.module: tests_for(root, m.module, coverage, args.tests) for m in mutations}
    began = time.perf_counter()
    broken = run_all(root, mutations, tests, args) if mutations else []
    rows = table(mutations)
    extra = {"gone": gone, "stale": stale, "broken": broken}
    print(report(rows, mutations, extra))
    print(f"\n{len(mutations)} mutations of {root} in {time.perf_counter() - began:.0f} s, "
          f"--jobs {args.jobs}")
    if args.json:
        args.json.write_text(json.dumps({"root": str(root), "table": rows, "tests": tests,
                                         "mutations": [asdict(m) for m in mutations], **extra},
                                        indent=1) + "\n", encoding="utf-8")
    return 0


def _terminated(signum, frame):
    raise SystemExit(143)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminated)
    try:
        sys.exit(main())
    except BadInput as e:
        print(f"mutate.py: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
