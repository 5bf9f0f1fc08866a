"""Fuzzing that follows the schema: every key of every scenario table, read from the tables'
dataclasses (config.TABLES, dataclasses.fields and their annotations) and the loader's own list of
moved [training] spellings, is given values of every kind: valid ones, boundaries, wrong types,
out of range, NaN and infinities, integers past 2**53, Unicode digits and empty text. Each goes
through `--set` or a scenario file, to `memory` (and the valid ones, and one of each other kind, to
`simulate`), and must give a result whose numbers are finite, non-negative and at most 2**53, or
exactly one line on stderr with exit 2: never a traceback, never exit 1; and what is never a
value of the key's type (a wrong type; for a number NaN, a Unicode digit, a number past 2**53) is
refused, not taken.

Nothing here lists a key by hand. A string key's choices are the ones the loader's own refusal
names ("is not one of ...", "known: ..."); a path key's valid files are the repository's JSON files
the key accepts. So a key added later is fuzzed without a new case, and a field of a type no
generator knows fails its table's test, which also checks that every field (and every moved
spelling) was fed every kind this run. A whole run feeds at least FUZZ_BUDGET inputs (asserted
here, besides the suite-wide budget of tests/test_fuzz_budget.py). In process: a `memory` run is a
few milliseconds; a few subprocess samples check the same at the process boundary."""

from __future__ import annotations

import ast
import copy
import json
import math
import re
import subprocess
import sys
import tomllib
from dataclasses import MISSING, fields
from functools import cache

import pytest

from tests.conftest import ROOT, SCENARIOS, ZERO_PAPER, assert_one_line_error, run_zerosim
from tests.fuzzing import FUZZ_BUDGET, generated, numbers_in
from zerosim.scenario.config import TABLES
from zerosim.scenario.load import load_scenario
from zerosim.scenario.parallelism_table import LEGACY_TRAINING_KEYS

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
LLAMA = SCENARIOS / "llama2_7b_64gpu.toml"
BASES = (TINY, ZERO_PAPER, LLAMA)  # a shape on CPU/gloo, a bare Ψ on V100s, a shape on A100s
CAP = 2**53  # the largest number zerosim takes or reports (README: exact as a float)

# Every kind of value each key is given; a key missing one of them fails its table's test.
KINDS = ("valid", "boundary", "wrong_type", "out_of_range", "nonfinite", "huge",
         "unicode_digits", "empty")
# What a user may write for a value of any key (TOML text), by kind. A type's own values are
# dropped from wrong_type below. ٢ is ARABIC-INDIC DIGIT TWO, ８ FULLWIDTH DIGIT EIGHT,
# ² SUPERSCRIPT TWO, ໒ LAO DIGIT TWO: Python's int() takes the first, second and fourth.
ANY_TYPE = {"int": ["3", "-3", "0x10", "1_000"], "float": ["1.5", "-2.5e3", "6.02e23"],
            "bool": ["true", "false"], "str": ['"x"', "'bf16'", '"1"', '"true"'],
            "ranks": ["[1]", "[0, 1]", "[[1]]", '["a"]', "[1.5]"],
            "table": ["{a = 1}", "{}"], "date": ["1979-05-27", "07:32:00"]}
JUNK = {
    "nonfinite": ["nan", "inf", "-inf", "+inf", "-nan", '"nan"', "1e400"],
    "huge": [str(CAP + 1), str(2**63), str(2**64 + 1), str(10**30), "-" + str(2**63),
             "1.8e16", "1e300", "[9007199254740993]"],  # (2**53 + 1.0 is 2**53 as a float)
    "unicode_digits": ["٢", '"٢"', "８", "²", "໒", "1٢", '"１.５"', "٣e2"],
    "empty": ["", '""', "''", "[]", "' '"],
}
REFUSED = {"wrong_type": ("int", "float", "bool", "str", "ranks"),
           **dict.fromkeys(("nonfinite", "unicode_digits", "huge"), ("int", "float", "ranks"))}
"""Kinds that are never a value of a key of these types: refused in one line, never taken (a
bool as an integer, a Unicode digit as a number, NaN, a number past 2**53). The other kinds
may be taken: 7919 layers, "nan" as a model's name."""
SIMULATED_KINDS = ("wrong_type", "out_of_range", "nonfinite", "unicode_digits", "empty")
"""Besides every valid value, the first value of each of these kinds is also simulated (the
rest of a kind, and boundaries and huge values, only through `memory`: a valid 2**40 layers
makes a step slow, not wrong)."""


def type_of(field) -> tuple[str, bool]:
    """(base type, optional) from a dataclass field's annotation (a string: the tables use
    `from __future__ import annotations`): 'int | None' -> ('int', True); tuple[int, ...] is
    'ranks'."""
    parts = [p.strip() for p in str(field.type).split("|")]
    base = next(p for p in parts if p != "None")
    return ("ranks" if base.replace(" ", "") == "tuple[int,...]" else base), "None" in parts


