"""Tensor parallelism in the simulated step: its collectives counted by hand from Megatron-LM's
source (megatron/core/tensor_parallel/layers.py, mappings.py, cross_entropy.py; the table in
zerosim/analytic/tensor_comm.py), their time from NCCL's closed form for a group of t (typed in
as tests/zerosim/test_nccl_collectives.py does), the data-parallel group of N / t ranks, the
TP communicator's buffers, tokens per GPU, the trace's lane and the report's groups."""

import pytest

from tests.conftest import SCENARIOS
from zerosim.analytic.tensor_comm import tensor_collectives
from zerosim.contract import ALL_GATHER as AG, ALL_REDUCE as AR, REDUCE_SCATTER as RS
from zerosim.scenario.load import load_scenario
from zerosim.sim.collectives.ring import Group
from zerosim.sim.device import overhead_bytes
from zerosim.sim.engine import Engine, simulate
from zerosim.sim.stages.step_shape import step_shape
from zerosim.sim.trace import chrome_trace

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
LLAMA = SCENARIOS / "llama2_7b_64gpu.toml"
# tiny GPT: s = 32, b = 2, h = 64, fp32: E = s b h x 4 bytes; the loss's all-reduces s b x 4
E = 32 * 2 * 64 * 4  # 16384
LOSS = 32 * 2 * 4  # 256
# layernorm with bias: 2 norms of 2h and 2 row-parallel biases of h per layer, final norm 2h
REPLICATED = (2 * (2 * 2 * 64 + 2 * 64) + 2 * 64) * 4  # 2 layers x 6h + 2h, fp32 gradients


def tiny(*sets):
    return load_scenario(TINY, ["parallelism.tensor_parallel=2", *sets])


def ops(collectives):
    return [(c.op, c.size_bytes) for c in collectives]


def plan(s):
    t, p = s.training, s.parallelism
    return tensor_collectives(s.model, t, p, 4)


def test_without_sequence_parallelism_two_all_reduces_each_way_per_layer():
    """Megatron: RowParallelLinear.forward all-reduces after the attention output and fc2;
    ColumnParallelLinear's allreduce_dgrad all-reduces the input gradients of QKV and fc1; the
    embedding all-reduces its output; the output layer its input gradient; the loss three [s, b]
    fp32 (max, target logit, sum of exp)."""
    tp = plan(tiny())
    layer = [(AR, E), (AR, E)]
    assert [ops(u) for u in tp.forward] == [[(AR, E)], layer, layer, [(AR, LOSS)] * 3]
    assert [ops(u) for u in tp.backward] == [[], layer, layer, [(AR, E)]]
    assert tp.step == ()
    # the input-gradient all-reduces run async beside the weight-gradient GEMM; the rest block
    assert [c.overlaps for c in tp.backward[1]] == [True, True]
    assert not any(c.overlaps for u in tp.forward for c in u)


@pytest.mark.parametrize("recompute, replayed", [
    ("none", []), ("selective", []), ("full", [(AR, E), (AR, E)]),
    ("selective_op", [(AR, E)]),  # the attention output's all-reduce feeds the MLP's norm
])
def test_recomputation_replays_forward_collectives_without_sp(recompute, replayed):
    tp = plan(tiny(f"training.activation_checkpointing='{recompute}'"))
    assert ops(tp.backward[1]) == replayed + [(AR, E), (AR, E)]


SP_FORWARD = [(AG, E), (RS, E), (AG, E), (RS, E)]  # gather before QKV and fc1, scatter after
# fc2's output gradient gathered; fc1: input re-gathered, its gradient reduce-scattered; the
# attention output's gradient gathered; QKV: input re-gathered, its gradient reduce-scattered
SP_BACKWARD = [(AG, E), (AG, E), (RS, E), (AG, E), (AG, E), (RS, E)]


@pytest.mark.parametrize("recompute, replayed", [
    ("none", []), ("selective", []), ("selective_op", []), ("full", SP_FORWARD)])
