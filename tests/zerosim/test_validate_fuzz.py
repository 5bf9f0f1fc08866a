"""Property-based junk for `zerosim validate`: whatever a measurement file holds (JSON junk, a
real measurement truncated, mutated, given wrong types, NaN, huge numbers, missing keys, nested
junk, alone or beside a good run) and whatever its flags say, validate answers with a verdict
(exit 0 or 1) or refuses in one line (exit 2): never a traceback."""

import copy
import json

import pytest
from hypothesis import given, strategies as st

from tests.conftest import ROOT, assert_one_line_error, run_zerosim
from tests.fuzzing import fuzz, generated
from tests.zerosim.test_validate import from_simulation

PROFILE = ROOT / "profiles" / "cpu_gloo_tiny.json"
BASE = from_simulation(PROFILE, 2, (1.0, 1.1))  # a real measurement's shape, two timed steps
BASE_TEXT = json.dumps(BASE)

JUNK = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
              st.sampled_from([10**400, -1, 0, 1, 2, 2**53 + 1, 1e308, -0.0]),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6),
              st.sampled_from(["compute", "comm", "after_step", "all_reduce", "native", "\ud800",
                               "scenarios/tiny_gpt_4rank_cpu.toml"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8)


def _strict(constant: str):
    pytest.fail(f"validate --json wrote {constant}, which is not JSON")


def check(result, as_json: bool) -> None:
    """A verdict (exit 0 passes, 1 fails) or one line and exit 2."""
    if result.code == 2:
        assert_one_line_error(result)
        return
    assert result.code in (0, 1), (result.code, result.stderr)
    assert "Traceback" not in result.stderr
    if as_json:
        report = json.loads(result.stdout, parse_constant=_strict)
        assert report["within_tolerance"] is (result.code == 0)
        assert set(report["categories"]) == {"time", "memory"}
    else:
        last = result.stdout.splitlines()[-1]
        assert last == "verdict: PASSED" if result.code == 0 else last.startswith("verdict: FAILED")


def validate(tmp_path, texts, *flags):
    paths = []
    for i, text in enumerate(texts):
        paths.append(tmp_path / f"m{i}.json")
        paths[-1].write_text(text, encoding="utf-8")
    return run_zerosim("validate", *paths, "--profile", PROFILE, *flags)


def test_the_base_measurement_passes(tmp_path):
    """The fuzz starts from a measurement that passes, so a mutation can reach every verdict."""
    result = validate(tmp_path, [BASE_TEXT])
    assert result.code == 0, result.stdout
    check(result, False)


@fuzz(80)
@given(document=st.one_of(JUNK, st.dictionaries(st.sampled_from(sorted(BASE)), JUNK)),
       as_json=st.booleans())
def test_json_junk(tmp_path, document, as_json):
    generated("validate_measurement")
    check(validate(tmp_path, [json.dumps(document)], *["--json"] * as_json), as_json)


def _containers(node, depth=4):
    """The dicts and lists of a measurement down to `depth` (of a long list, its first and last
    two elements, so events do not crowd out ranks and settings): where a mutation can hit."""
    if not isinstance(node, (dict, list)) or not depth:
        return []
    children = list(node.values()) if isinstance(node, dict) else node[:2] + node[-2:]
    return [node, *(c for child in children for c in _containers(child, depth - 1))]


SCALES = st.sampled_from([0.0, 0.5, 0.9, 1.2, 3.0, -1.0, 1e6, float("nan")])


@st.composite
def mutated(draw):
    """BASE with 1-4 mutations: a value replaced by junk, a key or an element deleted, or a
    number scaled (the mutation that keeps a file readable and moves its verdict)."""
    m = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 4))):
        container = draw(st.sampled_from(_containers(m) or [m]))
        keys = sorted(container) if isinstance(container, dict) else range(len(container))
        if not keys:
            continue
        key = draw(st.sampled_from(keys))
        action = draw(st.sampled_from(["junk", "delete", "scale"]))
        if action == "delete":
            del container[key]
        elif action == "scale" and type(container[key]) in (int, float):
            container[key] *= draw(SCALES)
        else:
            container[key] = draw(JUNK)
    return m


@fuzz(160)
@given(m=mutated(), beside_a_good_run=st.booleans(), as_json=st.booleans())
def test_mutated_measurements(tmp_path, m, beside_a_good_run, as_json):
    generated("validate_measurement")
    texts = [BASE_TEXT] * beside_a_good_run + [json.dumps(m)]
    check(validate(tmp_path, texts, *["--json"] * as_json), as_json)


@fuzz(60)
@given(cut=st.integers(0, len(BASE_TEXT)), at=st.integers(0, len(BASE_TEXT) - 1),
       char=st.characters(), truncate=st.booleans())
def test_truncated_and_flipped_measurements(tmp_path, cut, at, char, truncate):
    generated("validate_measurement")
    text = BASE_TEXT[:cut] if truncate else BASE_TEXT[:at] + char + BASE_TEXT[at + 1:]
    check(validate(tmp_path, [text]), False)


FLAG_VALUES = st.one_of(
    st.sampled_from(["0", "-1", "nan", "inf", "1e400", "5", "0.001", "1e-300", "", "x", "1_0",
                     "profiles", "scenarios/tiny_gpt_4rank_cpu.toml", "/dev/null", "m0.json"]),
    st.text(max_size=8))
FLAGS = st.lists(st.one_of(
    st.tuples(st.sampled_from(["--time-tolerance-pct", "--memory-tolerance-pct",
                               "--tolerance-pct", "--profile", "--scenario"]), FLAG_VALUES),
    st.sampled_from([("--json",), ("--bogus",), ("-x",), ("--time-tolerance-pct",), ("--",)])),
    max_size=4)


@fuzz(100)
@given(flags=FLAGS, runs=st.integers(1, 3))
def test_junk_flags(tmp_path, monkeypatch, flags, runs):
    generated("validate_measurement")
    monkeypatch.chdir(tmp_path)  # relative junk paths resolve among the test's own files
    argv = [a for flag in flags for a in flag]
    check(validate(tmp_path, [BASE_TEXT] * runs, *argv), "--json" in argv)
