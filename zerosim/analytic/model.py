"""Transformer shapes -> exact parameter counts, ZeRO-3 gather units, activation bytes.

Parameters are counted tensor by tensor (embeddings, biases, norms included) so that shaped models
match their reference implementations exactly: GPT-2 small 124,439,808; Llama-2-7B 6,738,415,616.
Activation bytes follow Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models" (arXiv:2205.05198), Eq. 1 and §4.3, generalised beyond their assumptions
(16-bit activations, GeLU MLP of width 4h, one KV head per query head, dropout everywhere).

Every function takes the model as one rank holds it: a ModelConfig, or under tensor parallelism
the rank's slice (parallel/tensor.py), whose `q_width` (the rank's query columns) and
`sequence_shards` (sequence parallelism's split of the tensors kept whole) are the hidden width
and 1 for a whole model. Korthikanti's Table 2 then holds term by term.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from zerosim.contract import BLOCK, EMBEDDING, HEAD
from zerosim.scenario.checks import within_cap
from zerosim.frameworks import framework_of
from zerosim.frameworks.base import TOKEN
from zerosim.scenario.config import ModelConfig, TrainingConfig
from zerosim.scenario.model_table import layer_windows
from zerosim.analytic.window import window_share, window_skipped
from zerosim.units import BYTES_PER_ELEMENT, FP32_BYTES

EAGER_SOFTMAX_SAVED = FP32_BYTES
"""Bytes per score an eager fp32 softmax saves beyond the fused kernel's 16-bit probabilities:
torch.nn.Softmax's fp32 output, kept for its backward (Megatron's forward_torch_softmax,
megatron/model/fused_softmax.py lines 192-205; docs/research/fsdp1_amp_v100.md C.5)."""

MASK_BYTES = 1  # dropout masks are bytes (Korthikanti §4.1)


@dataclass(frozen=True)
class ParamCounts:
    """Parameters of a shaped model, by where they live in the forward order."""

    embedding: int
    """Token embedding v*h, plus position embedding max_seq_len*h when learned."""
    per_layer: int
    layers: int
    final_norm: int
    lm_head: int
    """v*h when untied, 0 when the head reuses the token embedding."""

    @property
    def total(self) -> int:
        return self.embedding + self.layers * self.per_layer + self.final_norm + self.lm_head


def grad_bytes_per_element(t: TrainingConfig, stage: int) -> int:
    """A gradient element: the parameters' dtype, or fp32 where stages 2-3 reduce in fp32."""
    if stage >= 2 and t.reduce_dtype == "fp32":
        return FP32_BYTES
    return BYTES_PER_ELEMENT[t.precision]


def param_counts(m: ModelConfig) -> ParamCounts:
    """Exact parameter counts of a shaped model (not defined for a bare Ψ)."""
    if m.is_bare:
        raise ValueError("a bare-Ψ model has no shape to count")
    h, f, v, q = m.hidden, m.ffn_width, m.vocab, m.q_width
    kv = m.kv_width  # columns of K and of V held (grouped-query attention; 1/t on a TP rank)
    bias = 1 if m.bias else 0
    norm = h * (2 if m.norm_biased else 1)  # weight (+ bias)
    # Q, K, V, output (a row-parallel output keeps its whole bias: added after the reduction),
    # the per-head Q and K norms
    attention = (h * q + 2 * h * kv + q * h + (q + 2 * kv if m.qkv_biased else 0) + bias * h
                 + (2 * m.head_dim * (2 if m.norm_biased else 1) if m.qk_norm else 0))
    if m.mlp == "gelu":
        mlp = 2 * h * f + bias * (f + h)  # up and down projections
    else:
        mlp = 3 * h * f + bias * (2 * f + h)  # gate, up and down projections
    position = m.max_seq_len * h if m.position == "learned" else 0
    counts = ParamCounts(embedding=v * h + position,
                         per_layer=attention + mlp + m.layer_norms * norm,
                         layers=m.layers, final_norm=norm,
                         lm_head=0 if m.tied_embeddings else v * h)
    # Every count below (units, gathers, bytes per element) is at most this one.
    within_cap("the parameter count Ψ", counts.total,
               f"embedding {counts.embedding:.4g} + {counts.layers} layers x "
               f"{counts.per_layer:.4g} + norm {counts.final_norm:.4g} + head {counts.lm_head:.4g}")
    return counts


