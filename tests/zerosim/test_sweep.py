"""`zerosim sweep`: the cartesian product in a known order, each row equal to what `simulate` and
`memory` print for that point, the same file whatever the number of processes, and bad input
refused before any work with one line. Then the progress on stderr that sweep and a long
`simulate` share. (Signals: test_sweep_signals.py; full disks: test_full_disk.py.)"""

import csv
import io
import json

import pytest

from zerosim.cli import progress
from zerosim.cli.progress import ProgressBar
from zerosim.contract import STAGE_NAMES
from zerosim.tradeoffs.sweep import parse_vary, points

from tests.conftest import SCENARIOS, ZERO_PAPER, assert_one_line_error, run_zerosim

NODES = (1, 2, 4, 8, 16, 32, 64, 128)


def read_csv(path):
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


@pytest.fixture(scope="module")
def paper_sweep(tmp_path_factory):
    """The issue's sweep: stages 0-3 x nodes 1..128 for the ZeRO paper's 7.5B model."""
    out = tmp_path_factory.mktemp("sweep") / "paper.csv"
    result = run_zerosim("sweep", ZERO_PAPER, "--vary", "training.zero_stage=0,1,2,3",
                         "--vary", "cluster.nodes=" + ",".join(map(str, NODES)), "--out", out)
    assert result.code == 0, result.stderr
    return out, result


def test_sweep_is_the_product_in_order_with_every_column(paper_sweep):
    out, result = paper_sweep
    rows = read_csv(out)
    assert len(rows) == 4 * len(NODES)
    # the first --vary changes slowest
    assert [(int(r["stage"]), int(r["cluster.nodes"])) for r in rows] == \
        [(s, n) for s in range(4) for n in NODES]
    assert [int(r["point"]) for r in rows] == list(range(len(rows)))
    columns = list(rows[0])
    assert columns[:3] == ["point", "training.zero_stage", "cluster.nodes"]
    for column in ("peak_bytes", "step_time_s", "comm_time_s", "comm_bytes_all_gather",
                   "model.params", "cluster.gpus_per_node", "training.precision"):
        assert column in columns
    assert "32 points, 32 rows" in result.stderr.splitlines()[-1]


@pytest.mark.parametrize("stage,nodes", [(0, 1), (1, 8), (2, 2), (3, 128)])
def test_each_row_matches_simulate_and_memory(paper_sweep, stage, nodes):
    row = next(r for r in read_csv(paper_sweep[0])
               if int(r["stage"]) == stage and int(r["cluster.nodes"]) == nodes)
    sim = run_zerosim("simulate", ZERO_PAPER, "--stage", stage, "--set", f"cluster.nodes={nodes}",
                      "--json").json[0]
    mem = run_zerosim("memory", ZERO_PAPER, "--set", f"cluster.nodes={nodes}", "--json").json
    mem_row = mem["stages"][stage]
    for key in ("step_time_s", "compute_s", "exposed_comm_s", "comm_time_s"):
        assert float(row[key]) == sim[key], key  # exact: floats written in round-trip form
    assert int(row["comm_bytes_per_rank_total"]) == sim["comm_bytes_per_rank_total"]
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        assert int(row[f"comm_bytes_{op}"]) == sim["comm_bytes_per_rank"].get(op, 0)
    assert int(row["simulated_peak_bytes"]) == sim["peak_bytes"]
    for key in ("params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
                "buffers_bytes", "peak_bytes"):
        assert int(row[key]) == mem_row[key], key
    assert row["fits_gpu_memory"] == ("true" if mem_row["fits_gpu_memory"] else "false")
    assert int(row["world_size"]) == mem["world_size"] == 8 * nodes
    assert float(row["gpu_seconds_per_step"]) == pytest.approx(sim["step_time_s"] * 8 * nodes)


