"""Tensor parallelism's slice of the model: what one rank of a tensor-parallel group of t holds
and computes, in Megatron-LM's layout (Shoeybi et al. 2019, §3; megatron/core/tensor_parallel/
layers.py and megatron/core/transformer/attention.py):

    Q, K, V and the MLP's first projection(s)   column-parallel: a/t query heads, kv/t key/value
                                                heads, f/t of the MLP's width, their biases split
                                                alike. When kv < t the fused QKV weight is still
                                                split t ways, kv x head_dim / t columns of K and
                                                of V each (a part of one head); the rank gathers
                                                the QKV output and attends with one whole
                                                key/value head (attention.py, SelfAttention.
                                                get_query_key_value_tensors, since Megatron-LM
                                                f7dfb99, "Support TP greater than num_kv_heads")
    attention output, the MLP's last projection row-parallel: (h x q/t), (h x f/t); their
                                                biases whole (added after the reduction)
    token embedding, output layer               vocabulary-parallel: ceil(v/t) rows each (the
                                                vocabulary padded to a multiple of t, as
                                                Megatron pads it; give the padded size to match
                                                its make-vocab-size-divisible-by)
    norms, learned position embedding           replicated

A slice answers what analytic/model.py asks of a ModelConfig (hidden, heads, n_kv_heads,
head_dim, ffn_width, vocab, ...), with `q_width` the rank's query width (a/t x head_dim, the
hidden width when t = 1) and `sequence_shards` the ways sequence parallelism splits the tensors
every rank keeps whole without it (Korthikanti et al. 2022, §4.2.2): t with it, 1 without. So
the per-rank parameters, gather units, FLOPs, GEMM shapes and activations of the model module
are the rank's, and Korthikanti's Table 2 falls out term by term:

    without SP   sbh (10 + 24/t + 5as/(ht))      with SP   sbh (34/t + 5as/(ht))
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from zerosim.scenario.config import ModelConfig


@dataclass(frozen=True)
class ModelSlice:
    """One tensor-parallel rank's part of a shaped model: ModelConfig's questions, answered for
    the rank (never a bare Ψ: tensor parallelism splits matrices by shape)."""

    name: str
    layers: int
    hidden: int
    heads: int
    """Query heads on this rank: a / t."""
    n_kv_heads: int
    """Key/value heads this rank attends with: kv / t, or 1 when kv < t (the gathered QKV
    output's one head of its group)."""
    kv_width: int
    """Columns of K's (and of V's) weight this rank holds: kv x head_dim / t, also when kv < t
    (Megatron splits the fused QKV weight evenly, never replicates it)."""
    head_dim: int
    ffn_width: int
    """f / t."""
    vocab: int
    """ceil(v / t) rows of the embedding and the output layer."""
    max_seq_len: int | None
    mlp: str
    norm: str
    bias: bool
    tied_embeddings: bool
    position: str
    dropout: bool
    tp: int
    sequence_shards: int
    """t under sequence parallelism, else 1: how many ways the replicated tensors are split."""
    qkv_biased: bool = False
    norm_biased: bool = False
    qk_norm: bool = False
    layer_norms: int = 2
    sliding_window: int | None = None
    """The model's: a rank attends over the same window with its a/t heads."""
    sliding_window_layers: tuple[int, ...] | None = None

    is_bare = False
    params = None

    @property
    def n_layers(self) -> int:
        return self.layers

    @property
    def q_width(self) -> int:
        """Columns of Q (and rows of the attention output's input) on this rank."""
        return self.heads * self.head_dim


def tp_slice(m: ModelConfig, tp: int, sequence_parallel: bool = False) -> ModelSlice:
    """Rank's slice of `m` under t = tp (scenario/axes.py has checked that t divides heads and
    the MLP's width, that kv and t divide one another, and that t divides kv x head_dim)."""
    return ModelSlice(
        name=m.name, layers=m.layers, hidden=m.hidden, heads=m.heads // tp,
        n_kv_heads=max(1, m.n_kv_heads // tp), kv_width=m.kv_width // tp, head_dim=m.head_dim,
        ffn_width=m.ffn_width // tp, vocab=-(-m.vocab // tp), max_seq_len=m.max_seq_len,
        mlp=m.mlp, norm=m.norm, bias=m.bias, tied_embeddings=m.tied_embeddings,
        position=m.position, dropout=m.dropout, tp=tp,
        sequence_shards=tp if sequence_parallel else 1, qkv_biased=m.qkv_biased,
        norm_biased=m.norm_biased, qk_norm=m.qk_norm, layer_norms=m.layer_norms,
        sliding_window=m.sliding_window, sliding_window_layers=m.sliding_window_layers)


def rank_model(scenario):
    """The model as one rank holds it: the scenario's ModelConfig without tensor parallelism
    (so that t = 1 is exactly what it was), else the rank's slice (cached per model and t)."""
    p = scenario.parallelism
    if p.tensor_parallel == 1:
        return scenario.model
    return _slice(scenario.model, p.tensor_parallel, p.sequence_parallel)


@lru_cache(maxsize=64)
def _slice(m: ModelConfig, tp: int, sequence_parallel: bool) -> ModelSlice:
    return tp_slice(m, tp, sequence_parallel)
