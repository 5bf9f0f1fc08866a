"""Every zerosim command fed generated input: each input gives a normal result (checked for what
it must hold) or exactly one line on stderr with exit 2, never a traceback. test_input_fuzz.py
covers the scenario readers through `memory`; here are `simulate`, `collective`, `sweep` and
`plan`, and the limits every reader shares: numbers beyond 2**53, nesting, text that is not UTF-8.
test_fuzz_files.py fuzzes the other files (profile, sweep results, traces, validate reports,
measurements) through `simulate`, `plot` and `validate`. Scenarios are the tiny 4-rank one, so
thousands of inputs run in seconds (a run is a few milliseconds in process); inputs that are
merely slow (thousands of layers, per-rank simulation of hundreds of ranks) are left out, since
speed is bench/'s business."""

import csv
import io
import json
import math
from pathlib import Path

from hypothesis import given, strategies as st

from tests.conftest import ROOT, assert_one_line_error, run_zerosim
from tests.fuzzing import fuzz, generated
from tests.zerosim.test_input_fuzz import (ALL_KEYS, TINY, TOML_JUNK, plausible,
                                          within_cap)
from zerosim.contract import OPS, SIM_MODES

# Keys whose junk only makes a step slow, not wrong: thousands of layers or buckets. They are
# fuzzed through `memory` (test_input_fuzz.py). Every rank of hundreds simulated one by one is
# slow too: a world-size key is fuzzed with the default mode.
SLOW_KEYS = ("model.layers", "training.reduce_bucket_MiB", "training.allgather_bucket_MiB")
STEP_KEYS = [k for k in ALL_KEYS if not k.startswith(SLOW_KEYS)]
WORLD_KEYS = ("cluster.nodes", "cluster.gpus_per_node")
JUNK_NUMBERS = st.one_of(TOML_JUNK, st.sampled_from(["1_000", "0", "-1", "2**53", "1e400", "nan",
                                                     "9007199254740993", "x"]))


def pick(data, bad: bool, good, junk):
    return data.draw(junk if bad else good)


def junk_in(data, arguments: tuple[str, ...]) -> str | None:
    """Which one argument of this input is junk, or None (half the inputs): one at a time, so
    that most inputs reach the engine and the reports, not only the argument checks."""
    return data.draw(st.sampled_from([*[None] * len(arguments), *arguments]))


def one_line_or(result, check) -> None:
    if result.code == 0:
        check(result)
    else:
        assert_one_line_error(result)


def capped(result) -> None:
    assert within_cap(result.json)


def finite_steps(rows) -> None:
    assert within_cap(rows)
    for row in rows:
        assert 0 <= row["compute_s"] <= row["step_time_s"] < math.inf


# ---- simulate, collective, sweep, plan --------------------------------------------------------

@fuzz(150)
@given(key=st.sampled_from(STEP_KEYS), data=st.data())
def test_simulate_fuzz(scratch, key, data):
    bad = junk_in(data, ("value", "mode", "stage", "trace"))
    value = pick(data, bad == "value", plausible(key), TOML_JUNK)
    mode = "auto" if key in WORLD_KEYS else pick(  # per-rank at 512 ranks is slow, not wrong
        data, bad == "mode", st.sampled_from(SIM_MODES), st.just("fast"))
    stage = pick(data, bad == "stage", st.sampled_from([[], ["--stage", "0"], ["--stage", "3"]]),
                 st.sampled_from([["--stage", "4"], ["--stage", "one"], ["--stage"]]))
    trace = pick(data, bad == "trace", st.sampled_from([None, "t.json"]),
                 st.sampled_from(["no/such/dir/t.json", "."]))
    generated("test_simulate_fuzz")
    argv = ["simulate", TINY, "--json", "--mode", mode, "--set", f"{key}={value}", *stage]
    if trace is not None:
        (scratch / "t.json").unlink(missing_ok=True)
        argv += ["--trace", scratch / trace]
    result = run_zerosim(*argv)

    def check(result):
        finite_steps(result.json)
        if trace is not None:
            assert "stepEvents" in json.loads((scratch / trace).read_text())
    one_line_or(result, check)
    if result.code != 0 and trace is not None:
        assert not (scratch / "t.json").exists()


@fuzz(200)
@given(key=st.sampled_from([k for k in STEP_KEYS if k.startswith(("cluster.", "variation."))]),
       data=st.data())