def test_same_input_same_file_whatever_the_processes(tmp_path):
    args = ["sweep", SCENARIOS / "llama2_7b_64gpu.toml", "--vary", "cluster.nodes=1,4",
            "--vary", "training.micro_batch=1,2", "--quiet"]
    outputs = []
    for jobs, name in ((1, "a.json"), (2, "b.json"), (2, "c.json")):
        assert run_zerosim(*args, "--jobs", jobs, "--out", tmp_path / name).code == 0
        outputs.append((tmp_path / name).read_bytes())
    assert outputs[0] == outputs[1] == outputs[2]
    data = json.loads(outputs[0])
    assert data["vary"] == {"cluster.nodes": [1, 4], "training.micro_batch": [1, 2]}
    assert data["columns"] == list(data["rows"][0])
    assert len(data["rows"]) == 2 * 2 * 4  # no zero_stage varied: all four stages per point
    # the micro-batch doubles activations and tokens, not model states
    by = {(r["cluster.nodes"], r["training.micro_batch"], r["stage"]): r for r in data["rows"]}
    one, two = by[(4, 1, 3)], by[(4, 2, 3)]
    assert two["tokens_per_step"] == 2 * one["tokens_per_step"]
    assert two["model_states_bytes"] == one["model_states_bytes"]
    assert two["activations_bytes"] > one["activations_bytes"]


def test_values_split_on_commas_outside_brackets_and_quotes():
    assert parse_vary("model.name=\"a,b\",c").values == ("a,b", "c")
    assert parse_vary("variation.slow_ranks=[1,2],[3]").values == ([1, 2], [3])
    assert parse_vary("training.precision=bf16,fp32").values == ("bf16", "fp32")


def test_points_follow_the_varied_stage_else_all_four():
    varies = [parse_vary("cluster.nodes=1,2"), parse_vary("training.zero_stage=3,1")]
    got = [(p.overrides, p.stages) for p in points(varies, ["cluster.gpus_per_node=4"])]
    # () = the loaded scenario's zero_stage, so 1.0 simulates stage 1 as `--set` would
    assert got == [(("cluster.gpus_per_node=4", "cluster.nodes=1", "training.zero_stage=3"), ()),
                   (("cluster.gpus_per_node=4", "cluster.nodes=1", "training.zero_stage=1"), ()),
                   (("cluster.gpus_per_node=4", "cluster.nodes=2", "training.zero_stage=3"), ()),
                   (("cluster.gpus_per_node=4", "cluster.nodes=2", "training.zero_stage=1"), ())]
    assert next(points([parse_vary("cluster.nodes=1")], [])).stages == (0, 1, 2, 3)


def test_rows_carry_the_resolved_stage_and_every_input(tmp_path):
    out = tmp_path / "r.json"
    result = run_zerosim("sweep", SCENARIOS / "tiny_gpt_4rank_cpu.toml", "--quiet", "--out", out,
                         "--vary", "training.zero_stage=1.0,3", "--set", "variation.slow_ranks=[1]",
                         "--set", "variation.slowdown=3")
    assert result.code == 0, result.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(r["training.zero_stage"], r["stage"]) for r in rows] == [(1.0, 1), (3, 3)]
    assert type(rows[0]["stage"]) is int
    assert rows[0]["variation.slow_ranks"] == [1] and rows[0]["variation.slowdown"] == 3
    out = tmp_path / "all.csv"
    assert run_zerosim("sweep", SCENARIOS / "tiny_gpt_4rank_cpu.toml", "--quiet", "--out", out,
                       "--vary", "cluster.nodes=1").code == 0
    header = out.read_text().splitlines()[0].split(",")
    # the scenario's zero_stage would mislabel the rows of the other stages: only `stage` says it
    assert "training.zero_stage" not in header and "stage" in header
    assert "variation.jitter_pct" in header


