"""`zerosim sweep` within bounds (review U3, U4, T4, I12, I15): rows go to the file as they come,
so memory does not grow with the points; at most a few chunks are in flight; --jobs past the
cores is capped and said; a stopped pool leaves no thread behind to race the interpreter's exit;
text cells a spreadsheet would run as formulas are escaped; values equal after parsing are one
value."""

import csv
import io
import json
import multiprocessing
import os
import time
import tracemalloc
from concurrent.futures import Future, ProcessPoolExecutor

import pytest

from zerosim.tradeoffs import sweep, sweep_files

from tests.conftest import SCENARIOS, assert_one_line_error, run_zerosim

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
FAT_ROW_BYTES = 200_000
POINTS = 400  # 400 fat rows are 80 MB: held at once, they would pass the bound 4 times
BOUND_BYTES = 20 * 10**6  # the sweep's own (~3 MB), and 4 chunks of 6 fat rows (5 MB)


def fat_point(job):
    """A point's one row, fat: what memory grows by if rows are kept."""
    point = job[2]
    return [{"point": point.index, **{f"blob{i}": "x" * (FAT_ROW_BYTES // 4) for i in range(4)}}]


@pytest.mark.parametrize("suffix", [".csv", ".json"])
@pytest.mark.parametrize("jobs", [1, 2])
def test_rows_are_written_as_they_come_so_memory_does_not_grow_with_the_points(
        tmp_path, monkeypatch, suffix, jobs):
    monkeypatch.setattr(sweep, "_run_point", fat_point)  # forked workers inherit it
    monkeypatch.setattr(sweep, "default_jobs", lambda: 2)
    out = tmp_path / f"r{suffix}"
    argv = ("sweep", TINY, "--vary", "training.micro_batch=" + ",".join(
        map(str, range(1, POINTS + 1))), "--jobs", jobs, "--quiet", "--out", out)
    tracemalloc.start()
    try:
        result = run_zerosim(*argv)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.code == 0, result.stderr
    # bounded by the chunks in flight (2 per worker, 400 // (2 x 32) = 6 points each), not by
    # the points
    assert peak_bytes < BOUND_BYTES <= POINTS * FAT_ROW_BYTES / 4
    if suffix == ".csv":
        rows = list(csv.DictReader(io.StringIO(out.read_text())))
    else:
        rows = json.loads(out.read_text())["rows"]
    assert [int(r["point"]) for r in rows] == list(range(POINTS))  # in product order


def test_streamed_files_are_the_whole_objects_byte_for_byte():
    rows = [{"point": 0, "a": [1, 2], "b": "x\ny", "c": None}, {"point": 1, "a": [], "b": "",
                                                               "c": 1.5}]
    varies = [sweep.parse_vary("cluster.nodes=1,2")]
    streamed = "".join(sweep_files.json_pieces(iter(rows), "s.toml", varies, ["a.b=1"], None))
    whole = json.dumps({"zerosim_sweep": 1, "scenario": "s.toml", "deepspeed": None,
                        "vary": {"cluster.nodes": [1, 2]}, "overrides": ["a.b=1"],
                        "columns": ["point", "a", "b", "c"], "rows": rows}, indent=1) + "\n"
    assert streamed == whole
    assert "".join(sweep_files.csv_pieces(iter(rows))) == (
        'point,a,b,c\n0,"[1, 2]","x\ny",\n1,[],,1.5\n')


def test_at_most_the_chunks_in_flight_are_submitted_ahead():
    submitted, handed = [], []

    def submit(chunk):
        submitted.append(chunk)
        future = Future()
        future.set_result([f"row of {chunk}"])
        return future

    for row in sweep.in_order(submit, iter(range(100)), in_flight=4):
        handed.append(row)
        assert len(submitted) - len(handed) <= 4
    assert handed == [f"row of {i}" for i in range(100)]


def sleep(seconds):
    time.sleep(seconds)


def test_stopping_the_pool_leaves_no_thread_to_race_the_exit():
    """T4: a stopped pool's manager thread closed its wake-up pipe while atexit's
    concurrent.futures._python_exit wrote to it ("_send_bytes ... Bad file descriptor"): once
    _stop_workers returns, that thread and every worker are gone."""
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context(method),
                               initializer=sweep._init_worker, initargs=(os.getpid(),))
    futures = [pool.submit(sleep, 60) for _ in range(6)]
    deadline = time.monotonic() + 30
    while len(pool._processes or {}) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    manager, workers = pool._executor_manager_thread, list(pool._processes.values())
    sweep._stop_workers(pool)
    assert not manager.is_alive()
    assert not any(worker.is_alive() for worker in workers)
    assert all(future.done() for future in futures)


def test_jobs_past_the_cores_are_capped_and_said(tmp_path, monkeypatch):
    """U4: --jobs 1000 started 1,001 processes on a 2-core box."""
    started = []

    class Pool(ProcessPoolExecutor):
        def __init__(self, workers, *args, **kwargs):
            started.append(workers)
            super().__init__(workers, *args, **kwargs)

    monkeypatch.setattr(sweep, "ProcessPoolExecutor", Pool)
    monkeypatch.setattr(sweep, "default_jobs", lambda: 2)
    result = run_zerosim("sweep", TINY, "--vary", "training.micro_batch=1,2,3,4,5,6,7,8",
                         "--vary", "training.zero_stage=3", "--jobs", "1000", "--quiet",
                         "--out", tmp_path / "r.csv")
    assert result.code == 0, result.stderr
    assert started == [2]
    assert result.stderr.splitlines() == [
        "zerosim sweep: --jobs 1000 is more than the 2 cores this process may run on: "
        "2 processes"]
    assert len(list(csv.DictReader(io.StringIO((tmp_path / "r.csv").read_text())))) == 8


def test_text_that_a_spreadsheet_would_run_is_escaped(tmp_path):
    """I12, the review's reproducer: model names `=1+2` and `=HYPERLINK(...)` were written as
    formulas. Text starting with = + - @ tab or CR gets a leading quote (OWASP); numbers,
    negative ones too, stay numbers; JSON is no spreadsheet and keeps the text."""
    out = tmp_path / "s.csv"
    result = run_zerosim("sweep", TINY, "--vary", 'model.name==1+2,=HYPERLINK("http://evil")',
                         "--vary", "training.zero_stage=3", "--quiet", "--out", out)
    assert result.code == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert [r["model.name"] for r in rows] == ["'=1+2", "'=HYPERLINK(\"http://evil\")"]
    assert float(rows[0]["step_time_s"]) > 0
    cells = [sweep_files._csv_cell(v) for v in
             (-1.5, -3, "-1", "+1", "@SUM(A1)", "\tx", "\rx", "a=b", ["-x"], True, None)]
    assert cells == [-1.5, -3, "'-1", "'+1", "'@SUM(A1)", "'\tx", "'\rx", "a=b", '["-x"]',
                     "true", ""]
    out = tmp_path / "s.json"
    assert run_zerosim("sweep", TINY, "--vary", "model.name==1+2", "--vary",
                       "training.zero_stage=3", "--quiet", "--out", out).code == 0
    assert json.loads(out.read_text())["rows"][0]["model.name"] == "=1+2"


@pytest.mark.parametrize("values", ["1,1.0", "1.0,1e0", "1,1e0", "2,2.0"])
def test_values_equal_after_parsing_are_the_same_value(tmp_path, values):
    """I15: `1,1.0` was two points with identical rows while `1.0,1e0` was refused."""
    result = run_zerosim("sweep", TINY, "--vary", f"training.micro_batch={values}", "--quiet",
                         "--out", tmp_path / "r.csv")
    assert_one_line_error(result, "are the same value")
    with pytest.raises(Exception, match="same value"):
        sweep.parse_vary("variation.slow_ranks=[1],[1.0]")
    assert sweep.parse_vary("training.precision=fp16,bf16").values == ("fp16", "bf16")


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_a_late_bad_point_leaves_the_previous_file_and_no_temporary(tmp_path, suffix):
    """Rows stream to a temporary: the points before the bad one were written there, and the
    file appears whole or not at all."""
    out = tmp_path / f"r{suffix}"
    out.write_text("the previous results\n")
    result = run_zerosim("sweep", TINY, "--vary", "cluster.nodes=1,2,3,0", "--jobs", "1",
                         "--quiet", "--out", out)
    assert_one_line_error(result, "point 3", "cluster.nodes=0")
    assert out.read_text() == "the previous results\n"
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


def test_a_point_whose_device_bytes_pass_2_53_is_refused_as_simulate_refuses_it(tmp_path):
    """Review I6: a CUDA context of 2**33 MiB is 2**53 bytes on its own; simulate refuses it
    (check_device_scale), and a sweep point must not report it either."""
    shown = run_zerosim("sweep", SCENARIOS / "tiny_gpt_4rank_cpu.toml", "--vary",
                        "cluster.cuda_context_MiB=1,8589934592", "--out", tmp_path / "s.csv")
    assert shown.code == 2 and "device bytes" in shown.stderr and "2**53" in shown.stderr
    assert not (tmp_path / "s.csv").exists()
