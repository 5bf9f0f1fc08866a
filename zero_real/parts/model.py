"""A GPT-style decoder in torch, built from zerosim's ModelConfig, cut into ZeRO-3 gather units.

Shapes follow zerosim.analytic.model.param_counts tensor by tensor, so `numel` equals zerosim's Ψ exactly.
The model is built on the meta device: nothing is allocated until a stage decides what a rank
owns; `init_tensor` then materialises any parameter from (seed, name) alone, identically on every
rank and in the single-process reference, whatever the sharding.

No dropout: runs must be bit-comparable with one process, so the activation ledger is measured
(zero_real.parts.measure) rather than taken from Korthikanti's formula, which counts dropout masks.
"""

from __future__ import annotations

import zlib

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from zerosim.scenario.config import ModelConfig

INIT_STD = 0.02  # GPT-2's initializer_range

# training.flash_attention: a fused kernel that keeps no s x s matrix (FlashAttention-2,
# memory-efficient or cuDNN on CUDA, the flash kernel for CPU), or the plain math of
# softmax(QK^T)V whose softmax output autograd keeps, as zerosim.analytic.model.activations counts it.
# Without the choice made here SDPA picks a fused kernel whenever one applies, and a scenario
# saying `flash_attention = false` would be measured with flash's memory.
ATTENTION_KERNELS = {
    True: [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION],
    False: [SDPBackend.MATH],
}


def _norm(m: ModelConfig) -> nn.Module:
    if m.norm == "rmsnorm":
        return nn.RMSNorm(m.hidden, eps=1e-5)
    return nn.LayerNorm(m.hidden, eps=1e-5, bias=m.bias)


