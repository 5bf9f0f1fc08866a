"""Tensor parallelism's lines the other TP tests left loose (issue 29's mutation run,
bench/mutations/results-issue29.txt): what t = 1 leaves alone, what a refusal names, what the
compute stream records beside TP's collectives. Every expected value is a hand count, a
literal, or a rule of Megatron-LM's source cited at the test, never zerosim's own formulas."""

import pytest

from tests.conftest import SCENARIOS, assert_one_line_error, run_zerosim
from zerosim.analytic.model import activations, unit_flops, unit_tensor_shapes
from zerosim.analytic.tensor_comm import tensor_collectives
from zerosim.parallel.tensor import tp_slice
from zerosim.scenario.config import ModelConfig, TrainingConfig
from zerosim.scenario.load import load_scenario
from zerosim.sim.collectives.ring import Group
from zerosim.sim.engine import Engine, simulate
from zerosim.sim.op_costs import op_costs
from zerosim.tradeoffs.plan_family import consider

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"  # 2 layers, h 64, s 32, b 2, fp32, flat 25e9 FLOP/s


def tiny(*sets):
    return load_scenario(TINY, list(sets))


def seconds(events, **where):
    return [e["end_s"] - e["start_s"] for e in events
            if all(e[key] == value for key, value in where.items())]


@pytest.mark.parametrize("sets", [[], ["parallelism.sequence_parallel=true"]])
def test_at_t_1_no_collective_of_tensor_parallelism_and_a_2_to_1_backward(sets):
    """Megatron's mappings return their input when the TP group is one rank (mappings.py:
    _reduce and _gather_along_first_dim bypass a group of size 1), and its arguments.py turns
    sequence parallelism off at t = 1: no TP collective, no TP lane, and with the flat model
    and no recomputation each layer's backward is twice its forward (the gradients of a GEMM's
    input and of its weight: the FLOP count behind Narayanan et al. 2021's Eq. 3)."""
    s = tiny(*sets)
    tp = tensor_collectives(s.model, s.training, s.parallelism, 4)
    assert (tp.forward, tp.backward, tp.step) == ([], [], ())
    events = simulate(s, 0).ranks[0].state.events
    assert not [e for e in events if e["queue"] == "tp"]
    for layer in (1, 2):  # the two transformer layers
        forward = sum(seconds(events, queue="compute", phase="forward", layer=layer))
        backward = sum(seconds(events, queue="compute", phase="backward", layer=layer))
        assert forward > 0 and backward == pytest.approx(2 * forward, rel=1e-12)


def test_a_blocking_tp_collective_adds_no_compute_event():
    """Under sequence parallelism a layer's backward makes 6 TP collectives, 4 of them async
    beside a GEMM (the re-gathers beside the input gradient, the reduce-scatters beside the
    weight gradient) and 2 synchronous (the row-parallel layers' output-gradient all-gathers,
    mappings.py _gather_along_first_dim): the compute stream waits for those two without a
    kernel of its own, so every compute event of a layer's backward does work."""
    s = tiny("parallelism.tensor_parallel=2", "parallelism.sequence_parallel=true")
    events = simulate(s, 0).ranks[0].state.events
    for layer in (1, 2):
        durations = seconds(events, queue="compute", phase="backward", layer=layer)
        assert durations and min(durations) > 0, durations
        # the 4 GEMMs by hand, 2 x tokens x h x width / 25e9 FLOP/s: fc1 f / t = 128 columns,
        # QKV 3h / t = 96, each as the input gradient and as the weight gradient
        for width in (128, 128, 96, 96):
            gemm = next(d for d in durations if d == pytest.approx(2 * 64 * 64 * width / 25e9,
                                                                   rel=1e-9))
            durations.remove(gemm)


