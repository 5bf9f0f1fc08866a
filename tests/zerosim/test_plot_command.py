"""`zerosim plot`, the command: the result files it reads (sweeps, traces, validate reports), the
figures it writes (self-contained HTML, PNG through kaleido), and its one-line errors. The command
runs through the real parser (run_zerosim: zerosim.cli.main), so a plot unregistered from the
CLI fails these tests."""

import json
import re

import pytest

from tests.conftest import assert_one_line_error, run_zerosim
from tests.zerosim.results import REPORTS, write_sweep
from zerosim.errors import InputError
from zerosim.tradeoffs import figures, plot_inputs, plots


# ---- result files -------------------------------------------------------------------------------

def test_csv_values_come_back_as_the_sweep_wrote_them():
    assert [plot_inputs.csv_value(t) for t in ("", "true", "false", "42", "-3", "1.5", "1e+09",
                                               "bf16", "1_000", "nan", "DDP")] == [
        None, True, False, 42, -3, 1.5, 1e9, "bf16", "1_000", "nan", "DDP"]


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_sweep_files_read_back_the_rows(tmp_path, rows, suffix):
    rows[0]["tokens_per_step"] = None
    path = write_sweep(tmp_path / f"sweep{suffix}", rows)
    assert plot_inputs.read_sweep(path, "memory", plots.MEMORY_COLUMNS) == rows


@pytest.mark.parametrize("mend, fragment", [
    (lambda rows: [{k: v for k, v in r.items() if k != "peak_bytes"} for r in rows],
     "missing column peak_bytes"),
    (lambda rows: [{**r, "peak_bytes": "lots"} for r in rows], "row 1: peak_bytes = 'lots'"),
    (lambda rows: [{**r, "stage": 4} for r in rows], "row 1: stage = 4 is not a ZeRO stage"),
    (lambda rows: [], "is empty"),
    (lambda rows: [{**r, "peak_bytes": 10**400} for r in rows], "row 1: peak_bytes = 1000"),
    (lambda rows: [{**r, "peak_bytes": 0} for r in rows], "not a positive number (a log axis)"),
    (lambda rows: [{k: None for k in rows[0]}], "row 1: stage = None"),
    (lambda rows: [{**r, "gpu_memory_bytes": 0} for r in rows],  # the limit line's log axis
     "row 1: gpu_memory_bytes = 0 is not a positive number (a log axis)"),
    (lambda rows: [{**r, "device_bytes": "full"} for r in rows],  # read where present: fits
     "row 1: device_bytes = 'full' is not a usable value"),
])
def test_unusable_sweep_is_one_line(tmp_path, rows, mend, fragment):
    path = write_sweep(tmp_path / "sweep.csv", mend(rows))
    with pytest.raises(InputError) as error:
        plot_inputs.read_sweep(path, "memory", plots.MEMORY_COLUMNS)
    assert str(path) in str(error.value) and fragment in str(error.value)


def read_sweep(path):
    return plot_inputs.read_sweep(path, "memory", plots.MEMORY_COLUMNS)


EVENT = {"stage": 3, "rank": 0, "stream": "compute", "queue": "compute", "name": "forward",
         "phase": "forward", "layer": 0, "op": None, "bytes": 0, "start_s": 0.0, "end_s": 1.0}


@pytest.mark.parametrize("content, read, fragment", [
    ({"traceEvents": [], "stepEvents": []}, read_sweep, "is a zerosim simulate --trace file, not "
     "a result --kind memory can draw (use --kind timeline)"),
    (REPORTS[0], plot_inputs.read_trace, "is a zerosim validate --json file, not a result --kind "
     "timeline can draw (use --kind calibration)"),
    ({"events": [], "memory_samples": [], "ranks": [], "stage": 1},
     lambda p: plot_inputs.read_reports([p]), "is a zero-real run --out measurement file, not a "
     "result --kind calibration can draw (`zerosim validate MEASUREMENT --json > report.json`"),
    ([{"stage": 0, "step_time_s": 1.0}], read_sweep, "holds a JSON list"),
    ({"zerosim_sweep": 2, "columns": [], "rows": []}, read_sweep, "sweep format 2; this zerosim "
     "reads format 1"),
    ({"traceEvents": []}, plot_inputs.read_trace, "not a result --kind timeline can draw (no "
     "stepEvents)"),
    ({"stepEvents": [{**EVENT, "end_s": -1.0}], "memorySamples": []}, plot_inputs.read_trace,
     "stepEvents[0] needs a stage 0-3 and numbers rank, start_s <= end_s"),
    ({"stepEvents": [EVENT], "memorySamples": [{"stage": 3, "rank": 0, "t_s": 0.0,
                                                "bytes_by_category": {"params": "many"}}]},
     plot_inputs.read_trace, "memorySamples[0] needs a stage 0-3, a number t_s"),
    ({**REPORTS[0], "stage": True}, lambda p: plot_inputs.read_reports([p]),
     "stage True is not a ZeRO stage"),
    ({**REPORTS[0], "metrics": [{"name": "peak_bytes", "measured": "1 GB", "simulated": 1}]},
     lambda p: plot_inputs.read_reports([p]), "'metrics' must be a list of {name, measured"),
])
def test_wrong_kind_of_file_says_what_it_is(tmp_path, content, read, fragment):
    path = tmp_path / "result.json"
    path.write_text(json.dumps(content))
    with pytest.raises(InputError) as error:
        read(path)
    assert str(path) in str(error.value) and fragment in str(error.value)


