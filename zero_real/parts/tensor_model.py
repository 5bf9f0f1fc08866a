"""A tensor-parallel rank's GPT: Megatron-LM's layout of zero_real.parts.model's decoder, each
rank holding exactly the slice zerosim.parallel.tensor.tp_slice counts.

    embedding.tok, head.lm_head   vocabulary-parallel: rows [r V', (r+1) V'), V' = ceil(v/t), the
                                  vocabulary padded with zero rows to t V' (VocabParallelEmbedding)
    qkv, gate, up                 column-parallel: W/t output rows of each, W the full width
                                  (ColumnParallelLinear); QKV in Megatron's grouped order, each
                                  key/value group's query heads then its key and value
    proj, down                    row-parallel: 1/t of the input columns, bias whole and added
                                  after the reduction (RowParallelLinear, skip_bias_add)
    norms, embedding.pos          replicated

Names and the unit structure are GPT's (embedding, blocks, head), so the stages shard a rank's
slice over its data-parallel group exactly as they shard a whole model. A parameter's initial
value is its slice of the single-process model's (`initial`), so one process is the reference.

Activations are [s, b, h] (Megatron's order; under sequence parallelism a rank's unit inputs and
outputs are [s/t, b, h]). With fewer key/value heads than ranks, kv < t, the QKV weight is still
split t ways and the rank all-gathers the QKV output along its last dimension, then attends with
its group's whole key/value head and its a/t query heads (megatron/core/transformer/
attention.py, SelfAttention.get_query_key_value_tensors).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import sdpa_kernel

from zero_real.parts.model import (ATTENTION_KERNELS, GPT, _embedding, _norm, _rope, build_model,
                                   init_tensor)
from zero_real.parts.tensor import TensorGroup, vocab_parallel_cross_entropy
from zerosim.scenario.config import ModelConfig

COLUMN = ("qkv", "gate", "up")
ROW = ("proj", "down")
VOCAB = ("tok", "lm_head")


NORMS = ("norm1", "norm2", "norm")


def partial_under_sp(name: str) -> bool:
    """A parameter every rank holds whole whose gradient sequence parallelism leaves partial
    (each rank's from its sequence shard): the norms' weights and biases and the row-parallel
    linears' biases, which Megatron marks `sequence_parallel` (megatron/core/fusions/
    fused_layer_norm.py, FusedLayerNorm; megatron/core/tensor_parallel/layers.py,
    RowParallelLinear). The learned positions are added before SP's split, to the whole
    sequence: their gradient is whole."""
    module, leaf = name.split(".")[-2:]
    return module in NORMS or (module in ROW and leaf == "bias")


class Embedding(nn.Module):
    def __init__(self, m: ModelConfig, tp: TensorGroup, rows: int):
        super().__init__()
        self.tp, self.rows, self.lo = tp, rows, tp.rank * rows
        self.tok = _embedding(rows, m.hidden)
        self.pos = _embedding(m.max_seq_len, m.hidden) if m.position == "learned" else None

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        ids = idx.t()  # [s, b]
        outside = (ids < self.lo) | (ids >= self.lo + self.rows)
        local = torch.where(outside, torch.zeros_like(ids), ids - self.lo)
        x = F.embedding(local, self.tok.weight).masked_fill(outside.unsqueeze(-1), 0.0)
        if self.pos is None:
            # The rows' partial sums: reduced, or reduce-scattered straight to the sequence shard
            return (self.tp.reduce_scatter(x, "embedding") if self.tp.sequence_parallel
                    else self.tp.reduce(x, "embedding"))
        # Learned positions are added to the whole sequence, then SP keeps its shard (Megatron's
        # LanguageModelEmbedding: reduce_scatter_embeddings only without position embeddings).
        x = self.tp.reduce(x, "embedding")
        x = x + self.pos(torch.arange(ids.shape[0], device=ids.device)).unsqueeze(1)
        return self.tp.split(x, "embedding") if self.tp.sequence_parallel else x


class Block(nn.Module):
    """Pre-norm attention + MLP, each a column-parallel ... row-parallel pair."""

    def __init__(self, m: ModelConfig, tp: TensorGroup, flash: bool):
        super().__init__()
        t, d = tp.size, m.head_dim
        self.tp, self.head_dim, self.heads = tp, d, m.heads // t
        self.per_group = m.heads // m.n_kv_heads  # query heads per key/value head
        self.kv_heads, self.kv_gathered = m.n_kv_heads, m.n_kv_heads < t
        self.groups = 1 if self.kv_gathered else m.n_kv_heads // t
        self.rope = m.position == "rope"
        self.attention_kernels = ATTENTION_KERNELS[flash]
        width = (m.heads + 2 * m.n_kv_heads) * d
        self.norm1, self.norm2 = _norm(m), _norm(m)
        self.qkv = nn.Linear(m.hidden, width // t, bias=m.bias)
        self.proj = nn.Linear(self.heads * d, m.hidden, bias=m.bias)
        self.swiglu = m.mlp == "swiglu"
        if self.swiglu:
            self.gate = nn.Linear(m.hidden, m.ffn_width // t, bias=m.bias)
        self.up = nn.Linear(m.hidden, m.ffn_width // t, bias=m.bias)
        self.down = nn.Linear(m.ffn_width // t, m.hidden, bias=m.bias)

    def qkv_heads(self, mixed: torch.Tensor):
        """q [s, b, a/t, d], k and v [s, b, kv heads attended with, d] from the QKV output."""
        s, b, d, t = mixed.shape[0], mixed.shape[1], self.head_dim, self.tp.size
        if self.kv_gathered:
            mixed = self.tp.gather(mixed, -1, "qkv (kv < t)")
            group, place = divmod(self.tp.rank, t // self.kv_heads)  # t / kv ranks per group
            size = (self.per_group + 2) * d
            mixed = mixed[..., group * size:(group + 1) * size]
        mixed = mixed.reshape(s, b, self.groups, self.per_group + 2, d)
        q, k, v = mixed.split([self.per_group, 1, 1], dim=3)
        q = q.reshape(s, b, self.groups * self.per_group, d)
        if self.kv_gathered:  # this rank's a/t of its group's query heads
            q = q[:, :, place * self.heads:(place + 1) * self.heads]
        return q, k.reshape(s, b, self.groups, d), v.reshape(s, b, self.groups, d)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        mixed, = self.tp.column(x, [(self.qkv.weight, self.qkv.bias)], "attention")
        q, k, v = (y.permute(1, 2, 0, 3) for y in self.qkv_heads(mixed))  # [b, n, s, d]
        if self.rope:
            q, k = _rope(q), _rope(k)
        with sdpa_kernel(self.attention_kernels):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                 enable_gqa=k.shape[1] != q.shape[1])
        out = out.permute(2, 0, 1, 3).flatten(2)  # [s, b, a/t x d]
        return self._row(self.proj, out, "attention")

    def _row(self, linear: nn.Linear, x: torch.Tensor, name: str) -> torch.Tensor:
        y = self.tp.exit(F.linear(x, linear.weight), name)
        return y if linear.bias is None else y + linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        fc1 = ([self.gate] if self.swiglu else []) + [self.up]  # Megatron's one linear_fc1
        y = self.tp.column(self.norm2(x), [(f.weight, f.bias) for f in fc1], "mlp")
        y = F.silu(y[0]) * y[1] if self.swiglu else F.gelu(y[0])
        return x + self._row(self.down, y, "mlp")


class Head(nn.Module):
    """Final norm, the vocabulary-parallel output layer and loss; a tied head borrows the
    rank's rows of the token embedding."""

    def __init__(self, m: ModelConfig, tp: TensorGroup, rows: int):
        super().__init__()
        self.tp, self.lo = tp, tp.rank * rows
        self.real = max(0, min(rows, m.vocab - self.lo))  # rows that are vocabulary entries
        self.norm = _norm(m)
        self.lm_head = None if m.tied_embeddings else nn.Linear(m.hidden, rows, bias=False)

    def forward(self, x: torch.Tensor, tok_weight: torch.Tensor, targets: torch.Tensor):
        weight = tok_weight if self.lm_head is None else self.lm_head.weight
        logits, = self.tp.column(self.norm(x), [(weight, None)], "head")
        logits = logits.float()  # the loss in fp32, as zero_real.parts.model.Head
        return vocab_parallel_cross_entropy(logits, targets.t(), self.lo, self.real,
                                            self.tp.comm).mean()


