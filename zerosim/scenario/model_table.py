"""[model]: a decoder-only transformer by shape, or a bare parameter count (the ZeRO paper's Ψ).
Checked on construction; an impossible value raises InputError with the arithmetic that rules it
out. (config.py re-exports it with the other tables.)"""

from __future__ import annotations

from dataclasses import dataclass, replace

from zerosim.errors import InputError
from zerosim.scenario.checks import one_of as _one_of, positive as _positive

MLPS = ("gelu", "swiglu")
NORMS = ("layernorm", "rmsnorm")
POSITIONS = ("learned", "rope")
# Shape keys of a transformer given by shape; a bare-Ψ model may set only `layers` among them.
SHAPE_KEYS = ("hidden", "heads", "kv_heads", "ffn", "vocab", "max_seq_len")
# The sliding window's keys: a shape's too (a bare Ψ has no attention), cleared with it.
WINDOW_KEYS = ("sliding_window", "sliding_window_layers")
LAYER_NORMS = (1, 2, 4)


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """[model]: a decoder-only transformer by shape, or a bare parameter count (the ZeRO paper's Ψ)."""

    name: str = ""
    """Free text shown in reports."""
    params: int | None = None
    """Bare parameter count Ψ (e.g. 7.5e9). Excludes the shape keys; activations are then 0."""
    layers: int | None = None
    """Transformer blocks. With a bare Ψ, optional: Ψ is split evenly into this many ZeRO-3 gather
    units (default 1: the whole model is gathered at once)."""
    hidden: int | None = None
    """Model width h."""
    heads: int | None = None
    """Attention heads a; must divide hidden unless head_size is given."""
    kv_heads: int | None = None
    """Key/value heads for grouped-query attention; must divide heads. Default: heads."""
    ffn: int | None = None
    """MLP inner width. Default 4 * hidden for gelu; required for swiglu."""
    vocab: int | None = None
    """Vocabulary size v."""
    max_seq_len: int | None = None
    """Rows of the learned position embedding (tokens); required when position = "learned"."""
    mlp: str = "gelu"
    """"gelu" (two matrices, GPT-2/GPT-3) or "swiglu" (three matrices, Llama)."""
    norm: str = "layernorm"
    """"layernorm" (weight + bias) or "rmsnorm" (weight only)."""
    bias: bool = True
    """Linear layers and layer norms carry biases (GPT-2/GPT-NeoX: true; Llama: false)."""
    tied_embeddings: bool = True
    """The LM head reuses the token embedding matrix (GPT-2: true; Llama: false)."""
    position: str = "learned"
    """"learned" position embeddings (parameters) or "rope" (none)."""
    dropout: bool = True
    """Dropout layers present: their 1-byte masks count as activations (Korthikanti et al. 2022)."""
    fused_qkv: bool | None = None
    """The attention's query, key and value projections are one Linear module (GPT-2, Megatron,
    GPT-NeoX, BLOOM) rather than three (Llama, OPT). Read only where a framework gathers module
    by module (DeepSpeed's ZeRO-3: a module is what one fetch gathers). Default: true for
    mlp = "gelu", false for "swiglu"."""
    head_size: int | None = None
    """Columns of each attention head where they are not hidden / heads (Hugging Face's
    head_dim: Gemma's 256 beside a width of 3072 and 16 heads). Default: hidden / heads, which
    heads must then divide."""
    qkv_bias: bool | None = None
    """Q, K and V carry biases (Qwen2: true beside bias = false, its other projections without).
    Default: bias."""
    norm_bias: bool | None = None
    """A LayerNorm carries a bias (Falcon: true beside bias = false). Default: bias."""
    qk_norm: bool = False
    """A norm over each head's queries and keys (Qwen3, Gemma-3, OLMo-2): two of head_size
    elements a layer."""
    layer_norms: int = 2
    """Norms a layer: 2 (one before attention, one before the MLP), 1 (attention and MLP in
    parallel off one norm: Falcon, GPT-J) or 4 (also one after each: Gemma-2 and 3). Their
    parameters are counted; their time and saved inputs are the two-norm layer's."""
    sliding_window: int | None = None
    """Tokens a query of a sliding-window layer attends, itself included (Hugging Face's
    sliding_window: query i sees keys i - w < j <= i; Mistral-7B 4096). Unset: every layer
    attends to its whole causal prefix. What it changes (analytic/model.window_pairs): the
    attention's FLOPs, and its time where the kernel skips the blocks outside the window
    (FlashAttention-2's window_size: flash_attention with flash_kernel = "fa2"); never the
    memory (flash keeps no scores; standard attention stores the whole masked s x s)."""
    sliding_window_layers: tuple[int, ...] | None = None
    """Layers (0-based) that use sliding_window, the others attending to their whole causal
    prefix (Gemma-2: [0, 2, 4, ...]). Unset: every layer. [] prices no layer windowed."""
    hf_config: str | None = None
    """Hugging Face config.json (or its folder) the shape was read from, relative to the
    scenario; or, where no such path is there, a model id ("org/name", "org/name@revision")
    read offline from the local Hugging Face cache (scenario/hf_cache.py)."""

    def __post_init__(self) -> None:
        for key in ("params", "layers", "head_size", *SHAPE_KEYS):
            value = getattr(self, key)
            if value is not None:
                _positive(f"model.{key}", value)
        _one_of("model.mlp", self.mlp, MLPS)
        _one_of("model.norm", self.norm, NORMS)
        _one_of("model.position", self.position, POSITIONS)
        _one_of("model.layer_norms", self.layer_norms, LAYER_NORMS)
        if self.params is not None:
            given = [k for k in (*SHAPE_KEYS, "head_size", *WINDOW_KEYS)
                     if getattr(self, k) is not None]
            if given:
                raise InputError(
                    f"model.params (a bare parameter count) excludes the shape keys, but "
                    f"{', '.join('model.' + k for k in given)} {'is' if len(given) == 1 else 'are'} "
                    f"also set: give either params (and optionally layers) or a full shape")
            return
        missing = [k for k in ("layers", "hidden", "heads", "vocab") if getattr(self, k) is None]
        if self.mlp == "swiglu" and self.ffn is None:
            missing.append("ffn")
        if self.position == "learned" and self.max_seq_len is None:
            missing.append("max_seq_len")
        if missing:
            raise InputError(
                f"[model] needs either params = Ψ or a shape; missing "
                f"{', '.join('model.' + k for k in missing)}")
        if self.head_size is None and self.hidden % self.heads:
            raise InputError(
                f"model.heads = {self.heads} does not divide model.hidden = {self.hidden} "
                f"({self.hidden} / {self.heads} = {self.hidden / self.heads:.4g})")
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise InputError(
                f"model.kv_heads = {self.kv_heads} does not divide model.heads = {self.heads} "
                f"({self.heads} / {self.kv_heads} = {self.heads / self.kv_heads:.4g})")
        self._check_window()

    def _check_window(self) -> None:
        if self.sliding_window is not None:
            _positive("model.sliding_window", self.sliding_window)
        layers = self.sliding_window_layers
        if layers is None:
            return
        if self.sliding_window is None:
            raise InputError("model.sliding_window_layers names the layers that use a sliding "
                             "window, but model.sliding_window (its tokens) is not set")
        wrong = [i for i in layers if not 0 <= i < self.layers]
        if wrong:
            raise InputError(f"model.sliding_window_layers: layer {wrong[0]} is not one of the "
                             f"model's layers 0 to {self.layers - 1} (model.layers = "
                             f"{self.layers})")
        if len(set(layers)) != len(layers):
            twice = next(i for i in layers if layers.count(i) > 1)
            raise InputError(f"model.sliding_window_layers names layer {twice} twice")

    def resized(self, layers: int) -> "ModelConfig":
        """The model with `layers` layers (the planner's deeper or shallower variants): layer i
        uses the window where layer i mod model.layers does, the layout repeating."""
        windowed = self.sliding_window_layers
        if windowed is not None:
            mine = set(windowed)
            windowed = tuple(i for i in range(layers) if i % self.layers in mine)
        return replace(self, layers=layers, sliding_window_layers=windowed)

    @property
    def windowed_layers(self) -> int:
        """How many layers attend over sliding_window (counted without listing them)."""
        if self.sliding_window is None:
            return 0
        chosen = self.sliding_window_layers
        return self.n_layers if chosen is None else len(chosen)

    @property
    def layer_windows(self) -> tuple[int | None, ...]:
        """Each layer's sliding window in tokens, or None where it attends to its whole
        causal prefix."""
        return layer_windows(self)

    @property
    def is_bare(self) -> bool:
        return self.params is not None

    @property
    def n_layers(self) -> int:
        return self.layers if self.layers is not None else 1

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def ffn_width(self) -> int:
        return self.ffn if self.ffn is not None else 4 * self.hidden

    @property
    def head_dim(self) -> int:
        return self.head_size if self.head_size is not None else self.hidden // self.heads

    @property
    def qkv_biased(self) -> bool:
        """Q, K and V carry biases (qkv_bias, else bias)."""
        return self.bias if self.qkv_bias is None else self.qkv_bias

    @property
    def norm_biased(self) -> bool:
        """Its norms carry biases: a LayerNorm with norm_bias (else bias); never an RMSNorm."""
        return self.norm == "layernorm" and (self.bias if self.norm_bias is None
                                             else self.norm_bias)

    @property
    def qkv_is_fused(self) -> bool:
        """fused_qkv, or its default: one QKV module for a GELU GPT, three for SwiGLU."""
        return self.mlp == "gelu" if self.fused_qkv is None else self.fused_qkv

    @property
    def q_width(self) -> int:
        """Columns of Q (heads x head_dim: hidden unless head_size says otherwise); a
        tensor-parallel rank's slice has fewer (parallel/tensor.py)."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Columns of K's (and V's) weight: kv_heads x head_dim; a tensor-parallel rank holds
        1/t of them (parallel/tensor.py)."""
        return self.n_kv_heads * self.head_dim

    sequence_shards = 1
    """Ways the tensors every tensor-parallel rank keeps whole are split (parallel/tensor.py)."""


def layer_windows(m) -> tuple[int | None, ...]:
    """Per layer of `m` (a ModelConfig or a tensor-parallel rank's slice, which carries the same
    two keys), its sliding window in tokens, or None for attention over the whole prefix."""
    w, chosen = m.sliding_window, m.sliding_window_layers
    if w is None:
        return (None,) * m.n_layers
    if chosen is None:
        return (w,) * m.n_layers
    local = set(chosen)
    return tuple(w if i in local else None for i in range(m.n_layers))