def schema() -> dict[tuple[str, str], object]:
    """(table, key) -> its dataclass field, for every table and every moved [training]
    spelling of a [parallelism] key (the loader takes both)."""
    keys = {(table, f.name): f for table, cls in TABLES.items() for f in fields(cls)}
    for key in LEGACY_TRAINING_KEYS:
        keys["training", key] = keys["parallelism", key]
    return keys


def toml_text(value) -> str:
    """A resolved value written back as TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(map(toml_text, value)) + "]"
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string (\uXXXX escapes)
    return repr(value)


@cache
def resolved(base) -> dict[tuple[str, str], object]:
    """(table, key) -> the value the base scenario resolves to (its file, the preset, defaults)."""
    scenario = load_scenario(base)
    return {(t, f.name): getattr(getattr(scenario, t), f.name) for t in TABLES
            for f in fields(TABLES[t])}


CHOICES = re.compile(r"is not one of (.*?)(?: \(did you mean|$)|; known: (.*)$")


@cache
def probe(table: str, key: str, base) -> tuple[str, tuple]:
    """What the loader says of a word (or a number) no key takes: ('choice', its allowed values
    as its message lists them), ('path', ()) for a file it cannot find, or ('text', ())."""
    kind = type_of(schema()[table, key])[0]
    word = "7919" if kind == "int" else '"zz-no-such-word"'
    result = run_zerosim("memory", base, "--json", "--set", f"{table}.{key}={word}")
    found = CHOICES.search(result.stderr.strip())
    if result.code == 2 and found:
        listed = found.group(1) or found.group(2)
        if found.group(1):
            return "choice", tuple(ast.literal_eval(f"[{listed}]"))  # the reprs one_of joined
        return "choice", tuple(name.strip() for name in listed.split(","))
    if result.code == 2 and "not found" in result.stderr:
        return "path", ()
    return "text", ()


@cache
def json_files_taken(table: str, key: str) -> tuple[str, ...]:
    """The repository's JSON files (scenarios/, profiles/) that a path key accepts on a base."""
    candidates = sorted((ROOT / "scenarios").rglob("*.json")) + sorted(
        (ROOT / "profiles").glob("*.json"))
    return tuple(json.dumps(str(path)) for path in candidates if any(
        run_zerosim("memory", base, "--set", f"{table}.{key}={json.dumps(str(path))}").code == 0
        for base in BASES))


def valid_values(table: str, key: str) -> list[str]:
    """Values of the key's type that the scenario tables would plausibly take: the bases'
    resolved values and the dataclass default, the listed choices, and a few small numbers."""
    field = schema()[table, key]
    kind, _ = type_of(field)
    given = [resolved(base)[canonical(table, key)] for base in BASES]
    if field.default is not MISSING:
        given.append(field.default)
    texts = [toml_text(v) for v in given if v is not None]
    choices = {c for base in BASES for c in probe(table, key, base)[1]}
    forms = {probe(table, key, base)[0] for base in BASES}
    texts += [toml_text(c) for c in sorted(choices, key=str)]
    if "path" in forms:
        texts += json_files_taken(table, key)
    if kind == "int":
        texts += ["1", "2", "4", "4.0"]
    elif kind == "float":
        numbers = [v for v in given if isinstance(v, (int, float)) and not isinstance(v, bool)]
        texts += ["0.5", "1", "1.0", *(repr(v * 2) for v in numbers),
                  *(repr(v / 2) for v in numbers)]
    elif kind == "bool":
        texts += ["true", "false"]
    elif kind == "str" and "text" in forms:
        texts += ['"abc"', '"é 漢 -_"', "'=1+2'"]
    elif kind == "ranks":
        texts += ["[]", "[0]", "[1, 3]", "[3]"]
    return list(dict.fromkeys(texts))


def others_only(table: str, key: str) -> set[str]:
    """Values the other bases resolve the key to and TINY does not."""
    tiny = toml_text(resolved(TINY)[canonical(table, key)])
    return {toml_text(resolved(base)[canonical(table, key)]) for base in BASES[1:]} - {tiny}


def canonical(table: str, key: str) -> tuple[str, str]:
    return ("parallelism", key) if table == "training" and key in LEGACY_TRAINING_KEYS else (
        table, key)