def total_params(m: ModelConfig) -> int:
    """Ψ: the bare count, or the exact count of the shape."""
    return m.params if m.is_bare else param_counts(m).total


def max_gather_window(m: ModelConfig, units: int) -> int:
    """Most parameter elements in `units` consecutive ZeRO-3 gather units.

    A shaped model gathers [embedding, layer 1..L, final norm + head] in order (a tied head
    gathers the embedding matrix again, unless the window holds the embedding unit too: then it
    is the same gathered tensor); a bare Ψ is L equal units (the remainder spread one
    element each over the first ones). Closed form, so huge layer counts cost nothing.
    """
    if m.is_bare:
        layers = m.n_layers
        quotient, remainder = divmod(m.params, layers)
        k = min(units, layers)
        return k * quotient + min(k, remainder)
    c = param_counts(m)
    first = c.embedding
    last = c.final_norm + (c.lm_head or m.vocab * m.hidden)
    if units >= c.layers + 2:
        return c.total  # every unit at once: a tied matrix is gathered once
    candidates = [first + (units - 1) * c.per_layer, (units - 1) * c.per_layer + last]
    if units <= c.layers:
        candidates.append(units * c.per_layer)
    return max(candidates)


@dataclass(frozen=True)
class Activations:
    """Activation bytes of one micro-batch on one rank (ZeRO does not shard activations)."""

    per_layer_bytes: int
    """What autograd keeps for one layer without checkpointing (Korthikanti Eq. 1)."""
    stored_per_layer_bytes: int
    """What each layer keeps from forward to backward under the checkpointing policy."""
    recompute_bytes: int
    """Regenerated for one layer at a time during backward (0 without checkpointing)."""
    outside_layers_bytes: int
    """Embedding dropout mask, final-norm and head inputs, fp32 logits (Korthikanti §4.3)."""
    layers: int
    embedding_bytes: int
    """The part of outside_layers_bytes the embedding keeps (its dropout mask) until its own
    backward, after every layer's."""
    forward_only_bytes: int = 0
    """Held at forward's end and gone before any layer's backward (autocast's cache of the
    checkpointed layers' weight casts, freed as the autocast region ends)."""

    @property
    def after_forward_bytes(self) -> int:
        """What forward leaves: every layer's stored part and everything outside the layers."""
        return (self.layers * self.stored_per_layer_bytes + self.outside_layers_bytes
                + self.forward_only_bytes)

    @property
    def peak_bytes(self) -> int:
        """The most alive at once: what forward leaves, or, when larger, the first recomputed
        layer's working set beside every layer's stored part and the embedding's mask. The
        head's activations are gone by then: its backward runs first and frees them, so the
        fp32 logits never meet a recomputed layer (Korthikanti et al. 2022, §5: full
        recomputation keeps 2sbh per layer plus one layer's working set; review I5)."""
        during_backward = self.embedding_bytes + self.recompute_bytes if self.recompute_bytes else 0
        return self.layers * self.stored_per_layer_bytes + max(
            self.outside_layers_bytes + self.forward_only_bytes, during_backward)


ZERO_ACTIVATIONS = Activations(per_layer_bytes=0, stored_per_layer_bytes=0, recompute_bytes=0,
                               outside_layers_bytes=0, layers=0, embedding_bytes=0)