def test_collective_fuzz(key, data):
    generated("test_collective_fuzz")
    bad = junk_in(data, ("value", "op", "size", "ranks"))
    value = pick(data, bad == "value", plausible(key), TOML_JUNK)
    op = pick(data, bad == "op", st.sampled_from(OPS), st.sampled_from(["all-reduce", "", "x"]))
    size = pick(data, bad == "size", st.sampled_from(["1", "1024", "1e6", "1e9", "2e15"]),
                JUNK_NUMBERS)
    extra = pick(data, bad == "ranks", st.sampled_from([[], ["--ranks", "2"], ["--ranks", "3"]]),
                 st.sampled_from([["--ranks", "0"], ["--ranks", "x"], ["--ranks", "99"]]))
    if key not in WORLD_KEYS:  # every rank's links, chunk by chunk, is slow at 512 ranks
        extra = [*extra, "--mode", data.draw(st.sampled_from(SIM_MODES))]
    as_json = data.draw(st.booleans())
    result = run_zerosim("collective", TINY, "--op", op, "--size-bytes", size, "--set",
                         f"{key}={value}", *extra, *(["--json"] if as_json else []))

    def check(result):
        if as_json:
            out = result.json
            assert 0 < out["time_s"] < math.inf and 2 <= out["ranks"] <= 2**53
        else:
            assert "busbw" in result.stdout
    one_line_or(result, check)


def _sweep_rows(path: Path):
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return json.loads(text)["rows"]
    return list(csv.DictReader(io.StringIO(text)))


@fuzz(100)
@given(key=st.sampled_from(STEP_KEYS), data=st.data())
def test_sweep_fuzz(scratch, key, data):
    bad = junk_in(data, ("values", "key", "vary", "out"))
    texts = data.draw(st.lists(TOML_JUNK if bad == "values" else plausible(key), min_size=1,
                               max_size=3))
    if bad == "key":
        key = data.draw(st.sampled_from(["model.layers", "cluster.node", "x", ""]))
        texts = data.draw(st.lists(st.sampled_from(["1", "2", "-1", "'2'"]), min_size=1,
                                   max_size=3))  # a few layers: thousands are slow, not wrong
    text = pick(data, bad == "vary", st.just(f"{key}={','.join(texts)}"), st.text(max_size=30))
    out = pick(data, bad == "out", st.sampled_from(["out.csv", "out.json"]),
               st.sampled_from(["out.txt", "no/such/dir/out.json", "."]))
    generated("test_sweep_fuzz")
    target = scratch / out
    for name in ("out.csv", "out.json"):
        (scratch / name).unlink(missing_ok=True)
    result = run_zerosim("sweep", TINY, "--vary", text, "--out", target, "--jobs", "1",
                         "--quiet")

    def check(result):
        rows = _sweep_rows(target)
        assert rows and all(r["step_time_s"] not in ("", None) for r in rows)
        assert within_cap(rows)
    one_line_or(result, check)
    if result.code != 0:
        assert not target.is_file()


@fuzz(100)
@given(key=st.sampled_from([k for k in STEP_KEYS if not k.startswith("variation.jitter")]),
       data=st.data())
def test_plan_fuzz(key, data):
    generated("test_plan_fuzz")
    bad = junk_in(data, ("value", "budget"))
    budget = pick(data, bad == "budget", st.sampled_from([None, "0.001", "1", "4", "80", "1e6"]),
                  JUNK_NUMBERS)
    argv = ["plan", TINY, "--set", f"{key}={pick(data, bad == 'value', plausible(key), TOML_JUNK)}",
            *data.draw(st.sampled_from([[], ["--json"], ["--mode", "symmetric"]])),
            *(["--gpu-memory-GiB", budget] if budget is not None else [])]
    result = run_zerosim(*argv)

    def check(result):
        if "--json" in argv:
            plan = result.json
            assert [s["stage"] for s in plan["stages"]] == [0, 1, 2, 3]
            assert all(c["peak_bytes"] <= plan["gpu_memory_bytes"] for c in plan["configurations"])
        else:
            assert result.stdout.startswith("zerosim plan:")
    one_line_or(result, check)


# ---- limits: numbers beyond 2**53, nesting, text that is not UTF-8 -----------------------------

SIZES = ("model.hidden", "model.layers", "model.ffn", "model.vocab", "model.max_seq_len",
         "model.params", "training.seq_len", "training.micro_batch", "cluster.nodes",
         "cluster.gpus_per_node", "cluster.hbm_GiB", "training.reduce_bucket_MiB")