def values_of(table: str, key: str) -> dict[str, list[str]]:
    """Every kind of value for the key, as TOML text. A type no generator knows raises."""
    kind, optional = type_of(schema()[table, key])
    if kind not in ("int", "float", "bool", "str", "ranks"):
        raise AssertionError(f"{table}.{key}: no generator for its type {kind!r}; add one here")
    by_kind = {
        "valid": valid_values(table, key),
        "boundary": {"int": ["0", "1", "-0", str(CAP), str(CAP - 1), "1.0e0"],
                     "float": [str(2**33), str(2**23), "0", "0.0", "-0.0", "5e-324", "1e-300",
                               str(CAP), "1"],  # 2**33 MiB, 2**23 GiB: 2**53 bytes
                     "bool": ["1", "0", "True", '"false"'],
                     "str": ['" "', '"\\u0000"', json.dumps("w" * 4000), '"\\ud800"'],
                     "ranks": ["[0, 0]", f"[{CAP}]", "[4]", "[64]", "[-0]"]}[kind],
        "wrong_type": [text for other, texts in ANY_TYPE.items()
                       if other not in (kind, "int" if kind == "float" else kind)
                       for text in texts[:2]],
        "out_of_range": {"int": ["-1", str(-CAP), "0.5", "7919"],
                         "float": ["-1", "-1e-300", "1e308", str(-CAP)],
                         "bool": ["2", "-1"],
                         "str": ['"AUTO"', '"none "', '"zz-no-such-word"'],
                         "ranks": ["[-1]", "[1, -1]", "[7919]"]}[kind],
        **JUNK,
    }
    if optional:
        by_kind["empty"] = [*by_kind["empty"], "null", "None"]
    return by_kind


# How many values of each kind a key is given (every valid one): each key takes its share from
# a different place in the kind's list, so that across the keys of a table every value is used.
PER_KEY = {"boundary": 5, "wrong_type": 5, "out_of_range": 3, "nonfinite": 3, "huge": 3,
           "unicode_digits": 3, "empty": 3}


def cases(table: str) -> list[tuple[str, str, str, str]]:
    """(table, key, kind, TOML text) for every key written under `table` (the moved spellings
    under [training])."""
    found = []
    for offset, (t, key) in enumerate(k for k in schema() if k[0] == table):
        for kind, texts in values_of(t, key).items():
            if not texts:
                continue  # the table's test names the key and the kind it lacks
            share = PER_KEY.get(kind, len(texts))
            fixed = texts[:2] if kind == "boundary" and type_of(schema()[t, key])[0] == "float" \
                else []  # a float key always gets 2**33 (MiB) and 2**23 (GiB): 2**53 bytes
            rest, share = texts[len(fixed):], share - len(fixed)
            start = offset * share % len(rest)
            found += [(t, key, kind, text) for text in fixed + (rest[start:] + rest[:start])[:share]]
    return found


def without(raw: dict, table: str, key: str) -> dict:
    tables = copy.deepcopy(raw)
    for t, k in {(table, key), canonical(table, key)}:
        tables.get(t, {}).pop(k, None)
    return tables


def scenario_file(folder, base, table: str, key: str, text: str):
    """The base scenario rewritten with `key = text` in its table (its own value dropped)."""
    tables = without(tomllib.loads(base.read_text(encoding="utf-8")), table, key)
    tables.setdefault(table, {})
    lines = []
    for name, values in tables.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {toml_text(v)}" for k, v in values.items()]
        if name == table:
            lines.append(f"{key} = {text}")
    path = folder / "s.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
    return path


def problem(result, command: str) -> str | None:
    """Why a result breaks the promise (a result whose numbers are sane, or one line and
    exit 2), or None."""
    if result.code != 0:
        try:
            assert_one_line_error(result)
        except AssertionError:
            return f"exit {result.code}: {result.stderr.strip()[-300:]}"
        return None
    try:
        data = json.loads(result.stdout)
    except ValueError as exc:
        return f"not JSON ({exc}): {result.stdout[:200]}"
    stages = data["stages"] if command == "memory" else data
    if not stages:
        return "no stage in the result"
    bad = [x for x in numbers_in(data) if not (math.isfinite(x) and 0 <= x <= CAP)]
    return f"numbers outside [0, 2**53] or not finite: {bad[:5]}" if bad else None


def reproducer(command, base, route, table, key, text) -> str:
    text = text if len(text) < 80 else f"{text[:12]}...({len(text)} characters)"
    where = (f"--set '{table}.{key}={text}'" if route == "--set"
             else f"(a copy of it with [{table}] {key} = {text})")
    return f"zerosim {command} {base.relative_to(ROOT)} --json {where}"