def activations(m: ModelConfig, t: TrainingConfig) -> Activations:
    """Korthikanti Eq. 1 term by term; with w = 2, GeLU, f = 4h, dropout and standard attention
    the layer total is exactly s*b*h*(34 + 5*a*s/h). On a tensor-parallel rank (a, f, kv and
    q its slice's; sbh the tensors every rank keeps, over sequence_shards) it is Korthikanti's
    Table 2: sbh(10 + 24/t + 5as/(ht)), or sbh(34/t + 5as/(ht)) with sequence parallelism."""
    if m.is_bare:
        return ZERO_ACTIVATIONS
    w = BYTES_PER_ELEMENT[t.compute_dtype]  # activations are in the compute dtype
    s, b, a, f = t.seq_len, t.micro_batch, m.heads, m.ffn_width
    sbh, sbf, sbq = s * b * m.hidden // m.sequence_shards, s * b * f, s * b * m.q_width
    sbkv = s * b * m.n_kv_heads * m.head_dim
    mask = MASK_BYTES if m.dropout else 0
    # Attention: QKV input, Q and K (for QK^T), V, output-projection input (11sbh with masks).
    attention = w * (sbh + sbq + sbkv + sbkv + sbq) + mask * sbh
    if t.flash_attention:
        scores = FP32_BYTES * a * s * b  # the kernel keeps only the softmax log-sum-exp
    else:
        # Softmax output (2as^2b), and with dropout its mask (as^2b) and output (2as^2b).
        scores = (w + (mask + w if m.dropout else 0)) * a * s * s * b
        if t.softmax_kernel == "eager":  # softmax's own fp32 output, saved for its backward
            scores += EAGER_SOFTMAX_SAVED * a * s * s * b
    if m.mlp == "gelu":
        mlp = w * (sbh + 2 * sbf) + mask * sbh  # up input, GeLU input, down input (19sbh)
    else:
        mlp = w * (sbh + 4 * sbf) + mask * sbh  # gate/up input, gate out, silu out, up out, down input
    norms = 2 * w * sbh  # each of the two norms keeps its input (4sbh)
    per_layer = attention + scores + mlp + norms
    if t.activation_checkpointing == "full":
        stored, recompute = w * sbh, per_layer  # only the layer input (2sbh per layer)
    elif t.activation_checkpointing == "selective":
        stored, recompute = per_layer - scores, scores  # 34sbh kept, the s^2 part recomputed
    elif t.activation_checkpointing == "selective_op":
        stored = selective_op_bytes(m, t, w)
        recompute = max(per_layer - stored, 0)
    else:
        stored, recompute = per_layer, 0
    # §4.3: embedding dropout mask, final-norm input, head input, cross-entropy logits in fp32.
    outside = mask * sbh + 2 * w * sbh + FP32_BYTES * s * b * m.vocab
    layer_casts, head_casts = autocast_weight_bytes(m, t)
    forward_only = 0
    if t.activation_checkpointing == "full":
        recompute += layer_casts  # recast in the layer's recomputation, held through its backward
        if framework_of(t).autocast_caches_weights(t):  # and cached to the forward's end
            forward_only = m.layers * layer_casts
    else:
        stored += layer_casts  # saved for the matmuls' backward
    outside += head_casts
    return Activations(per_layer_bytes=per_layer, stored_per_layer_bytes=stored,
                       recompute_bytes=recompute, outside_layers_bytes=outside, layers=m.layers,
                       embedding_bytes=mask * sbh, forward_only_bytes=forward_only)


def autocast_weight_bytes(m: ModelConfig, t: TrainingConfig) -> tuple[int, int]:
    """(per layer, head): the 16-bit copies torch.autocast makes of the matmul weights, held from
    forward into backward, under training.autocast (0 without). A cast an op saves for its
    backward lives until that backward; autocast's cache also keeps the cast of each leaf
    parameter until the autocast region ends, with the forward (aten/src/ATen/autocast_mode.cpp,
    cached_cast: fp32, requires_grad, a leaf), so checkpointed layers hold theirs to the forward's
    end where the framework's parameters are leaves (Framework.autocast_caches_weights).
    Embedding lookups are not cast (autocast's lists)."""
    if t.autocast == "none" or m.is_bare:
        return 0, 0
    w, h, f = BYTES_PER_ELEMENT[t.autocast], m.hidden, m.ffn_width
    attention = (2 * m.q_width + 2 * m.kv_width) * h
    mlp = (2 if m.mlp == "gelu" else 3) * f * h
    return w * (attention + mlp), w * m.vocab * h


