"""Tensor parallelism's collectives: which ones a step runs among a tensor-parallel group, in
which unit and pass, of how many bytes, as Megatron-LM places them (Shoeybi et al. 2019, §3;
sequence parallelism: Korthikanti et al. 2022, §4.2.2). Read at NVIDIA/Megatron-LM d98e8a64dd.

E = s x b x h elements in the activation dtype (the whole hidden width: a layer's input and
output are whole on every rank, or the gathered sequence under SP). Sizes follow this code's
convention (an all-gather: the gathered output's bytes; a reduce-scatter: its input's).

    unit       pass       without SP                     with SP
    embedding  forward    all-reduce E (1)               reduce-scatter E (2), or all-reduce E
                                                         with learned positions (3)
               backward   -                              all-gather E (4)
    layer      forward    all-reduce E after the         all-gather E before QKV and before fc1
                          attention output and after     (5), reduce-scatter E after the
                          fc2 (6)                        attention output and after fc2 (6)
               backward   all-reduce E of the input      per column-parallel linear (QKV, fc1):
                          gradients of QKV and fc1 (7)   all-gather E of its saved input for the
                                                         weight gradient (8) and reduce-scatter
                                                         E of its input gradient (7); per
                                                         row-parallel one (attention output,
                                                         fc2): all-gather E of the output
                                                         gradient (4)
    head       forward    the loss: all-reduce of s*b    all-gather E before the output layer
                          fp32 three times (9)           (5), then the loss's three (9)
               backward   all-reduce E of the output     all-gather E (8), reduce-scatter E (7)
                          layer's input gradient (7)
    step                  -                              all-reduce of the replicated
                                                         parameters' gradients (10)
    layer, kv < t         forward: all-gather of the QKV output, s x b x (a + 2kv) x head_dim
                          elements; backward: reduce-scatter of its gradient (11)

 (1) megatron/core/tensor_parallel/layers.py, VocabParallelEmbedding.forward:
     reduce_from_tensor_model_parallel_region; its backward is the identity (mappings.py,
     _ReduceFromModelParallelRegion.backward).
 (2) the same with reduce_scatter_embeddings (megatron/core/models/common/embeddings/
     language_model_embedding.py: SP without learned positions): reduce_scatter_to_sequence_
     parallel_region.
 (3) language_model_embedding.py, LanguageModelEmbedding.forward: with learned positions the
     word embedding is all-reduced, the positions added, then scatter_to_sequence_parallel_region
     splits it (no communication).
 (4) mappings.py: the backward of _ReduceScatterToSequenceParallelRegion and of
     _ScatterToSequenceParallelRegion is _gather_along_first_dim (synchronous).
 (5) layers.py, LinearWithGradAccumulationAndAsyncCommunication.forward: with
     sequence_parallel, dist_all_gather_func of the input before the GEMM.
 (6) layers.py, RowParallelLinear.forward: reduce_from_tensor_model_parallel_region, or
     reduce_scatter_to_sequence_parallel_region with SP.
 (7) LinearWithGradAccumulationAndAsyncCommunication.backward: allreduce_dgrad (ColumnParallel-
     Linear sets it without SP) or, with SP, dist_reduce_scatter_func of grad_input, each
     async_op=True and waited for after the weight-gradient GEMM: it overlaps that GEMM.
 (8) the same backward: with SP the saved (sequence-sharded) input is all-gathered again,
     async_op=True, waited for after the input-gradient GEMM: it overlaps that GEMM.
 (9) megatron/core/tensor_parallel/cross_entropy.py, _VocabParallelCrossEntropy.forward:
     all_reduce of logits_max (MAX), predicted_logits and sum_exp_logits (SUM), [s, b] fp32
     each (the logits are cast to fp32 before the loss); its backward communicates nothing.
(10) megatron/core/distributed/finalize_model_grads.py, _allreduce_non_tensor_model_parallel_
     grads: under SP the gradients of parameters marked sequence_parallel (the norms' weights
     and biases, RowParallelLinear's bias) are partial sums over the sequence shards, all-reduced
     over the TP group once per step, coalesced; where the stage shards gradients (ZeRO-2 and
     3) a rank sums its shard's part of them (zero_real's stages do so).
(11) megatron/core/transformer/attention.py, SelfAttention.get_query_key_value_tensors: with
     fewer query groups (key/value heads) than t, linear_qkv's output is split evenly over the
     ranks (1/t of K and V each, parallel/tensor.py) and all_gather_last_dim_from_tensor_
     parallel_region gathers it whole, s x b x (a + 2kv) x head_dim, before each rank picks its
     heads and its one key/value head; its backward reduce-scatters the gradient (mappings.py,
     _AllGatherFromTensorParallelRegion, whose backward is _reduce_scatter_along_last_dim), both
     synchronous.

Recomputation replays collectives of the forward in backward: full recomputation (Megatron's
CheckpointFunction) every one of a layer's; selective (attention core) none; selective_op
(torchtitan's per-op policy, torchtitan/distributed/activation_checkpoint.py: _save_list holds
mm, the attention kernels and reduce_scatter_tensor, every other op is replayed up to the last
tensor backward needs) without SP the all-reduce after the attention output (its output feeds
the MLP's norm, whose backward needs its input; the layer's last all-reduce feeds nothing inside
the layer), with SP none beyond the all-gathers the backward already makes (8): the
reduce-scatters are saved, and a replayed all-gather is the gather of the weight gradient's
input that Megatron makes in backward.

`window`: the one GEMM Megatron's default runs the collective beside (7: the weight gradient
of its linear, launched after the input gradient it reduces; 8: the input gradient, launched
after the re-gather starts), (linear, GEMM) with linear one of WINDOW_LINEARS; the collective
is exposed only where it outlasts that GEMM. The others block the compute stream. With
tp_comm_overlap (userbuffers, PyTorch's async TP) every one runs beside its unit's compute.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zerosim.contract import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
from zerosim.units import BYTES_PER_ELEMENT, FP32_BYTES

WINDOW_LINEARS = ("qkv", "fc1", "head")
DGRAD, WGRAD = "dgrad", "wgrad"
LOSS_ALL_REDUCES = 3
"""cross_entropy.py, _VocabParallelCrossEntropy.forward: max, predicted logit, sum of exp."""


@dataclass(frozen=True)
class TpCollective:
    """One collective among the tensor-parallel group."""

    op: str
    size_bytes: int
    name: str
    window: tuple[str, str] | None = None
    """(linear, DGRAD or WGRAD): the GEMM Megatron runs it beside, async (the module's note)."""
    sync: bool = False
    """A plain synchronous call even under tp_comm_overlap, whose userbuffers and async TP
    overlap the linears' collectives only (11)."""

    @property
    def overlaps(self) -> bool:
        return self.window is not None


@dataclass(frozen=True)
class TensorCollectives:
    """A micro-step's TP collectives per gather unit ([embedding, layers..., head]) and pass,
    those of the optimizer step, and whether all of them overlap compute."""

    forward: list[tuple[TpCollective, ...]] = field(default_factory=list)
    backward: list[tuple[TpCollective, ...]] = field(default_factory=list)
    step: tuple[TpCollective, ...] = ()
    overlap: bool = False
    """tp_comm_overlap: every collective runs beside its unit's compute."""


def _qkv_gather(qkv: int) -> tuple[tuple, tuple]:
    """(11) With fewer key/value heads than t, the rank's QKV output gathered whole in forward
    and its gradient reduce-scattered in backward (none when every rank has its own heads)."""
    if not qkv:
        return (), ()
    return ((TpCollective(ALL_GATHER, qkv, "TP QKV output all-gather (kv < t)", sync=True),),
            (TpCollective(REDUCE_SCATTER, qkv, "TP QKV output-gradient reduce-scatter (kv < t)",
                          sync=True),))


def _layer(e: int, sp: bool, recompute: str, qkv: int = 0) -> tuple[tuple, tuple]:
    """A transformer layer's forward and backward collectives; `qkv`: the bytes of the QKV
    output gathered when kv < t (11), else 0."""
    gather, scatter = _qkv_gather(qkv)
    if not sp:
        attention = TpCollective(ALL_REDUCE, e, "TP attention output all-reduce")
        forward = (*gather, attention, TpCollective(ALL_REDUCE, e, "TP MLP output all-reduce"))
        backward = (TpCollective(ALL_REDUCE, e, "TP fc1 input-gradient all-reduce",
                                 ("fc1", WGRAD)),
                    *scatter,
                    TpCollective(ALL_REDUCE, e, "TP QKV input-gradient all-reduce",
                                 ("qkv", WGRAD)))
        replayed = {"full": forward, "selective_op": (attention,)}.get(recompute, ())
        return forward, replayed + backward
    forward = (TpCollective(ALL_GATHER, e, "TP QKV input all-gather"),
               *gather,
               TpCollective(REDUCE_SCATTER, e, "TP attention output reduce-scatter"),
               TpCollective(ALL_GATHER, e, "TP fc1 input all-gather"),
               TpCollective(REDUCE_SCATTER, e, "TP MLP output reduce-scatter"))
    backward = (TpCollective(ALL_GATHER, e, "TP fc2 output-gradient all-gather"),
                TpCollective(ALL_GATHER, e, "TP fc1 input re-gather", ("fc1", DGRAD)),
                TpCollective(REDUCE_SCATTER, e, "TP fc1 input-gradient reduce-scatter",
                             ("fc1", WGRAD)),
                TpCollective(ALL_GATHER, e, "TP attention output-gradient all-gather"),
                *scatter,
                TpCollective(ALL_GATHER, e, "TP QKV input re-gather", ("qkv", DGRAD)),
                TpCollective(REDUCE_SCATTER, e, "TP QKV input-gradient reduce-scatter",
                             ("qkv", WGRAD)))
    return (forward, (forward if recompute == "full" else ()) + backward)


def window_linears(m) -> dict[str, tuple[int, int]]:
    """Each linear a window names (WINDOW_LINEARS), on a rank holding `m` (its slice): its
    output width and how many such GEMMs it launches, each h wide in: QKV's q + 2kv columns,
    the MLP's first projection (SwiGLU's gate and up: two), the output layer's vocabulary."""
    return {"qkv": (m.q_width + 2 * m.kv_width, 1),
            "fc1": (m.ffn_width, 2 if m.mlp == "swiglu" else 1), "head": (m.vocab, 1)}


def window_flops(m, t) -> dict[tuple[str, str], float]:
    """FLOPs of each GEMM a window names: 2 x tokens x h x the linear's output width (its input
    gradient and its weight gradient alike)."""
    tokens = t.micro_batch * t.seq_len
    return {(name, gemm): 2.0 * tokens * m.hidden * width * count
            for name, (width, count) in window_linears(m).items() for gemm in (DGRAD, WGRAD)}


def replicated_gradient_elements(m) -> int:
    """Parameters every TP rank holds whole whose gradients SP leaves partial (10): each layer's
    norms (weight, and bias under a biased layernorm; its per-head Q/K norms) and its two
    row-parallel biases, and the final norm."""
    norm = m.hidden * (2 if m.norm_biased else 1)
    qk = 2 * m.head_dim * (2 if m.norm_biased else 1) if m.qk_norm else 0
    row_biases = 2 * m.hidden if m.bias else 0
    return m.layers * (m.layer_norms * norm + qk + row_biases) + norm


def tensor_collectives(m, t, p, grad_bytes_per_element: int,
                       grad_ways: int = 1) -> TensorCollectives:
    """The TP collectives of a step of the whole model `m` under [training] `t` and
    [parallelism] `p` (none when tensor_parallel = 1, or for a bare Ψ, which has no shape).
    `grad_ways`: how many ways the stage shards gradients (ZeRO-2 and 3: N / t): a rank sums
    only its shard's part of the replicated gradients (10), as zero_real does."""
    if p.tensor_parallel == 1 or m.is_bare:
        return TensorCollectives()
    sp = p.sequence_parallel
    e = t.seq_len * t.micro_batch * m.hidden * BYTES_PER_ELEMENT[t.compute_dtype]
    loss = tuple(TpCollective(ALL_REDUCE, FP32_BYTES * t.seq_len * t.micro_batch,
                              "TP vocabulary-parallel loss all-reduce")
                 for _ in range(LOSS_ALL_REDUCES))
    if sp:
        embedding = (TpCollective(ALL_REDUCE if m.position == "learned" else REDUCE_SCATTER, e,
                                  "TP embedding reduction"),), (
            TpCollective(ALL_GATHER, e, "TP embedding gradient all-gather"),)
        head = (TpCollective(ALL_GATHER, e, "TP output-layer input all-gather"), *loss), (
            TpCollective(ALL_GATHER, e, "TP output-layer input re-gather", ("head", DGRAD)),
            TpCollective(REDUCE_SCATTER, e, "TP output-layer input-gradient reduce-scatter",
                         ("head", WGRAD)))
        shard = -(-replicated_gradient_elements(m) // grad_ways)
        step = (TpCollective(ALL_REDUCE, grad_bytes_per_element * shard,
                             "TP replicated-gradient all-reduce"),)
    else:
        embedding = (TpCollective(ALL_REDUCE, e, "TP embedding all-reduce"),), ()
        head = loss, (TpCollective(ALL_REDUCE, e, "TP output-layer input-gradient all-reduce",
                                   ("head", WGRAD)),)
        step = ()
    tp = p.tensor_parallel
    heads = m.heads + 2 * m.n_kv_heads  # Q, K and V heads of the whole layer
    qkv = (t.seq_len * t.micro_batch * heads * m.head_dim * BYTES_PER_ELEMENT[t.compute_dtype]
           if m.n_kv_heads < tp else 0)
    forward, backward = _layer(e, sp, t.activation_checkpointing, qkv)
    units = [embedding] + [(forward, backward)] * m.layers + [head]
    return TensorCollectives(forward=[u[0] for u in units], backward=[u[1] for u in units],
                             step=step, overlap=p.tp_comm_overlap)