UNSET_SEQUENCE = """
[model]
layers = 2
hidden = 512
heads = 8
ffn = 1024
vocab = 1000
mlp = "swiglu"
norm = "rmsnorm"
bias = false
position = "rope"
[cluster]
nodes = 1
gpus_per_node = 8
gpu = "A100-80GB"
[parallelism]
tensor_parallel = 2
sequence_parallel = true
"""


def test_an_unset_sequence_under_sp_is_named_unset(write):
    """RoPE gives no max_seq_len to default training.seq_len from: the one line says the
    sequence is not set, not that some length fails to split t ways."""
    result = run_zerosim("memory", str(write("sp.toml", UNSET_SEQUENCE)))
    assert_one_line_error(result, "training.seq_len is not set")
    assert "multiple of" not in result.stderr


# TinyLlama-1.1B's shape with 2 kv heads of 64 (tests/zerosim/test_tensor_parallel_oracles.py's
# GQA_KV2): at t = 8 each rank holds 2 x 64 / 8 = 16 columns of K and of V.
GQA_KV2 = ModelConfig(name="TinyLlama kv 2", layers=2, hidden=2048, heads=32, kv_heads=2,
                      ffn=5632, vocab=32000, mlp="swiglu", norm="rmsnorm", bias=False,
                      tied_embeddings=False, position="rope", dropout=False)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_t_ranks_share_a_layers_flops_evenly_when_kv_is_below_t(t):
    """Megatron splits the fused QKV weight's (32 + 2 x 2) x 64 columns evenly whatever t
    (attention.py, since f7dfb99): a rank's QKV GEMM is 2 x tokens x h x (q + 2 kv x d) / t,
    its attention scores a t-th, so each of the layer's GEMMs over the t ranks sums to the
    whole layer's, by hand: 2 x tokens x (h (2h + 2 x 128) + 3 h f) + 4 b s^2 h forward (Q
    and the output projection h x h, K and V h x 128, SwiGLU's three h x f; QK^T and AV)."""
    train = TrainingConfig(micro_batch=1, seq_len=2048)
    tokens, h, f = 2048, 2048, 5632
    whole = 2 * tokens * (h * (2 * h + 2 * 128) + 3 * h * f) + 4 * 1 * 2048**2 * h
    layer = unit_flops(tp_slice(GQA_KV2, t), train)[1]
    assert layer.forward * t == pytest.approx(whole, rel=1e-12)
    assert layer.backward * t == pytest.approx(2 * whole, rel=1e-12)


def test_a_ranks_tensors_are_megatrons_slices_as_out_by_in():
    """Llama-3-8B at t = 8 in torchtitan's layout (nn.Linear weights are (out, in)), what FSDP2
    shards along rows: wq (4096/8 = 512, 4096), wk and wv (8 x 128 / 8 = 128, 4096), the
    row-parallel wo (4096, 512), w1 and w3 (14336/8 = 1792, 4096), the row-parallel w2
    (4096, 1792); the RMSNorms whole; the vocabulary-parallel embedding and head 16032 rows."""
    llama3 = ModelConfig(name="Llama-3-8B", layers=1, hidden=4096, heads=32, kv_heads=8,
                         ffn=14336, vocab=128256, mlp="swiglu", norm="rmsnorm", bias=False,
                         tied_embeddings=False, position="rope", dropout=False)
    norm = (4096, 1)
    assert unit_tensor_shapes(tp_slice(llama3, 8)) == [
        [(16032, 4096)],
        [norm, (512, 4096), (128, 4096), (128, 4096), (4096, 512),
         norm, (1792, 4096), (4096, 1792), (1792, 4096)],
        [norm, (16032, 4096)]]


def test_without_sp_a_sequence_t_does_not_divide_is_taken(write):
    """Only sequence parallelism splits the sequence t ways (Korthikanti et al. 2022, §4.2.2);
    without it every rank keeps the whole [s, b, h] (mappings.py, _reduce), so s = 4097 runs
    at t = 2."""
    text = UNSET_SEQUENCE.replace("sequence_parallel = true", "sequence_parallel = false")
    result = run_zerosim("memory", str(write("tp.toml", text + "[training]\nseq_len = 4097\n")),
                         "--json")
    assert result.code == 0, result.stderr
    assert result.json["world_size"] == 8


