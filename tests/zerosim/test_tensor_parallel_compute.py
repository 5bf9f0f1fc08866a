"""What a tensor-parallel rank computes (parallel/tensor.py's slice through analytic/model.py's
FLOPs and sim/op_costs.py's GEMMs), against independent oracles: Narayanan et al. 2021's FLOPs
per iteration (Eq. 3, their formula, not their measurements) divided t ways, and the GEMM shapes
of Megatron-LM's layout written out by hand (ColumnParallelLinear splits the output features,
RowParallelLinear the input features: megatron/core/tensor_parallel/layers.py)."""

import dataclasses

import pytest

from zerosim.analytic.model import unit_flops
from zerosim.hardware import GPUS
from zerosim.parallel.tensor import tp_slice
from zerosim.scenario.config import ModelConfig, TrainingConfig
from zerosim.sim import op_costs as ops

GPT = ModelConfig(layers=4, hidden=2048, heads=16, vocab=51200, max_seq_len=2048)
LLAMA = ModelConfig(layers=2, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=128256,
                    mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False,
                    position="rope", dropout=False)


def narayanan_flops(b, s, layers, h, vocab):
    """Narayanan et al. 2021, Eq. 3: 96 B s l h^2 (1 + s / 6h + V / 16 l h), with full
    activation recomputation (forward, backward, forward again), GeLU MLP of 4h."""
    return 96 * b * s * layers * h**2 * (1 + s / (6 * h) + vocab / (16 * layers * h))


@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_a_rank_does_a_tth_of_narayanans_flops(t):
    train = TrainingConfig(micro_batch=2, seq_len=2048, activation_checkpointing="full")
    per_rank = sum(u.forward + u.backward for u in unit_flops(tp_slice(GPT, t), train))
    assert per_rank * t == pytest.approx(narayanan_flops(2, 2048, 4, 2048, 51200), rel=1e-12)


class Recorder(ops.OpCosts):
    """The A100's op costs, noting every GEMM's (m, n, k) a pass launches."""

    def __init__(self):
        super().__init__(GPUS["A100-80GB"], 2039)
        self.shapes = []

    def gemm(self, m, n, k, batch=1):
        self.shapes.append((m, n, k))
        return super().gemm(m, n, k, batch)


@pytest.mark.parametrize("t", [1, 2, 8])
def test_a_llama_rank_launches_its_slices_gemms(t):
    train = TrainingConfig(micro_batch=1, seq_len=4096, flash_attention=True)
    tokens, h, d = 4096, 8192, 128
    q, kv, f = 64 // t * d, max(1, 8 // t) * d, 28672 // t
    costs = Recorder()
    ops.layer(costs, tp_slice(LLAMA, t), train, backward=False)
    # Q, K, V column-parallel (one GEMM), attention output row-parallel, gate and up
    # column-parallel, down row-parallel: every token (sequence parallelism gathers them first)
    assert costs.shapes == [(tokens, q + 2 * kv, h), (tokens, h, q), (tokens, f, h),
                            (tokens, f, h), (tokens, h, f)]
    costs.shapes.clear()
    ops.head(costs, tp_slice(LLAMA, t), train, backward=False)
    assert costs.shapes == [(tokens, -(-128256 // t), h)]  # the vocabulary-parallel logits


def test_smaller_gemms_lose_to_wave_quantization():
    """t = 8 splits the layer's FLOPs eight ways, but its GEMMs fill fewer of the A100's 108
    SMs' waves: the rank's layer takes more than an eighth of the whole layer's time."""
    train = TrainingConfig(micro_batch=1, seq_len=4096, flash_attention=True)
    costs = ops.OpCosts(GPUS["A100-80GB"], 2039)
    whole = ops.layer(costs, LLAMA, train, backward=False).seconds
    eighth = ops.layer(costs, tp_slice(LLAMA, 8), train, backward=False).seconds
    assert whole / 8 < eighth < whole / 4


def test_sequence_parallelism_splits_the_elementwise_ops_not_the_gemms():
    train = TrainingConfig(micro_batch=1, seq_len=4096, flash_attention=True)
    plain, split = tp_slice(GPT, 4), tp_slice(GPT, 4, sequence_parallel=True)
    nbytes, kernels = ops.elementwise_bytes(plain, train, backward=False)
    sp_bytes, sp_kernels = ops.elementwise_bytes(split, train, backward=False)
    # Only the MLP's GeLU works on the rank's f/t columns of every token: the norms,
    # residuals and dropouts (4h-wide GeLU aside) see a quarter of the tokens under SP.
    gelu = 2 * 4096 * (4 * 2048 // 4) * ops.EAGER_FACTORS["single"][0] * ops.BYTES
    assert kernels == sp_kernels
    assert sp_bytes - gelu == pytest.approx((nbytes - gelu) / 4, rel=1e-12)
    a, b = Recorder(), Recorder()
    ops.layer(a, plain, train, backward=True)
    ops.layer(b, split, train, backward=True)
    assert a.shapes == b.shapes


def test_the_whole_model_is_its_own_slice_at_t_1():
    """tp_slice(m, 1) answers every question a ModelConfig answers the same way."""
    s = tp_slice(LLAMA, 1)
    for field in ("hidden", "heads", "n_kv_heads", "head_dim", "ffn_width", "vocab", "q_width",
                  "sequence_shards", "layers", "mlp", "norm", "bias", "position"):
        assert getattr(s, field) == getattr(LLAMA, field), field
    assert dataclasses.is_dataclass(s)