def test_rows_say_which_compute_model_timed_them():
    """Unset, cluster.compute_model means "op" where a shaped model runs on a GPU with a spec and
    "flat" elsewhere or once compute_efficiency is set: each row names the one that timed it."""
    from zerosim.scenario.load import load_scenario
    from zerosim.tradeoffs.sweep import rows_of

    def model(path, *sets):
        rows = rows_of(load_scenario(path, list(sets)), [3], {})
        return rows[0]["cluster.compute_model"]

    llama = SCENARIOS / "llama2_7b_64gpu.toml"
    assert model(llama) == "op"
    assert model(llama, "cluster.compute_efficiency=0.4") == "flat"
    assert model(ZERO_PAPER) == "flat"  # a bare Ψ has no ops to time
    assert model(SCENARIOS / "tiny_gpt_4rank_cpu.toml") == "flat"  # the CPU box has no op model


@pytest.mark.parametrize("argv,fragments", [
    (["--vary", "cluster.nodes=1,2", "--out", "r.txt"], ["r.txt", ".csv or .json"]),
    (["--vary", "cluster.nodez=1,2", "--out", "r.csv"], ["cluster.nodez", "nodes"]),
    (["--vary", "cluster.nodes=1,,2", "--out", "r.csv"], ["empty value"]),
    (["--vary", "cluster.nodes=2,2", "--out", "r.csv"], ["same value"]),
    (["--vary", "cluster.nodes=1", "--vary", "cluster.nodes=2", "--out", "r.csv"], ["twice"]),
    (["--vary", "cluster.nodes=1,2", "--set", "cluster.nodes=4", "--out", "r.csv"],
     ["both set", "varied"]),
    (["--vary", "cluster.nodes=1,0", "--out", "r.csv"], ["point 1", "cluster.nodes=0", ">= 1"]),
    (["--vary", "cluster.nodes=1", "--out", "no/such/dir/r.csv"], ["cannot write", "no folder"]),
    (["--vary", "cluster.nodes=1", "--jobs", "0", "--out", "r.csv"], ["--jobs"]),
    (["--vary", "cluster.nodes=" + ",".join(map(str, range(1, 1001))),
      "--vary", "training.micro_batch=" + ",".join(map(str, range(1, 1002))), "--out", "r.csv"],
     ["1,001,000 points", "1000 x 1001", "at most 1,000,000"]),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, monkeypatch, argv, fragments):
    monkeypatch.chdir(tmp_path)
    result = run_zerosim("sweep", ZERO_PAPER, "--quiet", *argv)
    assert_one_line_error(result, *fragments)
    assert list(tmp_path.iterdir()) == []  # no results file, no temporary left behind


def test_a_late_bad_point_of_a_short_sweep_is_one_line_without_quiet(tmp_path):
    """Progress starts only past its delay, so a short sweep that fails says one line."""
    result = run_zerosim("sweep", ZERO_PAPER, "--vary", "cluster.nodes=1,2,4,0",
                         "--out", tmp_path / "r.csv")
    assert_one_line_error(result, "point 3", "cluster.nodes=0")


class Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


def test_progress_bar_redraws_on_a_terminal_and_stays_short_in_a_log():
    log = Stream(tty=False)
    bar = ProgressBar("sweep:", stream=log, width=10)
    for done in range(1, 101):
        bar(done, 100)
    lines = log.getvalue().splitlines()
    assert len(lines) == 11  # the first point, then one per tenth
    assert lines[0].startswith("sweep: [..........] 1/100 points")
    assert lines[-1].startswith("sweep: [##########] 100/100 points")
    term = Stream(tty=True)
    bar = ProgressBar("sweep:", stream=term, width=4)
    bar(1, 2)
    bar(2, 2)
    assert term.getvalue().startswith("\rsweep: [##..] 1/2 points")
    assert term.getvalue().count("\n") == 1 and term.getvalue().endswith("\n")


def test_progress_shows_only_once_the_command_has_run_its_delay():
    now = [10.0]
    log = Stream(tty=False)
    bar = ProgressBar("simulate:", stream=log, width=4, unit="collectives", delay_s=2.0,
                      start_s=9.0, clock=lambda: now[0])
    bar(1, 4)
    now[0] = 10.9
    bar(2, 4)
    assert log.getvalue() == ""  # 1.9 s since the command started
    now[0] = 11.5
    bar(3, 4)
    bar(4, 4)
    assert log.getvalue().splitlines() == ["simulate: [###.] 3/4 collectives, 2.5 s",
                                           "simulate: [####] 4/4 collectives, 2.5 s"]
    bar = ProgressBar("simulate:", stream=log, width=4, unit="collectives")
    bar(0, 0)  # a step without collectives (one GPU) is done, not a division by zero
    assert log.getvalue().splitlines()[-1].startswith("simulate: [####] 0/0 collectives")


def done_and_total(line):
    """'zerosim simulate: ZeRO-3 (4 of 4) [###...] 7/12 collectives, 0.1 s' -> (7, 12)."""
    done, total = line.split("] ")[1].split(" ")[0].split("/")
    return int(done), int(total)


def test_simulate_shows_its_progress_per_stage_and_per_collective_under_jitter(tmp_path,
                                                                             monkeypatch):
    """Jitter simulates every rank (the slow mode): progress counts the step's collectives as
    they complete, up to the number each rank runs (the trace's, an independent count)."""
    argv = ("simulate", SCENARIOS / "tiny_gpt_4rank_cpu.toml", "--set", "variation.jitter_pct=5",
            "--set", "cluster.nodes=2", "--trace", tmp_path / "t.json",
            "--set", "training.framework='zero'")  # said: no note on stderr beside progress
    monkeypatch.setattr(progress, "PROGRESS_AFTER_S", 1e9)
    quiet = run_zerosim(*argv)
    monkeypatch.setattr(progress, "PROGRESS_AFTER_S", 0.0)
    result = run_zerosim(*argv)
    assert result.code == quiet.code == 0 and quiet.stderr == ""
    assert result.stdout == quiet.stdout  # progress goes to stderr only
    events = json.loads((tmp_path / "t.json").read_text())["stepEvents"]
    lines = result.stderr.splitlines()
    for i, name in STAGE_NAMES.items():
        label = f"zerosim simulate: {name} ({i + 1} of 4) ["
        counts = [done_and_total(line) for line in lines if line.startswith(label)]
        collectives = sum(1 for e in events if e["stage"] == i and e["rank"] == 0
                          and e["stream"] == "comm")
        assert counts[0] == (1, collectives) and counts[-1] == (collectives, collectives)
        assert [done for done, _ in counts] == sorted({done for done, _ in counts})
        assert len(counts) <= 11  # the first, then one per tenth: a log stays short
    traced = [line for line in lines if line.startswith("zerosim simulate: --trace [")]
    ranks = len({(e["stage"], e["rank"]) for e in events})  # every rank of every stage
    assert [done_and_total(line) for line in traced if " ranks traced, " in line][-1] == (ranks, ranks)
    assert done_and_total(traced[-1]) == (1, 1) and " trace files written, " in traced[-1]
    assert all(line.endswith(" s") and (" collectives, " in line or line in traced)
               for line in lines)


def test_simulate_without_jitter_says_each_stage_once(monkeypatch):
    monkeypatch.setattr(progress, "PROGRESS_AFTER_S", 0.0)
    result = run_zerosim("simulate", SCENARIOS / "tiny_gpt_4rank_cpu.toml", "--stage", "2",
                         "--set", "training.framework='zero'")  # said: no default note
    assert result.code == 0
    assert [line.split(" [")[0] for line in result.stderr.splitlines()] == [
        "zerosim simulate: ZeRO-2 (1 of 1)"]
    done, total = done_and_total(result.stderr)
    assert done == total > 0