class TensorParallelGPT(GPT):
    """Units in forward order, as GPT's: [embedding, block 1..L, head], each a rank's slice;
    GPT's forward runs them."""

    def __init__(self, m: ModelConfig, tp: TensorGroup, flash: bool = False):
        nn.Module.__init__(self)
        self.config, self.tp, self.tensor_comm = m, tp, tp.comm
        rows = -(-m.vocab // tp.size)
        self.embedding = Embedding(m, tp, rows)
        self.blocks = nn.ModuleList(Block(m, tp, flash) for _ in range(m.layers))
        self.head = Head(m, tp, rows)
        # The single-process model's shapes, from which each slice is cut.
        self.full_shapes = {n: p.shape for n, p in build_model(m).named_parameters()}

    def sum_partial_grads(self, regions: list[tuple], device: torch.device, ledger) -> None:
        """Before the optimizer step: the gradients of the parameters SP leaves partial
        (`partial_under_sp`), where a stage keeps them (`regions`: (flat layout, gradient
        storage, the layout's element at its start), the stage's grad_regions), summed over the
        TP group in one all-reduce (TensorGroup.sum_partial_grads)."""
        pieces = []
        for layout, grad, start in regions:
            for slot in layout.slots:
                a = max(slot.offset, start)
                b = min(slot.offset + slot.numel, start + grad.numel())
                if a < b and partial_under_sp(slot.name):
                    pieces.append(grad[a - start:b - start])
        self.tp.sum_partial_grads(pieces, device, ledger)

    def initial(self, name: str, shape: torch.Size, seed: int, dtype: torch.dtype,
                device: str | torch.device = "cpu") -> torch.Tensor:
        """This rank's slice of parameter `name` as the single-process model initialises it."""
        full = init_tensor(name, self.full_shapes[name], seed, dtype, device)
        part = local_part(name, full, self.config, self.tp.rank, self.tp.size)
        assert part.shape == shape, (name, part.shape, shape)
        return part


def local_part(name: str, full: torch.Tensor, m: ModelConfig, rank: int, t: int) -> torch.Tensor:
    """Rank `rank`'s slice of the whole parameter `full` (Megatron's layout, module docstring)."""
    module, leaf = name.split(".")[-2:]
    if module in VOCAB:
        rows = -(-m.vocab // t)
        padded = torch.zeros((rows * t, *full.shape[1:]), dtype=full.dtype, device=full.device)
        padded[:full.shape[0]] = full
        return padded[rank * rows:(rank + 1) * rows].clone()
    if module == "qkv":
        full = grouped_qkv(full, m)
    if module in COLUMN:
        size = full.shape[0] // t
        return full[rank * size:(rank + 1) * size].clone()
    if module in ROW and leaf == "weight":
        size = full.shape[1] // t
        return full[:, rank * size:(rank + 1) * size].clone()
    return full.clone()


def grouped_qkv(full: torch.Tensor, m: ModelConfig) -> torch.Tensor:
    """The fused QKV's rows ([all Q | all K | all V], zero_real.parts.model.Block) in Megatron's
    order: for each key/value group, its query heads, its key, its value."""
    d, kv = m.head_dim, m.n_kv_heads
    q, k, v = full.split([m.heads * d, kv * d, kv * d], dim=0)
    per = m.heads // kv * d
    return torch.cat([torch.cat([q[g * per:(g + 1) * per], k[g * d:(g + 1) * d],
                                 v[g * d:(g + 1) * d]]) for g in range(kv)])


def build_tensor_parallel_model(m: ModelConfig, comm, sequence_parallel: bool, *,
                                flash: bool = False) -> TensorParallelGPT:
    """The rank's slice on the meta device (as build_model: a stage materialises what it owns);
    `comm`: the tensor-parallel group's Collectives."""
    build_model(m)  # its refusals (a bare Ψ, RoPE with an odd head dimension)
    with torch.device("meta"):
        return TensorParallelGPT(m, TensorGroup(comm, sequence_parallel), flash)