LLAMA = SCENARIOS / "llama2_7b_64gpu.toml"  # A100-80GB, bf16, s 4096, b 1, the op model


def test_an_async_all_reduce_hides_behind_its_weight_gradient_gemm():
    """Megatron without SP (layers.py, LinearWithGradAccumulationAndAsyncCommunication.
    backward): the input gradient is computed, its all-reduce launched async, then the weight
    gradient's GEMM runs, an (h x width) output over the tokens, while it is in flight. Under
    the op model that GEMM differs from the input gradient's (tokens x h over width): fc1's all-
    reduce starts beside SwiGLU's two w1/w3 weight gradients (h x 11008/8 over 4096 tokens),
    the output layer's beside its weight gradient (h x 32000/8 over the tokens)."""
    s = load_scenario(LLAMA, ["cluster.nodes=1", "parallelism.tensor_parallel=8",
                              "model.layers=2"])
    events = simulate(s, 0).ranks[0].state.events
    costs = op_costs(s.cluster)
    tokens, h = 4096, 4096
    for name, width, count in (("TP fc1 input-gradient all-reduce", 11008 // 8, 2),
                               ("TP output-layer input-gradient all-reduce", 32000 // 8, 1)):
        comm = next(e for e in events if e["name"] == name)
        beside = [e["end_s"] - e["start_s"] for e in events
                  if e["queue"] == "compute" and e["start_s"] == comm["start_s"]]
        wgrad = count * costs.gemm(h, width, tokens).seconds
        dgrad = count * costs.gemm(tokens, h, width).seconds
        assert wgrad != pytest.approx(dgrad, rel=1e-3)  # the two GEMMs tell apart
        assert beside == [pytest.approx(wgrad, rel=1e-9)], name


def test_the_optimizer_waits_for_the_replicated_gradients_all_reduce():
    """Megatron's train_step runs finalize_model_grads (the all-reduce of the sequence-parallel
    parameters' gradients over the TP group) before optimizer.step(): the optimizer's compute
    starts once that all-reduce has ended."""
    s = tiny("parallelism.tensor_parallel=2", "parallelism.sequence_parallel=true")
    events = simulate(s, 0).ranks[0].state.events
    reduce = next(e for e in events if e["name"] == "TP replicated-gradient all-reduce")
    optimizer = next(e for e in events if e["name"] == "optimizer")
    assert reduce["end_s"] > reduce["start_s"]
    assert optimizer["start_s"] >= reduce["end_s"]


def test_a_tp_candidate_is_judged_against_the_gpu_less_its_own_communicators():
    """plan --allow tp: a candidate's room is the GPU less its own CUDA context and
    communicators, whatever room the plain stages had. Llama-2-7B at t = 8 on one DGX A100,
    ZeRO-3 over its one data-parallel rank: 842,534,912 parameters (tests/zerosim/
    test_tensor_parallel_step.py's hand count) x 16 bytes (Rajbhandari et al. 2020, §3) =
    13.5 GB, far under 80 GiB, so it fits even when the plain stages were given no room."""
    s = load_scenario(LLAMA, ["cluster.nodes=1"])
    entries, _, _ = consider(s, ("tp",), 0, 80 * 2**30)
    t8 = [e for e in entries if e["settings"]["tensor_parallel"] == 8 and e["stage"] == 3]
    assert len(t8) == 1 and t8[0]["fits"], t8


def test_a_bias_free_layernorm_all_reduces_its_weights_alone_under_sp():
    """finalize_model_grads all-reduces the sequence-parallel parameters' gradients: without
    biases a layer has two LayerNorm weights of h and nothing row-parallel to add, the final
    norm one more: (2 layers x 2 + 1) x 64 fp32 gradients = 1,280 bytes (tiny GPT, h 64)."""
    s = tiny("parallelism.tensor_parallel=2", "parallelism.sequence_parallel=true",
             "model.bias=false")
    tp = tensor_collectives(s.model, s.training, s.parallelism, 4)
    assert [(c.op, c.size_bytes) for c in tp.step] == [("all_reduce", (2 * 2 + 1) * 64 * 4)]


def test_a_swiglu_fc1_collective_hides_behind_both_weight_gradients_at_the_flat_rate():
    """SwiGLU's first projections are two column-parallel GEMMs (w1 and w3, Megatron's fused
    linear_fc1 of 2f/t columns): fc1's input-gradient all-reduce has both weight gradients to
    hide behind, 2 x (2 x tokens x h x f/t) FLOPs at the flat model's rate (Llama-2-7B at
    t = 8: f/t = 11008/8 = 1376, 4096 tokens, h 4096)."""
    s = load_scenario(LLAMA, ["cluster.nodes=1", "parallelism.tensor_parallel=8",
                              "model.layers=2", "cluster.compute_model='flat'"])
    events = simulate(s, 0).ranks[0].state.events
    comm = next(e for e in events if e["name"] == "TP fc1 input-gradient all-reduce")
    beside = [e["end_s"] - e["start_s"] for e in events
              if e["queue"] == "compute" and e["start_s"] == comm["start_s"]]
    flops = 2 * (2 * 4096 * 4096 * 1376)
    assert beside == [pytest.approx(flops / s.cluster.hardware.compute_flops_per_s, rel=1e-9)]


def test_at_t_2_the_data_parallel_group_is_every_other_rank():
    """Megatron's initialize_model_parallel (parallel_state.py): TP groups are t consecutive
    ranks, data-parallel groups the ranks t apart. 2 nodes of 8 at t = 2: 8 data-parallel ranks
    0, 2, ..., 14, 4 of them in each node; the TP group 2 ranks of one node."""
    s = load_scenario(LLAMA, ["cluster.nodes=2", "parallelism.tensor_parallel=2"])
    engine = Engine(s, 3)
    assert engine.group == Group(8, 4, stride=2)
    assert engine.groups["tp"] == Group(2, 2)


def test_selective_op_keeps_a_ranks_slices_and_its_heads_log_sum_exp():
    """torchtitan's per-op policy (activation_checkpoint.py, _save_list) on a rank of t = 2,
    GPT of h 1024, 16 heads, f 4096, s 1024, b 2, bf16, by hand: the layer input s b h, wq's
    and wv's outputs and the attention output s b h / 2 each, fc1's output s b f / 2, in 2
    bytes (18,874,368), and the flash kernel's fp32 log-sum-exp of the rank's 8 heads,
    4 x 8 x s x b = 65,536."""
    gpt = ModelConfig(name="GPT", layers=2, hidden=1024, heads=16, vocab=50304,
                      max_seq_len=1024)
    train = TrainingConfig(micro_batch=2, seq_len=1024, precision="bf16", flash_attention=True,
                           activation_checkpointing="selective_op")
    sb = 1024 * 2
    kept = 2 * (sb * 1024 + 3 * sb * 512 + sb * 2048) + 4 * 8 * sb
    assert kept == 18_874_368 + 65_536
    assert activations(tp_slice(gpt, 2), train).stored_per_layer_bytes == kept


@pytest.mark.parametrize("t", [1, 2])
def test_gloo_runs_every_collective_on_its_ring_tp_group_or_not(t):
    """The CPU box's collectives are gloo's, one ring algorithm for every op (PyTorch's
    ProcessGroupGloo all-reduces with gloo's ring), the TP group's as the data-parallel
    group's: the step names that one algorithm, 'ring', not NCCL's per-op breakdown."""
    result = simulate(tiny(f"parallelism.tensor_parallel={t}"), 0)
    assert result.algorithm == "ring"