@fuzz(100)
@given(sets=st.lists(st.tuples(st.sampled_from(SIZES), st.integers(0, 54)), min_size=1,
                     max_size=4, unique_by=lambda s: s[0]),
       scenario=st.sampled_from([TINY, ROOT / "scenarios" / "llama2_7b_64gpu.toml",
                                 ROOT / "scenarios" / "zero_paper_7b5_64gpu.toml"]))
def test_scale_fuzz(sets, scenario):
    """Sizes of 2**0 .. 2**54 together: every number `memory` reports stays within 2**53, or the
    scenario is refused in one line naming what is too large."""
    generated("test_scale_fuzz")
    result = run_zerosim("memory", scenario, "--json",
                         *(x for key, power in sets for x in ("--set", f"{key}={2**power}")))
    one_line_or(result, capped)


# ---- nesting and text that is not UTF-8, through every reader ----------------------------------

READERS = ("scenario", "--set", "--vary", "hf_config", "deepspeed", "profile")


@fuzz(60)
@given(reader=st.sampled_from(READERS), depth=st.integers(1, 6000), table=st.booleans())
def test_nesting_fuzz(scratch, reader, depth, table):
    """Arrays (or tables) inside each other, deep enough to exhaust Python's recursion limit."""
    generated("test_nesting_fuzz")
    toml = "{a = " * depth + "1" + "}" * depth if table else "[" * depth + "]" * depth
    deep_json = '{"a": ' * depth + "1" + "}" * depth if table else "[" * depth + "]" * depth
    argv = ["memory", TINY]
    if reader == "scenario":
        argv[1] = scratch / "s.toml"
        argv[1].write_text(TINY.read_text() + f"\n[variation]\nslow_ranks = {toml}\n")
    elif reader in ("--set", "--vary"):
        argv = (["sweep", TINY, "--vary", f"model.name={toml},x", "--out", scratch / "o.csv",
                 "--jobs", "1", "--quiet"] if reader == "--vary"
                else [*argv, "--set", f"model.name={toml}"])
    elif reader == "hf_config":
        (scratch / "config.json").write_text('{"model_type": "gpt2", "x": ' + deep_json + "}")
        argv += ["--set", f"model.hf_config={json.dumps(str(scratch / 'config.json'))}"]
    elif reader == "deepspeed":
        (scratch / "ds.json").write_text('{"x": ' + deep_json + "}")
        argv += ["--deepspeed", scratch / "ds.json"]
    else:
        (scratch / "p.json").write_text('{"format": "zerosim-profile", "version": 1, "fit": {}, '
                                         '"provenance": {"x": ' + deep_json + "}}")
        argv += ["--set", f"cluster.profile={json.dumps(str(scratch / 'p.json'))}"]
    result = run_zerosim(*argv)
    if depth > 32:  # deeper than any real input: refused whatever the reader
        assert_one_line_error(result, "nested more than 32 levels deep")
    else:
        one_line_or(result, lambda result: None)


@fuzz(40)
@given(name=st.text(st.sampled_from("abzé漢-_\udc80\udcc3\udcff"), min_size=1, max_size=6),
       out=st.sampled_from(["o.csv", "o.json"]))
def test_names_that_are_not_utf8_fuzz(scratch, name, out):
    """A name given on a command line whose bytes are not UTF-8 (Python hands them over as lone
    surrogates, '\udcff'): refused in one line before a sweep writes anything; a UTF-8 one
    comes back from the CSV or JSON rows as it was given (in CSV, escaped if it reads as a
    formula)."""
    generated("test_names_that_are_not_utf8_fuzz")
    target = scratch / out
    target.unlink(missing_ok=True)
    result = run_zerosim("sweep", TINY, "--set", f"model.name={name}", "--vary",
                         "training.zero_stage=0", "--out", target, "--jobs", "1", "--quiet")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        assert_one_line_error(result, "is not UTF-8 text")
        assert not target.exists()
    else:
        assert result.code == 0, result.stderr
        # OWASP's CSV-injection advice: a cell a spreadsheet would run as a formula (starting
        # with = + - @, a tab or a carriage return) is written after a single quote.
        formula = out.endswith(".csv") and name.startswith(("=", "+", "-", "@", "\t", "\r"))
        assert _sweep_rows(target)[0]["model.name"] == ("'" + name if formula else name)