@pytest.mark.parametrize("table", TABLES)
def test_every_key_of_the_table_takes_every_kind_of_value(table, tmp_path):
    """Every input of the table's keys (cases()), alternately through --set and a scenario
    file, on the three bases in turn; then every key and every kind must have been fed."""
    fed: dict[tuple[str, str], set[str]] = {}
    failures = []
    simulated = set()
    for index, (t, key, kind, text) in enumerate(cases(table)):
        base = BASES[index % len(BASES)]
        route = "--set" if index % 2 == 0 else "file"
        commands = ["memory"]
        larger = kind == "valid" and text in others_only(t, key)  # a 7B's hidden on TINY: slow
        if (kind == "valid" and not larger) or (kind in SIMULATED_KINDS
                                                and (t, key, kind) not in simulated):
            commands.append("simulate")
            simulated.add((t, key, kind))
        for command in commands:
            where = base if command == "memory" else TINY  # a step of the tiny model: ms
            if route == "--set":
                argv = [command, where, "--json", "--set", f"{t}.{key}={text}"]
            else:
                argv = [command, scenario_file(tmp_path, where, t, key, text), "--json"]
            generated("test_every_key_of_the_table_takes_every_kind_of_value")
            try:
                result = run_zerosim(*argv)
                why = problem(result, command)
            except Exception as exc:  # a traceback in the real command line
                why = f"raised {type(exc).__name__}: {str(exc)[:200]}"
            if not why and result.code == 0 and type_of(schema()[t, key])[0] in REFUSED.get(
                    kind, ()):
                why = f"a {kind} value was taken"
            if why:
                line = f"{reproducer(command, where, route, t, key, text)}: {why}"
                failures.append(line)
        fed.setdefault((t, key), set()).add(kind)
    assert not failures, f"{len(failures)} inputs broke the promise:\n" + "\n".join(failures[:20])
    expected = {k for k in schema() if k[0] == table}
    assert set(fed) == expected, expected - set(fed)
    unfed = {f"{t}.{k}": sorted(set(KINDS) - kinds) for (t, k), kinds in fed.items()
             if set(KINDS) - kinds}
    assert not unfed, unfed


def test_a_run_feeds_the_fuzz_budget_through_the_schema():
    """The inputs the table tests feed, counted before they run: with every table's test
    passing, each was fed (they check every key and kind), and the count alone passes the
    suite's budget."""
    total = sum(len(cases(table)) for table in TABLES)
    assert total >= FUZZ_BUDGET, total
    assert {(t, k) for t, k, _, _ in (c for table in TABLES for c in cases(table))} == set(schema())


def test_the_schema_covers_every_table_and_the_moved_spellings():
    """The keys fuzzed are the loader's: a table of config.TABLES, each dataclass field, the old
    [training] spelling of each [parallelism] key; and the loader refuses anything else."""
    keys = schema()
    assert {t for t, _ in keys} == set(TABLES)
    for table, cls in TABLES.items():
        assert {k for t, k in keys if t == table} >= {f.name for f in fields(cls)}
    assert {("training", k) for k in LEGACY_TRAINING_KEYS} <= set(keys)
    assert_one_line_error(run_zerosim("memory", TINY, "--set", "training.no_such_key=1"),
                          "unknown key training.no_such_key")


@pytest.mark.parametrize("table", TABLES)
def test_setting_a_key_to_the_value_it_resolves_to_changes_nothing(table):
    """`--set key=<what the scenario already resolves it to>` gives the same `memory` output,
    byte for byte, but for the notes on defaults (scenario/defaults.py): a key given is no
    longer a default, so its note goes, and no other comes."""
    for base in BASES:
        before = run_zerosim("memory", base, "--json")
        for (t, key), value in resolved(base).items():
            if t != table or value is None:
                continue
            generated("test_setting_a_key_to_the_value_it_resolves_to_changes_nothing")
            after = run_zerosim("memory", base, "--json", "--set", f"{t}.{key}={toml_text(value)}")
            assert after.code == 0, (base.name, key, value, after.stderr)
            was, now = before.json, after.json
            assert set(now.pop("notes", [])) <= set(was.pop("notes", [])), (base.name, key)
            assert now == was, (base.name, key, value)


SUBPROCESS_SAMPLES = [  # one per kind that the process boundary could treat differently
    ["--set", "training.micro_batch=nan"],
    ["--set", f"cluster.nodes={2**64 + 1}"],
    ["--set", "training.seq_len=٢"],
    ["--set", "variation.slow_ranks=[\"a\"]"],
    ["--set", "model.name=\udcff"],  # a byte that is not UTF-8, as Python hands argv over
]


@pytest.mark.parametrize("extra", SUBPROCESS_SAMPLES, ids=lambda e: ascii(e[-1]))
def test_the_process_answers_in_one_line(extra):
    """The same promise outside the test's process: the real command line, its exit status and
    its stderr as bytes."""
    done = subprocess.run([sys.executable, "-m", "zerosim", "memory", str(TINY), *extra],
                          capture_output=True, timeout=60, cwd=ROOT)
    lines = done.stderr.decode("utf-8", "replace").splitlines()
    assert (done.returncode, done.stdout, len(lines)) == (2, b"", 1), done.stderr
    assert lines[0].startswith("zerosim: error: "), lines[0]