def selective_op_bytes(m: ModelConfig, t: TrainingConfig, w: int) -> int:
    """What torchtitan's per-op selective checkpointing keeps of one layer (its
    _apply_ac_to_transformer_block policy: save the attention kernel's output and every other
    matmul's, counting wq, wk, wv, wo, then the MLP's in call order): the layer input, wq's
    output, wv's, the attention output (with its fp32 log-sum-exp), and the MLP's first matmul
    (w1, or the GeLU MLP's up projection) plus, for SwiGLU, w2's output (its 7th)."""
    s, b, f = t.seq_len, t.micro_batch, m.ffn_width
    sbh, sbq = s * b * m.hidden // m.sequence_shards, s * b * m.q_width
    sbkv = s * b * m.n_kv_heads * m.head_dim
    mlp = s * b * f + (sbh if m.mlp == "swiglu" else 0)
    return w * (sbh + sbq + sbkv + sbq + mlp) + FP32_BYTES * m.heads * s * b


def recomputed_matmul_elements(m: ModelConfig) -> int:
    """Weight elements of the matmuls selective_op recomputes in backward: wk, wo, and w3 (SwiGLU)
    or the GeLU MLP's down projection, the ones whose outputs it does not keep."""
    return m.hidden * m.kv_width + m.q_width * m.hidden + m.hidden * m.ffn_width


def gather_units(m: ModelConfig) -> list[int]:
    """Parameter elements of each ZeRO-3 gather unit in forward order (see max_gather_window):
    [embedding, layer 1..L, final norm + head] for a shape, L near-equal parts of a bare Ψ.
    A tied head re-gathers the embedding matrix, so the units then sum to more than Ψ."""
    if m.is_bare:
        quotient, remainder = divmod(m.params, m.n_layers)
        return [quotient + (1 if i < remainder else 0) for i in range(m.n_layers)]
    c = param_counts(m)
    return [c.embedding] + [c.per_layer] * c.layers + [c.final_norm + (c.lm_head or m.vocab * m.hidden)]


def buffer_elements(m: ModelConfig, buffers: list[list[str]]) -> list[list[int]]:
    """The elements of each flat buffer of each gather unit that Framework.gather_buffers names:
    TOKEN the token matrix (vocab x hidden), REST what else the unit holds (gather_units')."""
    matrix = m.vocab * m.hidden
    out = []
    for names, whole in zip(buffers, gather_units(m)):
        rest = whole - matrix * names.count(TOKEN)
        out.append([matrix if name == TOKEN else rest for name in names])
    return out


def gathered_elements(m: ModelConfig) -> int:
    """Every gather unit's elements together, gather_units' sum in closed form (no list, so a
    bare Psi of any layer count costs nothing): Psi, plus the embedding matrix once more where
    a tied head gathers it again."""
    return total_params(m) + (m.vocab * m.hidden if not m.is_bare and m.tied_embeddings else 0)


def root_elements(m: ModelConfig) -> int:
    """What FSDP1's root unit holds when every block is wrapped: the embedding unit and the
    head unit's own parameters (a tied token table once), one flat parameter."""
    c = param_counts(m)  # closed form: the planner asks of models of 2**36 layers
    return c.embedding + c.final_norm + (0 if m.tied_embeddings else c.lm_head)