def test_sequence_parallelism_gathers_and_scatters(recompute, replayed):
    tp = plan(tiny("parallelism.sequence_parallel=true",
                   f"training.activation_checkpointing='{recompute}'"))
    # learned positions: the embedding is all-reduced, the positions added, then scattered
    # (no communication), whose backward gathers the gradient
    assert ops(tp.forward[0]) == [(AR, E)] and ops(tp.backward[0]) == [(AG, E)]
    assert ops(tp.forward[1]) == SP_FORWARD
    assert ops(tp.backward[1]) == replayed + SP_BACKWARD
    assert ops(tp.forward[3]) == [(AG, E)] + [(AR, LOSS)] * 3
    assert ops(tp.backward[3]) == [(AG, E), (RS, E)]
    assert ops(tp.step) == [(AR, REPLICATED)]
    assert [c.overlaps for c in tp.backward[1][len(replayed):]] == [False, True, True, False,
                                                                      True, True]


def test_rope_embeddings_are_reduce_scattered_under_sp():
    s = load_scenario(LLAMA, ["parallelism.tensor_parallel=8", "parallelism.sequence_parallel=true"])
    tp = tensor_collectives(s.model, s.training, s.parallelism, 4)
    e = 4096 * 1 * 4096 * 2  # s b h, bf16
    assert ops(tp.forward[0]) == [(RS, e)] and ops(tp.backward[0]) == [(AG, e)]
    assert ops(tp.step) == [(AR, 4 * (32 * 2 * 4096 + 4096))]  # rmsnorm, no biases