def test_a_sweep_csv_for_a_trace_says_so(tmp_path, rows):
    path = write_sweep(tmp_path / "s.csv", rows)
    with pytest.raises(InputError, match=r"s\.csv is a zerosim sweep CSV, not a trace \(use "
                                         r"--kind memory or tradeoff\)"):
        plot_inputs.read_trace(path)


def test_ragged_csv_names_its_line(tmp_path, write):
    path = write("s.csv", "stage,world_size\n0,4\n1,4,9\n")
    with pytest.raises(InputError, match="line 3 has 3 fields, the header has 2"):
        plot_inputs.read_sweep(path, "memory", ("stage",))


# ---- the command --------------------------------------------------------------------------------

def test_plot_writes_self_contained_html(tmp_path, rows):
    out = tmp_path / "fig.html"
    result = run_zerosim("plot", write_sweep(tmp_path / "s.csv", rows), "--kind", "memory", "-o", out,
                     "--title", "Seven & a half")
    assert result.code == 0, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"zerosim: wrote memory figure of {tmp_path / 's.csv'} to {out}"]
    html = out.read_text()
    assert re.search(r"/\*\*\s*\* plotly\.js v\d", html)  # the library itself, inline
    assert not re.search(r"<script[^>]*\bsrc=", html) and "cdn.plot.ly/plotly" not in html
    assert '"text":"Seven & a half"' in html


@pytest.mark.parametrize("make, argv, fragments", [
    (lambda p, rows: write_sweep(p / "s.csv", rows), ["--kind", "memory", "-o", "fig.svg"],
     ["write .html or .png, not '.svg'"]),
    (lambda p, rows: write_sweep(p / "s.csv", [{k: v for k, v in r.items() if k != "comm_time_s"}
                                               for r in rows]),
     ["--kind", "tradeoff", "-o", "fig.html"], ["s.csv: missing column comm_time_s"]),
    (lambda p, rows: write_sweep(p / "s.csv", [{k: v for k, v in r.items()
                                                if k != "gpu_memory_bytes"} for r in rows]),
     ["--kind", "tradeoff", "-o", "fig.html"], ["s.csv: missing column gpu_memory_bytes"]),
    (lambda p, rows: write_sweep(p / "s.json", rows), ["--kind", "timeline", "-o", "f.html"],
     ["s.json is a zerosim sweep --out file", "use --kind memory or tradeoff"]),
    (lambda p, rows: p / "absent.json", ["--kind", "calibration", "-o", "f.html"],
     ["validate report not found", "absent.json"]),
    (lambda p, rows: write_sweep(p / "s.csv", rows), ["--kind", "memory", "--stage", "1",
                                                      "-o", "f.html"],
     ["--stage applies to --kind timeline"]),
])
def test_plot_bad_input_is_one_line(tmp_path, rows, make, argv, fragments):
    path = make(tmp_path, rows)
    result = run_zerosim("plot", path, *[tmp_path / a if a.startswith("f") else a for a in argv])
    assert_one_line_error(result, *fragments)
    assert not list(tmp_path.glob("f*.*"))


def test_plot_several_files_only_for_calibration(tmp_path, rows):
    sweep = write_sweep(tmp_path / "s.csv", rows)
    result = run_zerosim("plot", sweep, sweep, "--kind", "memory", "-o", tmp_path / "f.html")
    assert_one_line_error(result, "--kind memory draws one result file, got 2")
    paths = []
    for i, r in enumerate(REPORTS):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(r))
    result = run_zerosim("plot", *paths, "--kind", "calibration", "-o", tmp_path / "c.html")
    assert result.code == 0, result.stderr
    assert '"ZeRO-3 (mean |error| 5.0%) r1.json"' in (tmp_path / "c.html").read_text()


def test_png_without_an_engine_says_what_to_install(tmp_path, rows, monkeypatch):
    monkeypatch.setattr(figures, "kaleido_ready", lambda: False)
    result = run_zerosim("plot", write_sweep(tmp_path / "s.csv", rows), "--kind", "memory", "-o",
                     tmp_path / "f.png")
    assert_one_line_error(result, "f.png", "pip install 'zerosim[png]'")


def test_timeline_stage_through_the_command(tmp_path, simulated):
    trace_path = tmp_path / "trace.json"
    trace_path.write_text(json.dumps(simulated[0]))
    assert_one_line_error(run_zerosim("plot", trace_path, "--kind", "timeline", "--stage", "1", "-o",
                                  tmp_path / "t.html"),
                          "trace.json: stage 1 is not in the trace (it holds stage 0, 3)")
    result = run_zerosim("plot", trace_path, "--kind", "timeline", "--stage", "3", "-o",
                     tmp_path / "t.html")
    assert result.code == 0, result.stderr
    assert "One simulated step of ZeRO-3" in (tmp_path / "t.html").read_text()
    old = {k: v for k, v in simulated[0].items() if k != "memorySamples"}
    trace_path.write_text(json.dumps(old))
    assert_one_line_error(run_zerosim("plot", trace_path, "--kind", "timeline", "-o",
                                  tmp_path / "t.html"), "without memorySamples")