def sharded_unit_elements(m: ModelConfig, ways: int) -> int:
    """Each gather unit sharded `ways` ways, one shard's elements summed over the units
    (ceil(unit / ways) each, as gather_units would list them), in closed form."""
    def part(elements: int) -> int:
        return -(-elements // ways)

    if m.is_bare:
        quotient, remainder = divmod(m.params, m.n_layers)
        return remainder * part(quotient + 1) + (m.n_layers - remainder) * part(quotient)
    c = param_counts(m)
    return (part(c.embedding) + c.layers * part(c.per_layer)
            + part(c.final_norm + (c.lm_head or m.vocab * m.hidden)))


def unit_kinds(m: ModelConfig) -> list[str]:
    """The kind of each gather unit of gather_units (contract.UNIT_KINDS): what a calibration
    profile prices it by. A bare Ψ is blocks only."""
    if m.is_bare:
        return [BLOCK] * m.n_layers
    return [EMBEDDING] + [BLOCK] * m.layers + [HEAD]


def gradient_units(m: ModelConfig) -> list[int]:
    """Parameter elements each gather unit owns (a tied head owns none of the shared matrix):
    what its backward adds to the flat gradient buffer of stages 0-2. Sums to Ψ."""
    units = gather_units(m)
    if not m.is_bare and m.tied_embeddings:
        units[-1] -= m.vocab * m.hidden
    return units


def unit_tensor_shapes(m: ModelConfig) -> list[list[tuple[int, int]]]:
    """Each gather unit's parameter tensors as (rows, columns), in module order, torchtitan's
    Llama layout (separate Q, K, V; nn.Linear weights are (out, in)): what FSDP2 shards
    tensor by tensor along rows. A tied head owns no tensor. Not for a bare Psi."""
    h, f, v, kv = m.hidden, m.ffn_width, m.vocab, m.kv_width
    norms = 2 if m.norm_biased else 1
    norm = [(h, 1)] * norms

    def linear(out: int, inp: int, bias: bool = m.bias) -> list[tuple[int, int]]:
        return [(out, inp)] + ([(out, 1)] if bias else [])

    q = m.q_width
    attention = (linear(q, h, m.qkv_biased) + linear(kv, h, m.qkv_biased)
                 + linear(kv, h, m.qkv_biased) + linear(h, q)
                 + ([(m.head_dim, 1)] * 2 * norms if m.qk_norm else []))
    mlp = (linear(f, h) + linear(h, f) if m.mlp == "gelu"
           else linear(f, h) + linear(h, f) + linear(f, h))
    embedding = [(v, h)] + ([(m.max_seq_len, h)] if m.position == "learned" else [])
    head = norm + ([] if m.tied_embeddings else [(v, h)])
    return [embedding] + [in_layer(m, norm, attention, mlp)] * m.layers + [head]


def in_layer(m, norm: list, attention: list, mlp: list) -> list:
    """A layer's pieces in module order, by its norms a layer (model.layer_norms): one before
    attention and MLP running in parallel (1), one before each (2), one after each too (4)."""
    return {1: norm + attention + mlp, 2: norm + attention + norm + mlp,
            4: norm + attention + norm + norm + mlp + norm}[m.layer_norms]


def module_parts(m: ModelConfig) -> tuple[list[list[int]], list[list[int]], list[list[int]]]:
    """(the embedding unit's, one block's, the head unit's) modules in forward order, each the
    elements of its own parameters (nn.Module.parameters(recurse=False): weight, then bias):
    what a framework that gathers module by module fetches at once (DeepSpeed's ZeRO-3). The
    embedding: the token table, then learned positions; a block: its norm, Q, K and V (one
    module where model.qkv_is_fused), the output projection, its norm, the MLP's matrices; the
    head: the final norm and the head, which under tied embeddings gathers the token table
    again (gather_units' count). Not for a bare Psi."""
    h, f, v = m.hidden, m.ffn_width, m.vocab

    def linear(out: int, inp: int, bias: bool = m.bias) -> list[int]:
        return [out * inp] + [out] * (1 if bias else 0)

    norms = 2 if m.norm_biased else 1
    norm = [h] * norms
    q, kv, qb = m.q_width, m.kv_width, m.qkv_biased
    qkv = ([linear(q + 2 * kv, h, qb)] if m.qkv_is_fused
           else [linear(q, h, qb), linear(kv, h, qb), linear(kv, h, qb)])
    qk_norms = [[m.head_dim] * norms] * 2 if m.qk_norm else []
    mlp = ([linear(f, h), linear(h, f)] if m.mlp == "gelu"
           else [linear(f, h), linear(f, h), linear(h, f)])
    embedding = [[v * h]] + ([[m.max_seq_len * h]] if m.position == "learned" else [])
    attention = [*qkv, linear(h, q), *qk_norms]
    return embedding, in_layer(m, [norm], attention, mlp), [norm, [v * h]]


def unit_modules(m: ModelConfig) -> list[list[list[int]]]:
    """Each gather unit's modules (module_parts), the block repeated per layer."""
    embedding, block, head = module_parts(m)
    return [embedding] + [block] * m.layers + [head]


def unit_activation_bytes(m: ModelConfig, t: TrainingConfig) -> list[int]:
    """What each gather unit keeps from forward to backward: the embedding dropout mask, each
    layer's stored part, the final-norm and head inputs and fp32 logits. Sums to what forward
    leaves (Activations.after_forward_bytes)."""
    acts = activations(m, t)
    if m.is_bare:
        return [0] * m.n_layers
    mask = acts.embedding_bytes
    return [mask] + [acts.stored_per_layer_bytes] * m.layers + [
        acts.outside_layers_bytes - mask + acts.forward_only_bytes]  # the head's backward is first


@dataclass(frozen=True)
class UnitFlops:
    """Floating-point operations of one gather unit for one micro-batch on one rank."""

    forward: float
    backward: float
    """Gradient computation, plus the forward recomputed under activation checkpointing."""


def unit_flops(m: ModelConfig, t: TrainingConfig, model: bool = False) -> list[UnitFlops]:
    """Per gather unit. Matrix multiplies cost 2 FLOPs per multiply-add (Kaplan et al. 2020, §2.1:
    forward 2N per token, backward twice that); attention adds QK^T and AV, 2 * 2 * b * s^2 * h
    (the whole square whatever the causal mask: Narayanan et al. 2021's s/6h term, PaLM's
    12·L·H·Q·T), times a sliding-window layer's share of the causal pairs (window_share) where
    its kernel skips the rest (window_skipped), or always for the `model`'s own FLOPs.
    A bare Ψ has no shape: 2Ψ per token forward, split evenly over its units."""
    if t.seq_len is None:
        raise ValueError("FLOPs need training.seq_len")
    tokens = t.micro_batch * t.seq_len
    if m.is_bare:
        return [UnitFlops(forward=2.0 * n * tokens, backward=4.0 * n * tokens) for n in gather_units(m)]
    h, f, v, q = m.hidden, m.ffn_width, m.vocab, m.q_width
    matmul = 2 * h * q + 2 * h * m.kv_width + (2 if m.mlp == "gelu" else 3) * h * f
    square = 2.0 * 2 * t.micro_batch * t.seq_len ** 2 * q
    windows = layer_windows(m) if model or window_skipped(t) else (None,) * m.layers

    def layer(window: int | None) -> UnitFlops:
        scores = square if window is None else square * window_share(t.seq_len, window)
        forward = 2.0 * matmul * tokens + scores
        recompute = {"full": forward, "selective": scores, "none": 0.0,
                     "selective_op": 2.0 * recomputed_matmul_elements(m) * tokens,
                     }[t.activation_checkpointing]
        return UnitFlops(forward=forward, backward=2 * forward + recompute)

    made = {window: layer(window) for window in set(windows)}
    head_forward = 2.0 * v * h * tokens
    return ([UnitFlops(forward=0.0, backward=0.0)] + [made[w] for w in windows]
            + [UnitFlops(forward=head_forward, backward=2 * head_forward)])


def model_flops_per_token(m: ModelConfig, t: TrainingConfig) -> float:
    """The model's FLOPs per trained token, forward and backward, without recomputation: the
    numerator of model FLOPs utilisation (Chowdhery et al. 2022, PaLM, appendix B), whatever the
    activation checkpointing (which adds work the model does not need). Whatever the kernel too:
    attention is counted over the whole square for every kernel (PaLM's convention, the causal
    half FlashAttention skips included), and a sliding-window layer's over its window's share
    of it, the model's own attention; the masked square standard attention computes beside it
    is, like recomputation, work the model does not need."""
    plain = replace(t, activation_checkpointing="none")
    flops = unit_flops(m, plain, model=True)
    return sum(u.forward + u.backward for u in flops) / (t.micro_batch * t.seq_len)
