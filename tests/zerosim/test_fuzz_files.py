"""The files zerosim reads besides scenarios, each a real one with one change (a value replaced
by junk, a key dropped or added, the text cut short) or junk outright: a calibration profile
(through `simulate`), sweep results and traces and validate reports (through `plot`),
measurements (through `validate`; test_validate_fuzz.py mutates real ones). Each input gives a
normal result or one line with exit 2, never a traceback. The tracebacks the fuzz found are
pinned by tests with their reproducer."""

import copy
import csv
import io
import json

import pytest
from hypothesis import given, strategies as st

from tests.conftest import ROOT, assert_one_line_error, run_zerosim
from tests.fuzzing import fuzz, generated
from tests.zerosim.results import REPORTS
from tests.zerosim.test_fuzz_commands import finite_steps, one_line_or
from tests.zerosim.test_input_fuzz import JSON_JUNK, TINY, TOML_JUNK
from zerosim.contract import MEASUREMENT_REQUIRED

PROFILE = ROOT / "profiles" / "cpu_gloo_tiny.json"


def _paths(value, prefix=()):
    """Every JSON path in value, the root first."""
    yield prefix
    items = value.items() if isinstance(value, dict) else enumerate(value) \
        if isinstance(value, list) else ()
    for key, item in items:
        yield from _paths(item, (*prefix, key))


@st.composite
def mutated_json(draw, base, paths):
    """`base` as JSON text with one change: a value replaced by junk, a key dropped, an unknown
    key added, or the text cut short."""
    data = copy.deepcopy(base)
    path = draw(paths if isinstance(paths, st.SearchStrategy) else st.sampled_from(paths))
    action = draw(st.sampled_from(["replace", "replace", "drop", "add", "cut"]))
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    if not path:
        data = draw(JSON_JUNK) if action == "replace" else data
    elif action == "replace":
        parent[path[-1]] = draw(JSON_JUNK)
    elif action == "drop":
        del parent[path[-1]]
    elif action == "add" and isinstance(parent, dict):
        parent[draw(st.text(max_size=8))] = draw(JSON_JUNK)
    text = json.dumps(data)
    if action == "cut":
        text = text[:draw(st.integers(0, len(text)))]
    return text


PROFILE_DATA = json.loads(PROFILE.read_text())
# Mostly the fit, which the simulator reads (the raw measurements are three quarters of the file;
# a residual is one of many like it).
FIT_PATHS = [p for p in _paths(PROFILE_DATA) if p[:1] == ("fit",) and "residuals_pct" not in p[:-1]]
OTHER_PATHS = [p for p in _paths(PROFILE_DATA) if p[:1] != ("fit",)]
PROFILE_PATHS = st.one_of(*[st.sampled_from(FIT_PATHS)] * 4, st.sampled_from(OTHER_PATHS))


@fuzz(250)
@given(text=mutated_json(PROFILE_DATA, PROFILE_PATHS), stage=st.sampled_from("0123"))
def test_profile_fuzz(scratch, text, stage):
    """The profile a scenario names: read, checked, then looked up by a whole simulated step."""
    generated("test_profile_fuzz")
    profile = scratch / "p.json"
    profile.write_text(text, encoding="utf-8")
    result = run_zerosim("simulate", TINY, "--json", "--stage", stage, "--set",
                         f"cluster.profile={json.dumps(str(profile))}")
    one_line_or(result, lambda result: finite_steps(result.json))


