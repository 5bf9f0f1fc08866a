"""`zerosim plan --allow pp` (and tp,pp): the planner over t x p x d. The scenario is the 8-layer
GPT of test_plan_tp.py (h = 4096, V = 51200, S = 2048, tied head) on 8 GPUs with 9.5 GiB each,
where memory forces a pipeline on the stages a framework runs beside one (ZeRO-0/1). Counted by
hand in Megatron's layout (parallel/pipeline.py: the embedding with the first stage, the final
norm and the head's own output matrix with the last):

    a layer            12h^2 + 13h                        = 201,379,840
    first of p = 2     Vh + Sh + 4 layers                 = 1,023,623,168
    last of p = 2      4 layers + 2h + Vh                 = 1,015,242,752
    ZeRO-1, p = 1      (2 + 2 + 12 / 8) x 1,829,150,720   = 10,060,328,960 B = 9.37 GiB > 9.5 GiB
                       less the CUDA context and NCCL's buffers: never fits
    DDP, p = 2         12 bytes of Adam a parameter of the first stage (the worst: it holds
                       both micro-batches of 1F1B, the last stage one, whose head's backward
                       frees the logits before a layer is recomputed) = 12,283,478,016 B
                       = 11.44 GiB of optimizer states, 2,047,246,336 B = 1.907 GiB of params

Step times are compared with a direct simulate of the same keys (sweep.rows_of), never with a
figure of plan's own."""

import pytest

from zerosim.scenario.load import load_scenario
from zerosim.tradeoffs.plan import plan
from zerosim.tradeoffs.plan_axes import pipeline_degrees, schedules
from zerosim.tradeoffs.plan_limits import _valid_d
from zerosim.tradeoffs.sweep import rows_of

from tests.conftest import assert_one_line_error, run_zerosim
from tests.zerosim.test_plan_tp import GPT

GiB = 2**30
BUDGET = round(9.5 * GiB)


@pytest.fixture
def gpt8(write):
    return write("gpt8.toml", GPT.format(framework="zero", stage=1))


def test_memory_forces_a_pipeline_and_no_p_1_is_listed_as_fitting(gpt8):
    result = plan(load_scenario(gpt8), BUDGET, allow=("pp",))
    fits = {s["name"]: s["fits"] for s in result["stages"]}
    assert fits["DDP"] is False and fits["ZeRO-1"] is False  # 9.37 GiB of states alone
    space = result["pipeline"]
    assert space["layouts"], "a pipeline must fit"
    assert all(r["pipeline_parallel"] >= 2 and r["stage"] in (0, 1) for r in space["layouts"])
    # 8 GPUs, 8 sequences a step (micro-batch 1 x 1 micro-step a GPU at p = 1): d = 8 / p
    # ranks take p sequences each, so m x micro-batch = p
    for r in space["layouts"]:
        assert r["micro_batch"] * r["micro_batches"] == r["pipeline_parallel"]
        assert r["data_parallel"] * r["pipeline_parallel"] == 8
        assert r["tokens_per_step"] == 8 * 1024
    times = [r["step_time_s"] for r in space["layouts"]]
    assert times == sorted(times)
    fewest = space["fewest"]
    assert fewest["world_size"] < 8 and fewest["pipeline_parallel"] >= 2


def test_the_fastest_row_is_a_direct_simulate_of_its_keys(gpt8):
    fast = plan(load_scenario(gpt8), BUDGET, allow=("pp",))["pipeline"]["fastest"]
    sets = [f"parallelism.pipeline_parallel={fast['pipeline_parallel']}",
            f"parallelism.pipeline_schedule={fast['schedule']}",
            f"parallelism.virtual_stages={fast['virtual_stages']}",
            f"training.zero_stage={fast['stage']}",
            f"training.micro_batch={fast['micro_batch']}",
            f"training.gradient_accumulation={fast['micro_batches']}"]
    direct = rows_of(load_scenario(gpt8, sets), [fast["stage"]], {})[0]
    assert fast["step_time_s"] == direct["step_time_s"]
    assert fast["peak_bytes"] == direct["peak_bytes"]


def test_pruned_layouts_are_why_not_lines_with_the_memory_that_rules_them_out(gpt8):
    space = plan(load_scenario(gpt8), BUDGET, allow=("pp",))["pipeline"]
    why = {r["label"]: r["why_not"] for r in space["misfits"]}
    ddp2 = why["DDP, t = 1, p = 2, d = 4, 1F1B"]
    assert "optimizer states 11.44 GiB" in ddp2 and "params 1.907 GiB" in ddp2  # 2 x 1,023,...
    assert all(label.split(",")[0] == "DDP" for label in why)  # ZeRO-1 fits from p = 2 on
    assert not {r["label"] for r in space["layouts"]} & set(why)


def test_tp_and_pp_together_search_t_and_text_shows_the_ranked_table(gpt8):
    result = run_zerosim("plan", gpt8, "--gpu-memory-GiB", "9.5", "--allow", "tp,pp")
    assert result.code == 0, result.stderr
    out = result.stdout
    assert "Pipeline layouts on 8 GPUs" in out
    assert "t = 2, p = 2, d = 2" in out or "t = 2, p = 4, d = 1" in out
    assert "Fastest with a pipeline:" in out and "Fewest GPUs with a pipeline:" in out


def test_the_axes_by_hand():
    assert pipeline_degrees(8, 8) == [2, 4, 8]
    assert pipeline_degrees(4, 8) == [2, 4]  # p divides N / t
    assert pipeline_degrees(12, 8) == [2, 4]  # and the layers
    assert schedules(8, 2, 4) == [("1f1b", 1), ("interleaved_1f1b", 2), ("interleaved_1f1b", 4)]
    assert schedules(8, 4, 4) == [("1f1b", 1), ("interleaved_1f1b", 2)]  # 8 % (4 x 4) != 0
    assert schedules(8, 4, 6) == [("1f1b", 1)]  # 6 micro-batches in groups of 4
    # t p = 3 on 8-GPU nodes: 3 or 6 GPUs inside a node, then 24, 48: whole nodes
    assert [_valid_d(3, 8, j) for j in range(4)] == [1, 2, 8, 16]
    assert [_valid_d(16, 8, j) for j in range(3)] == [1, 2, 3]


def test_bad_allow_values_are_one_line(gpt8):
    assert_one_line_error(run_zerosim("plan", gpt8, "--allow", "pp,ep"), "'ep'", "pp")
    assert_one_line_error(run_zerosim("plan", gpt8, "--allow", "pp,"), "an empty name")


def test_a_bare_model_is_a_note_not_a_traceback(write):
    path = write("bare.toml", "[model]\nparams = 1000000000\n[cluster]\nnodes = 1\n"
                              "gpus_per_node = 8\ngpu = \"A100-80GB\"\n")
    result = run_zerosim("plan", path, "--allow", "pp")
    assert result.code == 0, result.stderr
    assert "a pipeline splits a shaped model's layers" in result.stdout