def _rope(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding (Su et al. 2021) on (batch, heads, seq, head_dim); no parameters."""
    seq, dim = x.shape[-2], x.shape[-1]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim))
    angles = torch.outer(torch.arange(seq, device=x.device, dtype=torch.float32), inv_freq)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def _embedding(rows: int, hidden: int) -> nn.Embedding:
    # An explicit (meta) weight skips nn.Embedding's normal_ init: init_tensor gives the values,
    # and normal_ on meta costs seconds the first time (it loads the meta decompositions).
    return nn.Embedding(rows, hidden, _weight=torch.empty(rows, hidden))


class Embedding(nn.Module):
    def __init__(self, m: ModelConfig):
        super().__init__()
        self.tok = _embedding(m.vocab, m.hidden)
        self.pos = _embedding(m.max_seq_len, m.hidden) if m.position == "learned" else None

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx)
        if self.pos is not None:
            x = x + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return x


class Block(nn.Module):
    """Pre-norm attention + MLP; Q, K, V fused in one matrix (same count as three)."""

    def __init__(self, m: ModelConfig, flash: bool):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = m.heads, m.n_kv_heads, m.head_dim
        self.rope = m.position == "rope"
        self.attention_kernels = ATTENTION_KERNELS[flash]
        kv = m.n_kv_heads * m.head_dim
        self.norm1, self.norm2 = _norm(m), _norm(m)
        self.qkv = nn.Linear(m.hidden, m.hidden + 2 * kv, bias=m.bias)
        self.proj = nn.Linear(m.hidden, m.hidden, bias=m.bias)
        self.swiglu = m.mlp == "swiglu"
        if self.swiglu:
            self.gate = nn.Linear(m.hidden, m.ffn_width, bias=m.bias)
        self.up = nn.Linear(m.hidden, m.ffn_width, bias=m.bias)
        self.down = nn.Linear(m.ffn_width, m.hidden, bias=m.bias)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        kv = self.kv_heads * self.head_dim
        q, k, v = self.qkv(x).split([h, kv, kv], dim=-1)
        q = q.view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.rope:
            q, k = _rope(q), _rope(k)
        with sdpa_kernel(self.attention_kernels):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                 enable_gqa=self.kv_heads != self.heads)
        return self.proj(out.transpose(1, 2).reshape(b, s, h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        y = self.norm2(x)
        y = F.silu(self.gate(y)) * self.up(y) if self.swiglu else F.gelu(self.up(y))
        return x + self.down(y)


class Head(nn.Module):
    """Final norm and LM head; a tied head borrows the token embedding (passed in by the caller,
    because under ZeRO-3 the caller decides where that matrix is gathered)."""

    def __init__(self, m: ModelConfig):
        super().__init__()
        self.norm = _norm(m)
        self.lm_head = None if m.tied_embeddings else nn.Linear(m.hidden, m.vocab, bias=False)

    def forward(self, x: torch.Tensor, tok_weight: torch.Tensor, targets: torch.Tensor):
        weight = tok_weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(self.norm(x), weight)
        # Loss in fp32 whatever the compute dtype (mixed precision keeps the softmax exact).
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


class GPT(nn.Module):
    """Units in forward order: [embedding, block 1..L, head] (zerosim.analytic.model's gather units)."""

    tensor_comm = None
    """The tensor-parallel group's Collectives: none, the whole model is here
    (zero_real.parts.tensor_model holds a rank's slice)."""

    def __init__(self, m: ModelConfig, flash: bool = False):
        super().__init__()
        self.config = m
        self.embedding = Embedding(m)
        self.blocks = nn.ModuleList(Block(m, flash) for _ in range(m.layers))
        self.head = Head(m)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.embedding(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(x, self.embedding.tok.weight, targets)

    def initial(self, name: str, shape: torch.Size, seed: int, dtype: torch.dtype,
                device: str | torch.device = "cpu") -> torch.Tensor:
        """Parameter `name`'s initial value (init_tensor); a tensor-parallel rank's model gives
        its slice of the same."""
        return init_tensor(name, shape, seed, dtype, device)


def build_model(m: ModelConfig, device: str | torch.device = "meta", *,
                flash: bool = False) -> GPT:
    """The model's skeleton; on "meta" nothing is allocated. `flash`: the scenario's
    training.flash_attention (ATTENTION_KERNELS)."""
    if m.is_bare:
        raise ValueError("zero_real needs a model shape (hidden, heads, ...), not a bare parameter count")
    if m.position == "rope" and m.head_dim % 2:
        # RoPE rotates pairs of channels: an odd head dimension would lose its last channel.
        raise ValueError(f"rope needs an even head dimension; hidden {m.hidden} / heads {m.heads} "
                         f"= {m.head_dim}")
    with torch.device(device):
        return GPT(m, flash)


def init_tensor(name: str, shape: torch.Size, seed: int, dtype: torch.dtype,
                device: str | torch.device = "cpu") -> torch.Tensor:
    """GPT-2 initialisation of one parameter from (seed, name) alone: N(0, 0.02) matrices,
    residual projections scaled by 1/sqrt(2L) left out for simplicity, zero biases, unit norms."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "bias":
        return torch.zeros(shape, dtype=dtype, device=device)
    if len(shape) == 1:  # norm weights
        return torch.ones(shape, dtype=dtype, device=device)
    generator = torch.Generator(device=device)
    generator.manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    out = torch.empty(shape, dtype=torch.float32, device=device)
    out.normal_(0.0, INIT_STD, generator=generator)
    return out.to(dtype)


def materialize(model: GPT, seed: int, dtype: torch.dtype = torch.float32,
                device: str | torch.device = "cpu") -> GPT:
    """A whole model on `device` with init_tensor's values (for the single-process reference)."""
    model = model.to_empty(device=device).to(dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(init_tensor(name, p.shape, seed, dtype, device))
    return model


def random_batch(vocab: int, rows: range, seq_len: int, seed: int, step: int):
    """Token ids and next-token targets for the given rows of a step's global batch. Each row has
    its own generator, so a rank makes only its rows and the reference (all rows) sees the same."""
    tokens = torch.empty(len(rows), seq_len + 1, dtype=torch.long)
    for i, row in enumerate(rows):
        generator = torch.Generator().manual_seed((seed * 7919 + step) * 1_000_003 + row)
        tokens[i] = torch.randint(0, vocab, (seq_len + 1,), generator=generator)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def micro_batches(vocab: int, training, rank: int, world_size: int, seed: int, step: int,
                  device: str | torch.device = "cpu"):
    """Rank `rank`'s micro-batches of optimizer step `step`, one per micro-step
    (training.gradient_accumulation of them), each made when it is asked for. The step's global
    batch is rows [0, A x N x b): micro-step m of rank r takes the b rows from (m x N + r) x b, so
    the ranks' micro-batches cover it once, and without accumulation rank r has rows
    [r x b, (r + 1) x b) as always."""
    b = training.micro_batch
    for micro in range(training.gradient_accumulation):
        first = (micro * world_size + rank) * b
        idx, targets = random_batch(vocab, range(first, first + b), training.seq_len, seed, step)
        yield idx.to(device), targets.to(device)


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())

