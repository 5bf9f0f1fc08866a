"""`zerosim simulate` and `zerosim memory` under a pipeline (issue 30, report.py): the header names
the pipeline, and each ZeRO stage's pipeline stages get their own rows. Expected values are
written out by hand: the layer split (8 layers over 4 stages, 2 each; interleaved v = 2, 1 per
chunk), the activations each stage holds at once from Narayanan et al. 2021 (§2.2.1: 1F1B's
stage i holds min(p - i, m); §2.2.2 and Megatron-LM's schedules.py get_pp_rank_microbatches:
the interleaved stage i runs w = min(2(p - i - 1) + (v - 1)p, m v) warmup forwards and holds
w + 1), and the rows' figures are the simulator's and the memory model's own numbers, formatted
as the tables say (3 decimals for seconds, 2 for GB = 10^9 bytes).
"""

import pytest

from tests.conftest import run_zerosim
from zerosim.analytic.memory import pipeline_memory
from zerosim.scenario.load import load_scenario
from zerosim.sim.engine import simulate
from tests.zerosim.pipeline_scenarios import GPT_8L

# 8 layers, h = 1024; 2 nodes x 8 A100s; m = 8 micro-batches over p = 4 stages (d = 4).
BASE = GPT_8L
INTERLEAVED = ("parallelism.pipeline_schedule=interleaved_1f1b", "parallelism.virtual_stages=2")
HELD_1F1B = [4, 3, 2, 1]  # min(p - i, m), p = 4, m = 8
HELD_INTERLEAVED = [11, 9, 7, 5]  # w + 1, w = 2(3 - i) + 4


def sets(*pairs: str) -> list[str]:
    return [a for pair in pairs for a in ("--set", pair)]


def block(text: str, title: str) -> list[list[str]]:
    """The cells of the per-pipeline-stage table under `title` ("  1 ZeRO-1:")."""
    lines = text.splitlines()
    start = lines.index(title) + 2  # past the title and the column header
    rows = []
    for line in lines[start:]:
        if not line or not line[0].isdigit():
            break
        rows.append(line.split())
    return rows


def test_the_header_names_the_pipeline_not_gradient_accumulation(write):
    out = run_zerosim("simulate", write("pp.toml", BASE), "--stage", "1")
    assert out.code == 0, out.stderr
    assert "pipeline: 4 stages, 1f1b, 8 micro-batches per step, layers per stage 2 each" \
        in out.stdout.splitlines()
    assert "micro-batch 2 x seq 2048 x 8 micro-batches |" in out.stdout
    assert "simulated: 4 representative ranks, one per pipeline stage" in out.stdout
    assert "gradient accumulation" not in out.stdout


def test_the_header_of_an_interleaved_and_an_uneven_pipeline(write):
    path = write("pp.toml", BASE)
    out = run_zerosim("memory", path, *sets(*INTERLEAVED))
    assert ("pipeline: 4 stages x 2 chunks, interleaved_1f1b, 8 micro-batches per step, "
            "layers per stage 2 each (1 per chunk)") in out.stdout.splitlines()
    out = run_zerosim("memory", path, *sets("parallelism.pipeline_layers=[1, 3, 2, 2]"))
    assert "layers per stage 1, 3, 2, 2" in out.stdout


@pytest.mark.parametrize("extra, held", [((), HELD_1F1B), (INTERLEAVED, HELD_INTERLEAVED)])
def test_per_stage_simulation_rows_are_the_results_figures(write, extra, held):
    path = write("pp.toml", BASE)
    results = {s: simulate(load_scenario(path, list(extra)), s, keep_events=False)
               for s in (0, 1)}
    out = run_zerosim("simulate", path, *sets(*extra))
    assert out.code == 0, out.stderr
    for stage, name in ((0, "DDP"), (1, "ZeRO-1")):
        r = results[stage]
        scale = 1.0 if max(results[s].step_time_s for s in results) >= 0.1 else 1e3  # s or ms
        expected = [[str(i), "2", f"{s['step_time_s'] * scale:.3f}",
                     f"{s['compute_s'] * scale:.3f}", f"{s['idle_s'] * scale:.3f}", str(held[i]),
                     f"{s['peak_bytes'] / 1e9:.2f}", f"{s['device_bytes'] / 1e9:.2f}", "yes"]
                    for i, s in enumerate(r.pipeline)]
        assert block(out.stdout, f"  {stage} {name}:") == expected
        assert [s["activations_held"] for s in r.pipeline] == held
        # the main row: the stage that finished last's step, the worst stage's peak
        main = next(line.split() for line in out.stdout.splitlines()
                    if line.startswith(f"{stage} {name}"))
        assert main[2] == max(row[2] for row in expected)
        assert f"{max(s['peak_bytes'] for s in r.pipeline) / 1e9:.2f}" in main


def test_per_stage_memory_rows_and_json(write):
    path = write("pp.toml", BASE)
    scenario = load_scenario(path)
    out = run_zerosim("memory", path)
    data = run_zerosim("memory", path, "--json").json
    assert [row["stage"] for row in data["stages"]] == [0, 1]  # what a framework runs beside PP
    for row, name in zip(data["stages"], ("DDP", "ZeRO-1*")):
        stage = row["stage"]
        mine = pipeline_memory(scenario, stage)
        expected = [[str(i), "2", *(f"{b / 1e9:.2f}" for b in (
            s.params_bytes, s.grads_bytes, s.optimizer_bytes, s.activations_bytes,
            s.buffers_bytes, s.peak_bytes)), str(HELD_1F1B[i])] for i, s in enumerate(mine)]
        assert block(out.stdout, f"  {stage} {name.rstrip('*')}:") == expected
        assert [p["pipeline_stage"] for p in row["pipeline"]] == [0, 1, 2, 3]
        assert [p["layers"] for p in row["pipeline"]] == [2, 2, 2, 2]
        assert [p["activations_held"] for p in row["pipeline"]] == HELD_1F1B
        assert [p["peak_bytes"] for p in row["pipeline"]] == [s.peak_bytes for s in mine]
        assert row["peak_bytes"] == max(s.peak_bytes for s in mine)  # the worst stage's row
        assert all(p["fits_gpu_memory"] for p in row["pipeline"])


def test_without_a_pipeline_nothing_is_added(write):
    """(Byte for byte: bench/golden.py check.)"""
    path = write("pp.toml", BASE.replace("pipeline_parallel = 4", "pipeline_parallel = 1")
                 .replace('pipeline_schedule = "1f1b"', ""))
    text = run_zerosim("memory", path).stdout
    assert "pipeline:" not in text and "per pipeline stage" not in text
    assert "x 8 micro-steps (gradient accumulation)" in text
    assert all("pipeline" not in row for row in run_zerosim("memory", path, "--json")
               .json["stages"])
    sim = run_zerosim("simulate", path, "--stage", "1").stdout
    assert "per pipeline stage" not in sim and "1 representative rank (uniform cluster)" in sim