# Bytes each rank sends (ring-shaped walks, nccl-tests' bus bytes) in a group of t = 2: an
# all-reduce 2 (t - 1) / t S = S, an all-gather or reduce-scatter (t - 1) / t S = S / 2.
@pytest.mark.parametrize("sets, expected", [
    ([], {AR: 10 * E + 3 * LOSS}),  # 1 + 2 x 4 + 1 all-reduces of E
    (["training.activation_checkpointing='full'"], {AR: 14 * E + 3 * LOSS}),
    (["training.activation_checkpointing='selective_op'"], {AR: 12 * E + 3 * LOSS}),
    # AG: 2 x (2 + 4) + embedding 1 + head 2 = 15; RS: 2 x (2 + 2) + head 1 = 9
    (["parallelism.sequence_parallel=true"],
     {AG: 15 * E // 2, AR: E + 3 * LOSS + REPLICATED, RS: 9 * E // 2}),
    (["parallelism.sequence_parallel=true", "training.activation_checkpointing='full'"],
     {AG: 19 * E // 2, AR: E + 3 * LOSS + REPLICATED, RS: 13 * E // 2}),
    # two micro-steps: every unit's twice, the replicated gradients once per step
    (["parallelism.sequence_parallel=true", "training.gradient_accumulation=2"],
     {AG: 15 * E, AR: 2 * (E + 3 * LOSS) + REPLICATED, RS: 9 * E}),
])
def test_tp_bytes_per_step(sets, expected):
    sp = "parallelism.sequence_parallel=true" in sets
    for stage in range(4):
        result = simulate(tiny(*sets), stage)
        # ZeRO-2 and 3 shard the gradients over N_d = 2: a rank sums half the replicated ones
        want = dict(expected, **({AR: expected[AR] - REPLICATED // 2}
                                 if sp and stage >= 2 else {}))
        assert result.comm_bytes_per_group["tp"] == want, stage


A_I = 10.0  # us per hop inside a node
RING = ["cluster.collective_algorithm='ring'", "cluster.collective_protocol='Simple'",
        f"cluster.intra_node_latency_us={A_I}", "cluster.gpu='A100-80GB'",
        "cluster.gpus_per_node=8", "cluster.compute_model='flat'"]


def ring_us(op: str, size: float) -> float:
    """NCCL's ring, Simple, on one A100 node of 8 (test_nccl_collectives.py): 12 channels at
    20 GB/s, busbw 240; base latency 8.4 us + a_i per step; algbw = busbw x 8 / steps."""
    steps = 14 if op == AR else 7
    return 8.4 + steps * A_I + size / (240 * 8 / steps * 1e3)


def test_a_tp_all_reduce_takes_ncclS_ring_on_its_group_of_eight():
    """t = 8 of 16 ranks: the TP group is one DGX A100, whatever the data-parallel ranks do."""
    s = load_scenario(LLAMA, [*RING, "cluster.nodes=2", "parallelism.tensor_parallel=8",
                              "model.layers=2"])
    result = simulate(s, 0)
    e = 4096 * 1 * 4096 * 2
    times = [(ev["end_s"] - ev["start_s"]) * 1e6 for ev in result.ranks[0].state.events
             if ev["name"] == "TP attention output all-reduce"]
    assert len(times) == 2
    assert times == pytest.approx([ring_us(AR, e)] * 2, rel=1e-9)  # 148.4 + 244,667 us


def test_a_tp_group_wider_than_a_node_is_priced_across_nodes():
    """t = 16 on 2 nodes of 8: NCCL's ring over 16 ranks (test_nccl_collectives.py): 8 NICs at
    24 GB/s, busbw 192; 30 steps, 2 of them between nodes at a_e = 20 us, the others at
    max(a_i, the AMD host's 6 us of Simple's network overhead) = 10; x 1.4 (Simple all-reduce
    across nodes, tuning.cc line 649)."""
    s = load_scenario(LLAMA, [*RING, "cluster.nodes=2", "cluster.inter_node_latency_us=20",
                              "parallelism.tensor_parallel=16", "model.layers=2"])
    result = simulate(s, 0)
    e = 4096 * 4096 * 2
    expected_us = (8.4 + 28 * 10 + 2 * 20) * 1.4 + e * 30 / (192 * 16 * 1e3)
    times = [(ev["end_s"] - ev["start_s"]) * 1e6 for ev in result.ranks[0].state.events
             if ev["name"] == "TP MLP output all-reduce"]
    assert times == pytest.approx([expected_us] * 2, rel=1e-9)


def test_overlap_hides_exactly_the_collectives_megatron_blocks_on():
    """One node, t = 8 = N: no data-parallel collective. With compute long, the default step is
    the overlapped one plus every collective the compute stream waits for beside a GEMM: each
    layer's 2 all-gathers and 2 reduce-scatters forward and 2 output-gradient all-gathers
    backward, the output layer's all-gather and the loss's 3 all-reduces. The backward's async
    ones hide in both; the embedding's (a lookup: no GEMM to hide behind) in neither."""
    sets = [*RING, "cluster.nodes=1", "parallelism.tensor_parallel=8", "model.layers=2",
            "parallelism.sequence_parallel=true", "cluster.peak_tflops=1"]
    default = simulate(load_scenario(LLAMA, sets), 3)
    overlapped = simulate(load_scenario(LLAMA, [*sets, "parallelism.tp_comm_overlap=true"]), 3)
    e = 4096 * 4096 * 2
    gathers_scatters = 2 * (4 + 2) + 1
    blocked_us = gathers_scatters * ring_us(AG, e) + 3 * ring_us(AR, 4096 * 4)
    assert (default.step_time_s - overlapped.step_time_s) * 1e6 == pytest.approx(blocked_us,
                                                                                  rel=1e-9)
    assert default.compute_s == pytest.approx(overlapped.compute_s, rel=1e-12)


def test_data_parallel_collectives_run_on_n_over_t_ranks():
    """t = 8 on 2 nodes of 8: ZeRO-3 gathers among N_d = 2 ranks 8 apart, one per node, each
    rank sending (N_d - 1) / N_d of every unit of its slice, forward and backward. Llama-2-7B's
    slice at t = 8, by hand: a layer 4 x 4096 x 512 (Q, K, V, O) + 3 x 4096 x 1376 (SwiGLU) +
    2 x 4096 (norms) = 25,305,088; embedding 4000 x 4096; head 4096 + 4000 x 4096."""
    s = load_scenario(LLAMA, ["cluster.nodes=2", "parallelism.tensor_parallel=8"])
    assert Engine(s, 3).group == Group(2, 1, stride=8)
    gathered = 4000 * 4096 + 32 * 25_305_088 + 4096 + 4000 * 4096  # 842,534,912
    result = simulate(s, 3)
    assert result.comm_bytes_per_group["dp"][AG] == (2 - 1) / 2 * 2 * gathered * 2
    assert set(result.comm_bytes_per_group) == {"dp", "tp"}


CONNECTION = 8 * 512 * 8 * 16 + 120 * 640 * 8 * 8 + (1 << 22)  # NCCL's LL, LL128, Simple buffers


def test_device_memory_counts_the_tp_communicator():
    """One DGX A100, t = 8: the data-parallel group is each rank alone (no communicator); the TP
    group's ring graph on one node is 12 channels (test_nccl_collectives.py's search), and NCCL
    sets up twice the graph's (comm->nChannels): 24, each receiving from 1 peer."""
    s = load_scenario(LLAMA, [*RING, "cluster.nodes=1", "parallelism.tensor_parallel=8"])
    context = round(s.cluster.cuda_context_bytes)
    assert overhead_bytes(s, 3) == context + 24 * 1 * CONNECTION


def test_tokens_per_gpu_count_a_tp_groups_tokens_once():
    s = load_scenario(LLAMA, ["cluster.nodes=2", "parallelism.tensor_parallel=8",
                              "model.layers=2"])
    result = simulate(s, 1)
    assert result.tokens_per_s_per_gpu * result.step_time_s == pytest.approx(4096 / 8, rel=1e-12)


def test_tp_collectives_have_a_lane_and_groups_in_the_json():
    s = tiny("parallelism.sequence_parallel=true")
    result = simulate(s, 3)
    trace = chrome_trace([result])
    lanes = {e["args"]["name"]: e["tid"] for e in trace["traceEvents"]
             if e.get("name") == "thread_name"}
    tp_events = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] == lanes["tp"]]
    assert {e["args"]["name"] for e in tp_events} >= {"TP QKV input all-gather",
                                                     "TP replicated-gradient all-reduce"}
    as_json = result.as_dict()
    assert set(as_json["comm_bytes_per_group"]) == {"dp", "tp"}
    assert "comm_bytes_per_group" not in simulate(load_scenario(TINY), 3).as_dict()


def test_an_async_collective_hides_behind_its_one_gemm_only():
    """Megatron's default (LinearWithGradAccumulationAndAsyncCommunication.backward): the input
    gradient's all-reduce is launched, the weight gradient's GEMM runs, then the stream waits.
    The CPU box's flat model (25e9 FLOP/s): each all-reduce starts with a compute of exactly
    its GEMM, 2 x tokens x h x width / rate (tokens 64, h 64, a rank's fc1
    width f / t = 128, QKV 3h / t = 96), and the layer goes on at the later of the two ends."""
    result = simulate(tiny("cluster.nodes=1", "cluster.gpus_per_node=2"), 0)
    events = [e for e in result.ranks[0].state.events
              if e["phase"] == "backward" and e["layer"] == 1 and e["queue"] in ("compute", "tp")]
    seen = 0
    for width, name in ((128, "TP fc1 input-gradient all-reduce"),
                        (96, "TP QKV input-gradient all-reduce")):
        i = next(i for i, e in enumerate(events) if e["name"] == name)
        comm = events[i]
        gemm = next(e for e in events if e["queue"] == "compute"
                    and e["start_s"] == comm["start_s"])
        assert gemm["end_s"] - gemm["start_s"] == pytest.approx(2 * 64 * 64 * width / 25e9,
                                                                rel=1e-9)
        after = [e for e in events[i + 1:] if e["queue"] == "compute"]
        if after:
            assert after[0]["start_s"] == pytest.approx(max(comm["end_s"], gemm["end_s"]),
                                                        rel=1e-12)
        seen += 1
    assert seen == 2


def test_a_calibrated_tp_collective_is_priced_from_the_t_rank_fit():
    """`zero-real calibrate --nproc N` measures every world of 1..N ranks (collectives from 2),
    so a TP group of t ranks inside N finds its own fit: on the committed 4-process CPU profile,
    t = 2's all-reduce of E takes the 2-rank α-β line (read here from the file), not the 4-rank
    line, and nothing scales it (version 2 has no in-step scales)."""
    import json

    from tests.conftest import ROOT

    path = ROOT / "profiles" / "cpu_gloo_tiny.json"
    s = tiny(f"cluster.profile={path}")
    result = simulate(s, 0)
    ev = next(e for e in result.ranks[0].state.events
              if e["name"] == "TP attention output all-reduce")
    impl = s.cluster.collective_impl
    fits = json.loads(path.read_text())["fit"]["collectives"][impl]["all_reduce"]

    def line(ranks):
        seg = next(g for g in fits[str(ranks)]["segments"] if g["min_bytes"] <= E <= g["max_bytes"])
        return seg["alpha_s"] + seg["s_per_byte"] * E

    assert ev["end_s"] - ev["start_s"] == pytest.approx(line(2), rel=1e-9)
    assert line(2) != pytest.approx(line(4), rel=0.01)


def test_fewer_kv_heads_than_t_gather_the_qkv_output():
    """Megatron's SelfAttention.get_query_key_value_tensors with num_query_groups < t: the QKV
    output, s x b x (a + 2kv) x head_dim, all-gathered in forward (each rank then takes its
    heads and its one key/value head) and its gradient reduce-scattered in backward; again in
    backward under full recomputation. Tiny GPT with kv = 2 < t = 4: a = 4, head_dim 16,
    (4 + 2 x 2) x 16 = 128 columns, x s b = 64 tokens x 4 bytes."""
    qkv = 64 * 128 * 4
    s = load_scenario(TINY, ["parallelism.tensor_parallel=4", "model.kv_heads=2"])
    layer_f, layer_b = plan(s).forward[1], plan(s).backward[1]
    assert ops(layer_f) == [(AG, qkv), (AR, E), (AR, E)]
    assert ops(layer_b) == [(AR, E), (RS, qkv), (AR, E)]
    full = load_scenario(TINY, ["parallelism.tensor_parallel=4", "model.kv_heads=2",
                                'training.activation_checkpointing="full"'])
    assert ops(plan(full).backward[1]) == [(AG, qkv), (AR, E), (AR, E), (AR, E), (RS, qkv),
                                           (AR, E)]
    sp = load_scenario(TINY, ["parallelism.tensor_parallel=4", "model.kv_heads=2",
                              "parallelism.sequence_parallel=true"])
    assert ops(plan(sp).forward[1]) == [(AG, E), (AG, qkv), (RS, E), (AG, E), (RS, E)]
    assert (RS, qkv) in ops(plan(sp).backward[1])
    even = load_scenario(TINY, ["parallelism.tensor_parallel=2", "model.kv_heads=2"])
    assert all(size != qkv for _, size in ops(plan(even).forward[1]))  # kv = t: no gather


def test_a_units_gradients_are_reduced_after_its_weight_gradients():
    """Megatron's gradient hooks fire once a parameter's weight gradient is accumulated: a
    unit's ZeRO-3 reduce-scatter starts after every compute of its backward, the GEMMs its TP
    collectives hide behind included."""
    s = load_scenario(SCENARIOS / "megatron_7b5_64gpu.toml",
                      ["parallelism.tensor_parallel=8", "training.zero_stage=3",
                       'training.activation_checkpointing="none"', "model.layers=4"])
    events = simulate(s, 3).ranks[0].state.events
    checked = 0
    for unit in range(1, 5):
        computes = [e for e in events if e["phase"] == "backward" and e["layer"] == unit
                    and e["queue"] == "compute"]
        scatter = next(e for e in events if e["phase"] == "backward" and e["layer"] == unit
                       and e["name"] == "gradient reduce-scatter")
        assert len(computes) >= 3  # its TP windows and the rest of its backward
        assert scatter["start_s"] >= max(e["end_s"] for e in computes)
        checked += 1
    assert checked == 4


def test_sharded_gradients_sum_their_shard_of_the_replicated_gradients():
    """Under SP the replicated parameters' gradients are all-reduced over the TP group once per
    step (finalize_model_grads); where ZeRO-2 and 3 shard the gradients over N_d = 4 / 2 = 2
    data-parallel ranks, a rank sums its half: REPLICATED / 2 bytes, the whole at stages 0-1."""
    s = tiny("parallelism.sequence_parallel=true")
    for stage, size in ((0, REPLICATED), (1, REPLICATED), (2, REPLICATED // 2),
                        (3, REPLICATED // 2)):
        step = step_shape(s, stage).tensor.step
        assert [(c.op, c.size_bytes) for c in step] == [(AR, size)], stage


def test_overlap_leaves_the_kv_gather_blocking():
    """Megatron's userbuffers and PyTorch's async TP overlap the linears' collectives; the QKV
    output's gather when kv < t (get_query_key_value_tensors) stays a plain synchronous call:
    under tp_comm_overlap it starts after the unit's compute, on the compute stream's wait."""
    s = load_scenario(TINY, ["parallelism.tensor_parallel=4", "model.kv_heads=2",
                             "parallelism.sequence_parallel=true",
                             "parallelism.tp_comm_overlap=true"])
    events = simulate(s, 0).ranks[0].state.events
    gather = next(e for e in events if e["name"] == "TP QKV output all-gather (kv < t)"
                  and e["phase"] == "forward" and e["layer"] == 1)
    compute = next(e for e in events if e["queue"] == "compute" and e["phase"] == "forward"
                   and e["layer"] == 1)
    beside = next(e for e in events if e["name"] == "TP QKV input all-gather"
                  and e["phase"] == "forward" and e["layer"] == 1)
    assert beside["start_s"] == compute["start_s"]  # overlapped: launched with the compute
    assert gather["start_s"] >= compute["end_s"]  # synchronous: after it
