"""Pipeline parallelism's lines the other pipeline tests left loose (issue 30's mutation run,
bench/mutations/results-issue30.txt): what a pipelined step reports beside its step time (the
slowest rank, exposed communication, the worst stage's device memory, each stage's layers), the
bytes tensor parallelism moves per micro-batch, the activations and buffers of uneven and
interleaved stages, a layer list that adds up to too few, the planner's bubble, bound and
largest model, DeepSpeed's reduction after its schedule. Every expected value is a hand count,
a literal, a closed form or a rule of Megatron-LM's, DeepSpeed's or Narayanan et al. 2021's,
cited at the test, never zerosim's own formulas."""

from fractions import Fraction

import pytest

from tests.conftest import assert_one_line_error, run_zerosim
from tests.zerosim.pipeline_scenarios import GPT_8L, flat_gpt
from tests.zerosim.test_plan_tp import GPT
from zerosim.analytic.memory import fits, peak_held, pipeline_memory
from zerosim.analytic.model import model_flops_per_token
from zerosim.errors import InputError
from zerosim.parallel.schedule import Op
from zerosim.scenario.load import load_scenario
from zerosim.sim.collectives.ring import Group
from zerosim.sim.groups import world_group
from zerosim.sim.pipeline.step import check_pipeline_step, simulate_pipeline
from zerosim.tradeoffs.plan import plan
from zerosim.tradeoffs.plan_axes import largest, without_pipeline
from zerosim.tradeoffs.plan_limits import bound_s, layout_version