class Made(tuple):
    def __repr__(self) -> str:  # hypothesis shows the arguments of a failing example
        return "made"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A trace and a sweep as the commands write them: what the plot fuzz mutates."""
    folder = tmp_path_factory.mktemp("results")
    trace, sweep = folder / "t.json", folder / "s.json"
    assert run_zerosim("simulate", TINY, "--stage", "3", "--trace", trace).code == 0
    assert run_zerosim("sweep", TINY, "--vary", "cluster.nodes=1,2", "--out", sweep, "--jobs",
                       "1", "--quiet").code == 0
    return Made((json.loads(trace.read_text()), json.loads(sweep.read_text())))


def _plot(scratch, text, suffix, kind, extra=()):
    results = scratch / f"r{suffix}"
    results.write_text(text, encoding="utf-8", errors="surrogateescape")  # raw non-UTF-8 bytes
    out = scratch / "fig.html"
    out.unlink(missing_ok=True)
    result = run_zerosim("plot", results, "--kind", kind, "-o", out, *extra)

    def check(result):
        assert result.stdout == "" and out.stat().st_size > 0
    one_line_or(result, check)
    if result.code != 0:
        assert not out.exists()


def _sweep_csv(rows, columns) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([["" if r.get(c) is None else r.get(c) for c in columns] for r in rows])
    return out.getvalue()


@fuzz(100)
@given(data=st.data(), kind=st.sampled_from(["memory", "tradeoff", "timeline"]),
       as_csv=st.booleans())
def test_plot_sweep_fuzz(scratch, made, data, kind, as_csv):
    generated("test_plot_sweep_fuzz")
    _, sweep = made
    if as_csv:  # a cell replaced by junk text, or a column or a row dropped
        rows, columns = copy.deepcopy(sweep["rows"]), list(sweep["columns"])
        column = data.draw(st.sampled_from(columns))
        action = data.draw(st.sampled_from(["cell", "column", "row"]))
        if action == "cell":
            rows[data.draw(st.integers(0, len(rows) - 1))][column] = data.draw(
                st.one_of(st.text(max_size=10), TOML_JUNK))
        elif action == "column":
            columns.remove(column)
        else:
            rows.pop(data.draw(st.integers(0, len(rows) - 1)))
        _plot(scratch, _sweep_csv(rows, columns), ".csv", kind)
    else:
        _plot(scratch, data.draw(mutated_json(sweep, list(_paths(sweep)))), ".json", kind)


@fuzz(100)
@given(data=st.data(), stage=st.sampled_from([[], ["--stage", "3"], ["--stage", "0"]]))
def test_plot_trace_fuzz(scratch, made, data, stage):
    generated("test_plot_trace_fuzz")
    trace, _ = made
    small = {**trace, "traceEvents": trace["traceEvents"][:20]}  # the reader skips them
    _plot(scratch, data.draw(mutated_json(small, list(_paths(small)))), ".json", "timeline",
          stage)


@pytest.mark.parametrize("key, value", [("op", [1]), ("op", {"a": 1}), ("queue", [1]),
                                        ("bytes", "x"), ("phase", [1])])
def test_plot_of_a_trace_with_odd_types(scratch, made, key, value):
    """Found by the fuzz: `zerosim simulate TINY --stage 3 --trace t.json`, set t.json's
    stepEvents[0][key] = value (phase with op null), then `zerosim plot t.json --kind timeline
    -o fig.html` -> TypeError (unhashable) or ValueError (a format code)."""
    trace = copy.deepcopy(made[0])
    trace["stepEvents"][0].update({key: value, **({"op": None} if key == "phase" else {})})
    _plot(scratch, json.dumps(trace), ".json", "timeline")


REPORT_PATHS = list(_paths(REPORTS[0]))


@fuzz(60)
@given(text=mutated_json(REPORTS[0], REPORT_PATHS))
def test_plot_calibration_fuzz(scratch, text):
    generated("test_plot_calibration_fuzz")
    _plot(scratch, text, ".json", "calibration")


@pytest.mark.parametrize("report", [
    {"stage": 1, "metrics": [{"name": "compute_s", "simulated": 0.033}]},  # KeyError
    {**REPORTS[0], "mean_abs_error_pct": 10**400},  # OverflowError
], ids=["no-measured", "huge-mean"])
def test_plot_of_an_odd_validate_report(scratch, report):
    """Found by the fuzz: `zerosim plot r.json --kind calibration -o fig.html` with r.json one
    of these reports -> a traceback."""
    _plot(scratch, json.dumps(report), ".json", "calibration")


MEASUREMENT = {key: JSON_JUNK for key in MEASUREMENT_REQUIRED}


@fuzz(60)
@given(content=st.one_of(JSON_JUNK.map(json.dumps), st.text(max_size=40),
                         st.fixed_dictionaries({}, optional=MEASUREMENT).map(json.dumps)),
       extra=st.sampled_from([[], ["--json"], ["--profile", str(PROFILE)],
                              ["--scenario", str(TINY)], ["--profile", "nope.json"]]))
def test_validate_fuzz(scratch, content, extra):
    """Measurement files far from a real one (test_validate_fuzz.py mutates real ones)."""
    generated("test_validate_fuzz")
    path = scratch / "m.json"
    path.write_text(content, encoding="utf-8")
    assert_one_line_error(run_zerosim("validate", path, *extra))  # none is a measurement


@pytest.mark.parametrize("text", ["[" * 5000 + "]" * 5000, '{"x": ' + "1" * 5000 + "}"],
                         ids=["5000-deep", "5000-digits"])
@pytest.mark.parametrize("command", [["validate"], ["plot", "--kind", "timeline", "-o"]],
                         ids=["validate", "plot"])
def test_deep_or_huge_json_measurement_or_result_is_one_line(scratch, text, command):
    """`zerosim validate m.json` and `zerosim plot m.json --kind timeline -o fig.html` with m.json
    5000 nested arrays (RecursionError) or an integer of 5000 digits (ValueError)."""
    path = scratch / "m.json"
    path.write_text(text)
    argv = [command[0], path, *command[1:], *([scratch / "fig.html"] if command[0] == "plot"
                                              else [])]
    assert_one_line_error(run_zerosim(*argv), str(path))
