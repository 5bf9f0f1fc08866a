"""activation_checkpointing = "selective_op": torchtitan's per-op policy (keep the attention output
and every other matmul's output, recompute the rest). Its memory lies between "none" and
"full", by a hand count; its recomputation is the matmuls it did not keep."""

import pytest

from zerosim.analytic.memory import stage_memory
from zerosim.analytic.model import activations, unit_flops
from zerosim.scenario.load import load_scenario
from zerosim.sim import op_costs as ops
from zerosim.sim.engine import simulate
from zerosim.hardware import GPUS

from tests.conftest import SCENARIOS

LLAMA = SCENARIOS / "llama2_7b_64gpu.toml"  # h 4096, 32 heads, no GQA, SwiGLU f 11008, s 4096


def llama(checkpointing, *extra):
    return load_scenario(LLAMA, [f"training.activation_checkpointing='{checkpointing}'", *extra])


def test_memory_lies_between_none_and_full():
    for stage in range(4):
        peaks = [stage_memory(llama(ac), stage).activations_bytes
                 for ac in ("full", "selective_op", "none")]
        assert peaks[0] < peaks[1] < peaks[2], (stage, peaks)


def test_what_it_keeps_by_hand():
    """Per layer, b = 1, s = 4096, bf16: the layer input, wq's output, wv's, the attention output
    (4 x sbh, kv = h here) and w1's and w2's outputs (sbf + sbh), plus the fp32 log-sum-exp of
    32 heads: 2 (5 sbh + sbf) + 4 x 32 s."""
    sbh, sbf, s = 4096 * 4096, 4096 * 11008, 4096
    acts = activations(llama("selective_op").model, llama("selective_op").training)
    assert acts.stored_per_layer_bytes == 2 * (5 * sbh + sbf) + 4 * 32 * s
    assert acts.recompute_bytes == acts.per_layer_bytes - acts.stored_per_layer_bytes


def test_it_recomputes_the_matmuls_it_did_not_keep():
    """wk (h x kv), wo (h x h) and w3 (h x f), forward again: 2 x tokens x their weights."""
    s = llama("selective_op")
    plain = unit_flops(s.model, llama("none").training)[1]
    layer = unit_flops(s.model, s.training)[1]
    tokens = 4096
    assert layer.backward - plain.backward == 2 * tokens * (4096 * 4096 + 4096 * 4096
                                                           + 4096 * 11008)
    costs = ops.OpCosts(GPUS["A100-80GB"], 2039)
    again = (costs.linear(tokens, 4096, 4096, False).seconds * 2
             + costs.linear(tokens, 4096, 11008, False).seconds)
    bytes_, kernels = ops.elementwise_bytes(s.model, s.training, False)
    again += costs.traffic(bytes_, kernels).seconds
    seconds = ops.unit_seconds(costs, s.model, s.training)[1][1]
    assert seconds == pytest.approx(ops.layer(costs, s.model, s.training, True).seconds + again,
                                    rel=1e-12)


def test_the_step_runs_and_its_memory_timeline_matches_the_model():
    s = llama("selective_op")
    result = simulate(s, 3)
    assert result.peak_bytes <= stage_memory(s, 3).peak_bytes
    assert simulate(llama("full"), 3).compute_s > result.compute_s > simulate(llama("none"),
                                                                               3).compute_s


def test_a_gelu_model_recomputes_its_down_projection():
    """Megatron's GPT (GeLU MLP of 4h, no GQA) under selective_op: torchtitan's policy keeps the
    outputs of wq, wv and the up projection, so backward re-runs wk (h -> h), wo (h -> h) and the
    down projection (4h -> h: a (T x 4h)(4h x h) GEMM), and the forward's elementwise ops."""
    base = load_scenario(SCENARIOS / "megatron_7b5_64gpu.toml", ["cluster.gpu='A100-80GB'"])
    s = load_scenario(base.source, ["cluster.gpu='A100-80GB'",
                                    "training.activation_checkpointing='selective_op'"])
    m, t = s.model, s.training
    assert (m.mlp, m.ffn_width, m.n_kv_heads) == ("gelu", 4 * 4096, 32)
    costs = ops.OpCosts(GPUS["A100-80GB"], 2039)
    T, h, f = 2048, 4096, 16384
    again = (costs.gemm(T, h, h).seconds * 2  # wk, wo: (T x h)(h x h)
             + costs.gemm(T, h, f).seconds)   # down: (T x f)(f x h), m = T, n = h, k = f
    bytes_, kernels = ops.elementwise_bytes(m, t, False)
    again += costs.traffic(bytes_, kernels).seconds
    seconds = ops.unit_seconds(costs, m, t)[1][1]
    assert seconds == pytest.approx(ops.layer(costs, m, t, True).seconds + again, rel=1e-12)