# GPT_8L: 8 layers, h = 1024, a = 16, V = 32768, tied head; 2 nodes x 8 GPUs; b = 2, s = 2048,
# bf16, Adam, ZeRO-1; m = 8, p = 4 (d = 4).
H, V, S, B, A = 1024, 32768, 2048, 2, 16
SBH = S * B * H
LAYER = 12 * H * H + 13 * H  # 12,596,224
PSI_MIDDLE = 2 * LAYER  # stages 1 and 2 of p = 4: two layers each
LAYER_ACTS = SBH * (34 + 5 * A * S // H)  # Korthikanti et al. 2022, Eq. 1: 194 sbh
MASK = SBH  # the embedding's dropout mask, a byte an element
HEAD_ACTS = 4 * SBH + 4 * S * B * V  # final-norm and head inputs 2sbh each, fp32 logits 4sbv
P2P = 2 * SBH  # one boundary activation [s, b, h] in bf16
GiB = 2**30


def gpt8(write, *sets: str):
    return load_scenario(write("pp.toml", GPT_8L), list(sets))


def simulate_json(write, text: str, *sets: str) -> dict:
    argv = ["simulate", str(write("pp.toml", text)), "--json", "--stage", "1"]
    for assignment in sets:
        argv += ["--set", assignment]
    result = run_zerosim(*argv)
    assert result.code == 0, result.stderr
    (row,) = result.json
    return row


# ---- what a pipelined step reports ------------------------------------------------------------

def test_the_slowest_rank_is_the_first_rank_of_the_stage_that_ends_last(write):
    """Stage 0 holds the embedding and one layer (16.8M + 2.1M + 12.6M elements), stage 3 two
    layers and the head's own copy of the word embedding (25.2M + 16.8M): at 10 GB/s of HBM
    Adam's 28 bytes an element take 29 ms more on stage 3 than on stage 0, more than the three
    backwards (about 5 ms) stage 0 runs after stage 3's last, so stage 3 ends the step. In
    Megatron's rank order tp-dp-pp (parallel_state.py) stage i's first rank is i x N / p."""
    text = flat_gpt(7, 8, 4, "pipeline_layers = [1, 2, 2, 2]\n")
    row = simulate_json(write, text, "cluster.hbm_bandwidth_GBps=10")
    ends = [s["step_time_s"] for s in row["pipeline"]]
    assert max(ends) == ends[3] == row["step_time_s"]
    assert row["slowest_rank"] == 3 * 16 // 4 == 12


def test_exposed_communication_is_the_step_less_the_critical_stages_compute(write):
    """What the compute stream of the stage that ends the step did not cover: step - compute,
    the definition a step without a pipeline reports (sim/result.py)."""
    row = simulate_json(write, GPT_8L)
    assert row["exposed_comm_s"] == pytest.approx(row["step_time_s"] - row["compute_s"],
                                                  rel=1e-12)
    assert row["exposed_comm_s"] != pytest.approx(row["comm_time_s"], rel=1e-6)


def test_device_memory_is_the_worst_stages_the_last_under_one_micro_batch(write):
    """m = 1: every stage holds one micro-batch of its two layers; DeepSpeed's last stage adds
    the head's 4sbh + 4sbv and the loss's fp32 transients (8 bsV: nll_loss's and log_softmax's
    gradients), about 1.5 GiB more than stage 0's dropout mask and embedding, whose parameters
    are 2.1M elements more than the last stage's (about 17 MB of states): the last is worst."""
    row = simulate_json(write, GPT_8L, "training.framework=deepspeed",
                        "training.gradient_accumulation=1")
    device = [s["device_bytes"] for s in row["pipeline"]]
    assert device[3] > device[0] + GiB
    assert row["device_bytes"] == device[3] == max(device)


def test_each_stage_reports_the_layers_of_its_chunks(write):
    """p = 2, v = 2, layers [1, 3, 2, 2] per virtual stage: stage 0 holds virtual stages 0 and
    2 (1 + 2 layers), stage 1 virtual stages 1 and 3 (3 + 2) (Narayanan et al. 2021, §2.2.2)."""
    row = simulate_json(write, GPT_8L, "parallelism.pipeline_parallel=2",
                        "parallelism.pipeline_schedule=interleaved_1f1b",
                        "parallelism.virtual_stages=2", "parallelism.pipeline_layers=[1, 3, 2, 2]")
    assert [s["layers"] for s in row["pipeline"]] == [3, 5]


def test_the_step_peak_keeps_the_optimizers_transient(write):
    """DeepSpeed's ZeRO-1 converts a rank's reduced gradient partition to fp32 for its step
    (stage_1_and_2.py): 4 Psi_i / d bytes beside 2 Psi_i + 2 Psi_i + 12 Psi_i / d. A middle stage
    of two layers (Psi_i = 25,192,448, d = 4) at m = 1, b = 1, s = 128 holds one micro-batch's
    activations (2 x 128 x 1024 x (34 + 10) = 11.5 MB) and four 256 KiB transfer buffers, less
    than the transient's Psi_i bytes: its peak is the step's, 8 Psi_i, beside DeepSpeed's two
    whole 25 MiB ipg_buffers (contiguous_gradients, overlap_comm)."""
    row = simulate_json(write, GPT_8L, "training.framework=deepspeed", "training.seq_len=128",
                        "training.micro_batch=1", "training.gradient_accumulation=1")
    ipg = 2 * 25 * 2**20
    assert [s["peak_bytes"] for s in row["pipeline"]][1:3] == [8 * PSI_MIDDLE + ipg] * 2


def test_a_stages_memory_timeline_starts_at_its_states_and_buffers(write):
    """Before its first forward a middle stage of ZeRO-1 holds 2 + 2 + 12 / 4 bytes an element
    of its 25,192,448 and a send and a receive buffer to each neighbour (4 x 8 MiB)."""
    result = simulate_pipeline(gpt8(write), 1)
    assert result.pipeline_runs[1].memory[0] == (0.0, 7 * PSI_MIDDLE + 4 * P2P)
    assert 7 * PSI_MIDDLE + 4 * P2P == 209_901_568


def test_the_op_cap_counts_every_chunk(write):
    """2 p v m forwards and backwards: 2 x 4 x 2 x 200,000 = 3,200,000 > 2,000,000 (at v = 1
    it would be 1,600,000)."""
    s = gpt8(write, "parallelism.pipeline_schedule=interleaved_1f1b",
             "parallelism.virtual_stages=2", "training.gradient_accumulation=200000")
    with pytest.raises(InputError, match="3,200,000"):
        check_pipeline_step(s, 1, "auto")


def test_the_op_cap_takes_exactly_its_count(write):
    """2 x 4 x 1 x 250,000 = 2,000,000 forwards and backwards: at the cap, not past it."""
    check_pipeline_step(gpt8(write, "training.gradient_accumulation=250000"), 1, "auto")


def test_allocated_and_reserved_peaks_are_the_worst_stages(write):
    """The caching allocator is not modelled beside a pipeline: allocated = reserved = the
    worst stage's peak (1F1B's stage 0 holds p = 4 micro-batches, the most)."""
    result = simulate_pipeline(gpt8(write), 1)
    peaks = [s["peak_bytes"] for s in result.pipeline]
    assert peaks[0] == max(peaks) > min(peaks)
    assert result.peak_allocated_bytes == result.peak_reserved_bytes == peaks[0]


def test_the_optimizer_event_names_no_micro_batch(write):
    """events.py's contract: (lane, kind, start, end, micro, chunk), micro -1 where none."""
    events = simulate_pipeline(gpt8(write), 1).pipeline_runs[1].events
    assert [e[4:] for e in events if e[1] == "optimizer"] == [(-1, -1)]


def test_under_gloo_the_algorithm_is_its_ring(write):
    """gloo runs every collective as its ring (cluster.collective_library = gloo): one word,
    not NCCL's per-op algorithm/protocol list."""
    s = load_scenario(write("flat.toml", flat_gpt(8, 4, 4)), ["cluster.collective_library=gloo"])
    assert simulate_pipeline(s, 1).algorithm == "ring"


def test_fsdp2_gathers_each_unit_once_a_step(write):
    """torchtitan's FSDP2 beside a pipeline keeps each unit gathered from its first forward
    (reshard_after_forward=False): a middle stage's 2 layers, 2 x 12,596,224 bf16 elements, each
    all-gathered once over its d = 4 ranks, of which a ring sends (d - 1) / d: 3 x 12,596,224
    bytes; its reduce-scatters send as much."""
    result = simulate_pipeline(gpt8(write, "training.framework=fsdp2", "training.zero_stage=2"),
                               2)
    sent = result.pipeline[1]["comm_bytes_per_rank"]
    assert sent["all_gather"] == sent["reduce_scatter"] == 3 * LAYER == 37_788_672


@pytest.mark.parametrize("sets, group", [
    # p = 2 on 16 GPUs, t = 1: a stage's 8 ranks, one node (Megatron's tp-dp-pp order)
    (["parallelism.pipeline_parallel=2"], Group(8, 8, stride=1)),
    # t = 16 over 2 nodes, p = 2 on 64 GPUs: d = 2 ranks 16 apart, each on its own node
    (["cluster.nodes=8", "parallelism.tensor_parallel=16", "parallelism.pipeline_parallel=2"],
     Group(2, 1, stride=16)),
])
def test_a_stages_data_parallel_group_is_d_ranks_t_apart(write, sets, group):
    assert world_group(gpt8(write, *sets), 1) == group


def test_largest_is_zero_where_nothing_fits():
    assert largest(lambda x: False, 10) == 0 and largest(lambda x: x <= 7, 10) == 7


# ---- tensor parallelism's bytes, per micro-batch ----------------------------------------------

@pytest.mark.parametrize("m", [4, 8])
def test_tensor_parallel_all_reduces_run_in_every_micro_batch(write, m):
    """t = 2 without SP (Megatron-LM's mappings.py): a layer's forward all-reduces the attention
    and MLP outputs, its backward the QKV and fc1 input gradients, each [s, b, h] in bf16 = 8 MiB,
    of which a ring over 2 ranks sends 2 (t - 1) / t = 1 x; a middle stage's 2 layers in each of
    m micro-batches: m x 2 x 4 x 8 MiB."""
    result = simulate_pipeline(gpt8(write, "parallelism.tensor_parallel=2",
                                    f"training.gradient_accumulation={m}"), 1)
    sent = result.pipeline[1]["comm_bytes_per_rank"]["all_reduce (tp)"]
    assert sent == m * 2 * 4 * 2 * SBH


# ---- activations and buffers of uneven and interleaved stages ---------------------------------

def interleaved(write, *sets: str):
    return pipeline_memory(gpt8(write, "parallelism.pipeline_parallel=2",
                                "parallelism.pipeline_schedule=interleaved_1f1b",
                                "parallelism.virtual_stages=2",
                                "training.gradient_accumulation=2",
                                "parallelism.pipeline_layers=[1, 3, 2, 2]", *sets), 1)


def test_interleaved_stages_hold_each_chunks_own_activations(write):
    """p = 2, v = 2, m = 2, layers [1, 3, 2, 2]. Stage 0 (chunks: the embedding + 1 layer, 2
    layers) warms up with min(2 (p - 1) + (v - 1) p, m v) = 4 forwards, all of them: twice
    (mask + 1 layer) + twice 2 layers. Stage 1 (chunks: 3 layers, 2 layers + head) warms up with
    2 (both micro-batches through its first chunk), then runs its second chunk's forward before
    the first backward: 2 x 3 layers + 2 layers + the head (Megatron's schedules.py,
    forward_backward_pipelining_with_interleaving; Korthikanti's per-layer 194 sbh)."""
    rows = interleaved(write)
    assert [r.activations_bytes for r in rows] == [2 * MASK + 6 * LAYER_ACTS,
                                                   8 * LAYER_ACTS + HEAD_ACTS]


def test_a_backwards_transient_peak_is_kept_past_later_forwards():
    """peak_held's rule, by hand: a forward's bytes are alive from its end, each backward adds
    its chunk's transient on top of everything alive. Chunk 0 (1 byte, a 10-byte transient
    under recomputation) then chunk 1 (1 byte, none): 1, 1 + 10, 1, 1 + 0: the peak is 11."""
    order = [Op("forward", 0, 0), Op("backward", 0, 0), Op("forward", 0, 1), Op("backward", 0, 1)]
    assert peak_held(order, [1, 1], [10, 0]) == 11
    assert peak_held(order, [1, 1]) == 1


def test_interleaved_end_stages_buffer_both_directions(write):
    """Under the interleaved schedule stage 0 also receives from stage p - 1 (virtual stage p
    to p - 1's chunk wraps around) and the last stage sends to stage 0: every stage keeps a
    send and a receive buffer each way, 4 x 8 MiB (the paper's accounting has no loss
    transients)."""
    assert [r.buffers_bytes for r in interleaved(write)] == [4 * P2P, 4 * P2P]


def test_only_the_last_stage_holds_the_loss_transients(write):
    """DeepSpeed's framework counts fp32 cross-entropy's gradients, 8 b s V bytes (1 GiB here),
    on the stage that computes the loss alone; a middle stage holds its four transfer buffers,
    the first its two; each beside DeepSpeed's two whole 25 MiB ipg_buffers."""
    rows = pipeline_memory(gpt8(write, "training.framework=deepspeed"), 1)
    ipg = 2 * 25 * 2**20
    assert [r.buffers_bytes for r in rows] == [ipg + 2 * P2P, ipg + 4 * P2P, ipg + 4 * P2P,
                                               ipg + 2 * P2P + 8 * B * S * V]


# ---- inputs ------------------------------------------------------------------------------------

def test_a_layer_list_adding_up_to_too_few_is_refused(write):
    argv = ["memory", str(write("pp.toml", GPT_8L)), "--set",
            "parallelism.pipeline_layers=[2, 2, 2, 1]"]
    assert_one_line_error(run_zerosim(*argv), "parallelism.pipeline_layers adds up to 7",
                          "model.layers = 8")


def test_deepspeed_refuses_gpipe(write):
    """DeepSpeed's PipelineEngine.train_batch always runs its TrainSchedule, 1F1B
    (deepspeed/runtime/pipe/schedule.py)."""
    argv = ["simulate", str(write("pp.toml", GPT_8L)), "--set", "training.framework=deepspeed",
            "--set", "parallelism.pipeline_schedule=gpipe"]
    assert_one_line_error(run_zerosim(*argv), "'gpipe'", "'deepspeed'", "'1f1b'")


def test_deepspeed_reduces_after_its_schedule_whatever_overlap_comm_says(write):
    """DeepSpeed's TrainSchedule.steps runs ReduceGrads once the last micro-batch's backward is
    done (deepspeed/runtime/pipe/schedule.py; engine.py, _exec_reduce_grads): overlap_comm
    changes nothing beside a pipeline."""
    times = [simulate_json(write, GPT_8L, "training.framework=deepspeed",
                           f"training.overlap_comm={flag}")["step_time_s"]
             for flag in ("true", "false")]
    assert times[0] == times[1]


# ---- the planner --------------------------------------------------------------------------------

def test_the_2d_comparison_trains_the_same_global_batch(write):
    """16 ranks, p = 4, b = 2, m = 8: each of the 4 data-parallel ranks of a stage trains 16
    sequences, 64 in all; without the pipeline 16 data-parallel ranks of b = 2 need 2
    micro-steps (Megatron's num_microbatches = global / (b d))."""
    flat = without_pipeline(gpt8(write))
    assert (flat.parallelism.pipeline_parallel, flat.training.gradient_accumulation) == (1, 2)


@pytest.fixture
def planned(write):
    scenario = load_scenario(write("gpt8.toml", GPT.format(framework="zero", stage=1)))
    return plan(scenario, round(9.5 * GiB), allow=("pp",))["pipeline"]


def test_each_layouts_bubble_is_narayanans(planned):
    """(p - 1) / (v m) (Narayanan et al. 2021, §2.2.2; v = 1 for 1F1B, §2.2.1)."""
    assert any(r["virtual_stages"] > 1 for r in planned["layouts"])
    for r in planned["layouts"]:
        assert Fraction(r["bubble"]).limit_denominator(1000) == Fraction(
            r["pipeline_parallel"] - 1, r["virtual_stages"] * r["micro_batches"])


def test_the_largest_model_is_whole_layers_at_the_most_sharded_stage(planned):
    """The 8-layer model fits with a pipeline (ranked layouts exist), so the largest has at
    least 8 layers, a multiple of p; at ZeRO-1, the highest stage the paper's framework runs
    beside a pipeline; its parameters 201,379,840 a layer + 218,112,000 (Vh + Sh + 2h: the
    test_plan_tp.py hand count)."""
    assert all(r["fits"] for r in planned["layouts"])
    big = planned["largest"]
    assert big["layers"] >= 8 and big["layers"] % big["pipeline_parallel"] == 0
    assert big["stage"] == 1
    assert big["params"] == 201_379_840 * big["layers"] + 218_112_000


@pytest.mark.parametrize("t, p, nodes", [(1, 2, 1), (2, 2, 1), (1, 4, 1), (4, 2, 4)])
def test_the_bound_is_ideal_compute_times_the_bubble_plus_a_ring(write, t, p, nodes):
    """plan_space's step 2: the model's FLOPs of a GPU's tokens (b m s / (t p), the same on
    every layout of one global batch) over its peak, times 1 + (p - 1) / m, plus a ring
    all-reduce of a stage's bf16 gradients, 2 (d - 1) / d x 2 Psi / p bytes, over NVLink where
    a stage's d ranks, t apart, lie in one node of 8 (t d <= 8), else over the NICs (t = 4,
    d = 4 on 4 nodes: 16 ranks apart). The scenario's b = 1 on every rank is t p sequences of
    one micro-batch each per data-parallel rank. Psi = 1,829,150,720 at t = 1, 918,872,064 at
    t = 2, 463,732,736 at t = 4 (test_plan_tp.py's hand counts)."""
    text = GPT.format(framework="zero", stage=1).replace("nodes = 1", f"nodes = {nodes}")
    scenario = load_scenario(write("gpt8.toml", text))
    m, d = t * p, 8 * nodes // (t * p)
    version = layout_version(scenario, t, p, 1, "1f1b", 1, 1, m)
    c = scenario.cluster
    psi = {1: 1_829_150_720, 2: 918_872_064, 4: 463_732_736}[t]
    ideal = model_flops_per_token(scenario.model, scenario.training) * m * 1024 / (t * p) / (
        c.peak_tflops * 1e12)
    link = c.intra_node_bandwidth_GBps if t * d <= 8 else c.inter_node_bandwidth_GBps
    ring = 2 * (d - 1) / d * 2 * psi / p / (link * 1e9)
    assert bound_s(version) == pytest.approx(ideal * (1 + (p - 1) / m) + ring, rel=1e-12)


def test_every_cell_is_a_stage_the_framework_runs_beside_a_pipeline(planned):
    """The paper's framework runs ZeRO-0 and ZeRO-1 beside a pipeline (Megatron-LM's
    distributed optimizer): no cell at another stage, none refused, on 8 GPUs whose every p
    (2, 4, 8) divides the 8 layers and the batch."""
    rows = planned["layouts"] + planned["misfits"]
    assert {r["stage"] for r in rows} <= {0, 1}
    assert not [n for n in planned["notes"] if "skipped" in n]


def test_1f1b_runs_fewer_micro_batches_than_stages(write):
    """GPT_8L at m = 2 trains 16 sequences a step (p = 4 on 16 GPUs: d = 4 ranks of b = 2 x
    2 micro-batches); at p = 2 each of the 8 data-parallel ranks takes 2 of them, one
    micro-batch of 2, fewer than p micro-batches. 1F1B runs it (its
    warmup is min(p - i - 1, m): Megatron's forward_backward_pipelining_without_interleaving),
    so the cells of p = 2 at ZeRO-0 and ZeRO-1 are judged, each a layout or a misfit."""
    scenario = gpt8(write, "training.gradient_accumulation=2")
    space = plan(scenario, 80 * GiB, allow=("pp",))["pipeline"]
    cells = {(r["pipeline_parallel"], r["stage"]) for r in space["layouts"] + space["misfits"]}
    assert {(2, 0), (2, 1)} <= cells


# ---- tensor parallelism's collectives inside a stage's ops ----------------------------------

RATE = 312e12 * 0.5  # flat_gpt's 312 TFLOP/s at 50%
FLAT_LAYER_FORWARD = (24 * 1 * 2048 * 1024**2 + 4 * 1 * 2048**2 * 1024) / 2 / RATE
"""One layer's forward at t = 2 on flat_gpt (b = 1, s = 2048, h = 1024): Narayanan et al.
2021's 24 b s h^2 + 4 b s^2 h FLOPs, half of them on each tensor-parallel rank."""


def op_seconds(write, *sets: str) -> tuple[set, set]:
    """The distinct forward and backward durations of stage 1 (2 of 8 layers, p = 4, m = 4)."""
    s = load_scenario(write("flat.toml", flat_gpt(8, 4, 4)),
                      ["parallelism.tensor_parallel=2", *sets])
    events = simulate_pipeline(s, 1).pipeline_runs[1].events
    return tuple({round(e[3] - e[2], 15) for e in events if e[0] == "compute" and e[1] == kind}
                 for kind in ("forward", "backward"))


def test_async_input_gradient_all_reduces_hide_behind_the_weight_gradient_gemms(write):
    """Megatron-LM's column-parallel layers all-reduce their input's gradient while the weight
    gradient's GEMM runs (layers.py, LinearWithGradAccumulationAndAsyncCommunication): on a
    near-infinite NVLink each all-reduce is shorter than its GEMM, so a stage's backward is its
    GEMMs alone, twice the forward's FLOPs: 2 layers x 2 x the layer's forward."""
    _, backward = op_seconds(write, "cluster.intra_node_bandwidth_GBps=1000000000",
                             "cluster.intra_node_latency_us=0.000001")
    (seconds,) = backward
    assert seconds == pytest.approx(2 * 2 * FLAT_LAYER_FORWARD, rel=1e-9)


def test_overlapped_sequence_parallel_collectives_hide_behind_the_gemms(write):
    """tp_comm_overlap splits sequence parallelism's all-gathers and reduce-scatters around the
    GEMMs (Megatron-LM's arguments.py needs SP for it; TransformerEngine's userbuffers): each,
    4 MiB at 100 GB/s + 5 us (about 26 us), is shorter than the GEMM beside it (a layer's
    forward is 220 us), so a stage's forward and backward are their FLOPs alone."""
    forward, backward = op_seconds(write, "parallelism.sequence_parallel=true",
                                   "parallelism.tp_comm_overlap=true")
    (f,), (b,) = forward, backward
    assert f == pytest.approx(2 * FLAT_LAYER_FORWARD, rel=1e-9)
    assert b == pytest.approx(2 * 2 * FLAT_LAYER_FORWARD, rel=1e-9)


def test_a_stage_of_the_head_alone_recomputes_no_layer(write):
    """pipeline_layers = [8, 0]: stage 1 holds the final norm, the head and the loss, no layer, so
    under full recomputation it has nothing to recompute. It holds one micro-batch of the head's
    activations (Korthikanti §4.3, w = 2, no dropout mask there): the final-norm and head inputs,
    2 x 2sbh, and the fp32 logits, 4sbV = 8,388,608 + 8,388,608 + 536,870,912 = 553,648,128."""
    s, b, h, v = 2048, 2, 1024, 32768
    sc = gpt8(write, "parallelism.pipeline_parallel=2", "parallelism.pipeline_layers=[8, 0]",
                  "training.activation_checkpointing=full")
    assert pipeline_memory(sc, 1)[1].activations_bytes == 2 * 2 * s * b * h + 4 * s * b * v


def test_a_peak_of_exactly_the_gpus_memory_fits(write):
    """fits is peak <= the GPU's memory (80 GiB here): the boundary fits, a byte more does not."""
    sc = gpt8(write)
    assert fits(sc, 80 * 2**30) and not fits(sc, 80 * 2**30 + 1)
