"""The model shape from a Hugging Face config.json: the Llama, Mistral, Phi-3, Gemma (1-3),
Qwen2/2.5, Qwen3, Falcon, GPT-2 and GPT-NeoX families (tests/fixtures/hf holds a real
config.json of each, read to its exact parameter count); a mixture of experts is refused.

Returns [model] keys; load.py lets explicit scenario keys override them. Architecture features that
change the parameter count and that ModelConfig cannot express are refused, never ignored. A
sliding window is read with the layers that use it, as each family's modeling code picks them
(Mistral and Phi-3 all, Gemma-2 every other, Gemma-3 five in six, Qwen2/3 from
max_window_layers on when use_sliding_window; a config's layer_types wins); logit soft-capping
is priced as plain attention. A model id in the local cache: hf_cache.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from zerosim.scenario.checks import is_finite_number
from zerosim.errors import InputError
from zerosim.files import read_json_object, refuse_special


class _Config:
    """config.json values with errors that name the file and the key."""

    def __init__(self, data: dict[str, Any], path: Path):
        self.data, self.path = data, path

    def need(self, key: str) -> Any:
        if key not in self.data or self.data[key] is None:
            raise InputError(f"hf_config {self.path}: missing key {key!r}")
        return self.data[key]

    def number(self, key: str, default: float) -> float:
        value = self.data.get(key, default)
        if value is None:
            return default
        if not is_finite_number(value):
            raise InputError(f"hf_config {self.path}: {key} must be a finite number, got {value!r}")
        return value

    def refuse(self, key: str, default: Any, why: str) -> None:
        if self.data.get(key, default) != default:
            raise InputError(
                f"hf_config {self.path}: {key} = {self.data[key]!r} is not modeled ({why})")


def _llama(c: _Config, activation: str = "silu") -> dict[str, Any]:
    """Llama's layout: RMSNorm, rotary positions, a gated MLP of three matrices (SwiGLU; Gemma's
    GeGLU has the same matrices, `activation` names its function), no biases."""
    c.refuse("attention_bias", False, "biases on attention projections")
    c.refuse("mlp_bias", False, "biases on MLP projections")
    act = c.data.get("hidden_activation") or c.data.get("hidden_act", activation)
    if act not in ("silu", "swish") and not str(act).startswith("gelu"):
        raise InputError(f"hf_config {c.path}: hidden_act = {act!r} is not modeled (a gated MLP "
                         f"of silu or gelu)")
    if activation == "silu" and act not in ("silu", "swish"):
        c.refuse("hidden_act", "silu", "the SwiGLU MLP uses silu")
    hidden, heads = c.need("hidden_size"), c.need("num_attention_heads")
    keys = dict(hidden=hidden, layers=c.need("num_hidden_layers"), heads=heads,
                ffn=c.need("intermediate_size"), vocab=c.need("vocab_size"),
                mlp="swiglu", norm="rmsnorm", bias=False, position="rope",
                tied_embeddings=c.data.get("tie_word_embeddings", False),
                dropout=c.number("attention_dropout", 0.0) > 0)
    if c.data.get("num_key_value_heads") is not None:
        keys["kv_heads"] = c.data["num_key_value_heads"]
    if c.data.get("max_position_embeddings") is not None:
        keys["max_seq_len"] = c.data["max_position_embeddings"]
    head_dim = c.data.get("head_dim")
    if head_dim is not None and not (type(head_dim) is int and type(hidden) is int
                                     and type(heads) is int and head_dim * heads == hidden):
        keys["head_size"] = head_dim  # ModelConfig checks it
    return keys


def _gpt2(c: _Config) -> dict[str, Any]:
    keys = dict(hidden=c.need("n_embd"), layers=c.need("n_layer"), heads=c.need("n_head"),
                vocab=c.need("vocab_size"), max_seq_len=c.need("n_positions"),
                mlp="gelu", norm="layernorm", bias=True, position="learned",
                tied_embeddings=c.data.get("tie_word_embeddings", True),
                dropout=any(c.number(k, 0.1) > 0 for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop")))
    if c.data.get("n_inner") is not None:  # None means 4 * n_embd, ModelConfig's default
        keys["ffn"] = c.data["n_inner"]
    return keys


def _gpt_neox(c: _Config) -> dict[str, Any]:
    c.refuse("attention_bias", True, "GPT-NeoX's MLP keeps its biases; mixed biases")
    return dict(hidden=c.need("hidden_size"), layers=c.need("num_hidden_layers"),
                heads=c.need("num_attention_heads"), ffn=c.need("intermediate_size"),
                vocab=c.need("vocab_size"), max_seq_len=c.need("max_position_embeddings"),
                mlp="gelu", norm="layernorm", bias=True, position="rope",
                tied_embeddings=c.data.get("tie_word_embeddings", False),
                dropout=any(c.number(k, 0.0) > 0 for k in ("attention_dropout", "hidden_dropout")))


_LISTED_LAYERS = 2**20
"""The most layers whose windows are listed one by one (a few hundred in any published model):
past it a config is refused here rather than listed for seconds."""


def _windowed(c: _Config, keys: dict[str, Any],
              local: Callable[[int], bool] | None) -> dict[str, Any]:
    """keys with the config's sliding window, on the layers its `layer_types` names
    "sliding_attention" (transformers' configs since it wrote them), else on those `local`
    picks as the family's modeling code does (None: every layer); none where sliding_window
    is null."""
    window, layers = c.data.get("sliding_window"), keys["layers"]
    types = c.data.get("layer_types")
    if window is None or type(layers) is not int:
        return keys  # no window; a bad layer count is ModelConfig's to refuse
    if types is None and local is None:
        keys["sliding_window"] = window
        return keys
    if layers > _LISTED_LAYERS:
        raise InputError(f"hf_config {c.path}: num_hidden_layers = {layers} with a sliding "
                         f"window on some of them is past the {_LISTED_LAYERS} layers zerosim "
                         f"lists")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers or not set(types) <= {
                "sliding_attention", "full_attention"}:
            raise InputError(f"hf_config {c.path}: layer_types must list 'sliding_attention' "
                             f"or 'full_attention' for each of the {layers} layers")
        chosen = [i for i, kind in enumerate(types) if kind == "sliding_attention"]
    else:
        chosen = [i for i in range(layers) if local(i)]
    if not chosen:
        return keys
    keys["sliding_window"] = window
    if len(chosen) < layers:
        keys["sliding_window_layers"] = chosen  # a list, as TOML gives it
    return keys


def _mistral(c: _Config) -> dict[str, Any]:
    """Mistral: Llama's layout, every layer attending over sliding_window tokens when it is
    set (MistralAttention passes the config's sliding_window on every layer; Mistral-7B-v0.1's
    4096, null from v0.2)."""
    return _windowed(c, _llama(c), None)


def _phi3(c: _Config) -> dict[str, Any]:
    """Phi-3: Llama's layout with Q, K and V in one Linear (qkv_proj) and the gate and up in
    one (gate_up_proj): the same parameters; every layer attends over sliding_window tokens
    (Phi3Attention passes it on every layer; Phi-3-mini-4k's 2047 is read as today's
    transformers reads it, 2047 keys, where releases before its masking_utils gave
    flash-attn window_size = (w, w), w + 1)."""
    return _windowed(c, {**_llama(c), "fused_qkv": True}, None)


def _gemma(c: _Config) -> dict[str, Any]:
    """Gemma: Llama's layout with a GeGLU MLP, heads of head_dim columns whatever the width, and
    the head tied to the embedding by default."""
    keys = _llama(c, activation="gelu")
    keys["tied_embeddings"] = c.data.get("tie_word_embeddings", True)
    return keys


def _gemma2(c: _Config) -> dict[str, Any]:
    """Gemma-2: Gemma's with a norm after attention and after the MLP too (four a layer); its
    logit soft-capping changes no parameter (and is priced as plain attention). Layers 0, 2,
    4, ... attend over sliding_window tokens (Gemma2Attention: sliding_window unless
    layer_idx % 2; Gemma2Config's layer_types: sliding where (i + 1) % 2)."""
    return _windowed(c, {**_gemma(c), "layer_norms": 4}, lambda i: i % 2 == 0)


def _gemma3(c: _Config) -> dict[str, Any]:
    """Gemma-3: Gemma-2's, with per-head norms on Q and K, and five local layers to a global
    one: layer i attends over sliding_window tokens unless (i + 1) % sliding_window_pattern
    == 0 (Gemma3TextConfig's layer_types; the pattern 6 by default; Gemma-3-1B: 512 tokens,
    layers 5, 11, 17 and 23 global)."""
    keys = {**_gemma(c), "layer_norms": 4, "qk_norm": True}
    pattern = c.data.get("sliding_window_pattern", c.data.get("_sliding_window_pattern", 6))
    if type(pattern) is not int or pattern < 1:
        raise InputError(f"hf_config {c.path}: sliding_window_pattern must be a whole number "
                         f"of layers, got {pattern!r}")
    return _windowed(c, keys, lambda i: (i + 1) % pattern != 0)


def _qwen_window(c: _Config, keys: dict[str, Any]) -> dict[str, Any]:
    """Qwen2's and Qwen3's window: none unless use_sliding_window, then on the layers from
    max_window_layers on (Qwen2Config: sliding_window = None unless use_sliding_window;
    layer_types sliding where i >= max_window_layers)."""
    if not c.data.get("use_sliding_window", False):
        return keys
    first = c.data.get("max_window_layers", 28)  # Qwen2Config's default
    if type(first) is not int:
        raise InputError(f"hf_config {c.path}: max_window_layers must be a whole number, got "
                         f"{first!r}")
    return _windowed(c, keys, lambda i: i >= first)


def _qwen2(c: _Config) -> dict[str, Any]:
    """Qwen2 and 2.5: Llama's layout with biases on Q, K and V alone (Qwen2Attention: q_proj,
    k_proj and v_proj with bias=True, o_proj without; the config does not say it)."""
    return _qwen_window(c, {**_llama(c), "qkv_bias": True})


def _qwen3(c: _Config) -> dict[str, Any]:
    """Qwen3: Llama's layout with per-head RMSNorms on Q and K, heads of head_dim columns."""
    return _qwen_window(c, {**_llama(c), "qk_norm": True})


def _falcon(c: _Config) -> dict[str, Any]:
    """Falcon (7B's layout): attention and MLP in parallel off one LayerNorm (two with
    new_decoder_architecture), multi-query attention, a GELU MLP of 4 x hidden, rotary
    positions, no biases on projections but LayerNorms with theirs, the head tied by default."""
    c.refuse("alibi", False, "ALiBi positions")
    new = c.data.get("new_decoder_architecture", False)
    parallel = new or c.data.get("parallel_attn", True)
    heads = c.need("num_attention_heads")
    kv = c.data.get("num_kv_heads") if new else (1 if c.data.get("multi_query", True) else heads)
    bias = bool(c.data.get("bias", False))
    norms = (c.data.get("num_ln_in_parallel_attn") or 2) if new else (1 if parallel else 2)
    return dict(hidden=c.need("hidden_size"), layers=c.need("num_hidden_layers"), heads=heads,
                kv_heads=kv, ffn=c.data.get("ffn_hidden_size") or 4 * c.need("hidden_size"),
                vocab=c.need("vocab_size"), mlp="gelu", norm="layernorm", bias=bias,
                norm_bias=True, position="rope", layer_norms=norms,
                tied_embeddings=c.data.get("tie_word_embeddings", True),
                dropout=any(c.number(k, 0.0) > 0 for k in ("attention_dropout", "hidden_dropout")))


_READERS: dict[str, Callable[[_Config], dict[str, Any]]] = {
    "llama": _llama, "mistral": _mistral, "phi3": _phi3, "gemma": _gemma, "gemma2": _gemma2,
    "gemma3_text": _gemma3, "qwen2": _qwen2, "qwen3": _qwen3, "falcon": _falcon, "gpt2": _gpt2,
    "gpt_neox": _gpt_neox}

_NOT_YET = {
    "gemma3": "Gemma-3's multimodal config nests its text model (give its text_config as a "
              "config.json of model_type gemma3_text)",
    "olmo": "a LayerNorm without parameters (OLMo)",
    "olmo2": "a norm on the whole Q and K projections and norms after attention and MLP (OLMo-2)",
}
"""Dense families whose config reads but whose layout ModelConfig cannot say yet: refused,
naming what is missing."""
_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
"""Keys by which a config declares a mixture of experts (Mixtral, Qwen-MoE, DeepSeek, ...)."""


def read_hf_config(path: str | Path, name: str | None = None) -> dict[str, Any]:
    """[model] keys (shape, MLP/norm/position kind, tying) from a config.json or its folder;
    `name` the model's where the file names none (a cached snapshot's folder is a hash)."""
    path = Path(path)
    refuse_special(path, "cannot read hf_config")  # is_dir raised on a name past the limit (T2)
    if path.is_dir():
        path = path / "config.json"
    c = _Config(read_json_object(path, "hf_config"), path)
    model_type = c.data.get("model_type")
    experts = next((key for key in _EXPERTS if c.data.get(key)), None)
    if experts is not None:
        raise InputError(f"hf_config {path}: a mixture of experts ({experts} = "
                         f"{c.data[experts]!r}, model_type {model_type!r}) is not modeled: "
                         f"zerosim models dense decoders (experts, routing and expert "
                         f"parallelism are missing)")
    if isinstance(model_type, str) and model_type in _NOT_YET:
        raise InputError(f"hf_config {path}: model_type {model_type!r} is not modeled yet: "
                         f"{_NOT_YET[model_type]}")
    if not isinstance(model_type, str) or model_type not in _READERS:
        raise InputError(f"hf_config {path}: model_type {model_type!r} is not supported "
                         f"(supported: {', '.join(_READERS)})")
    keys = _READERS[model_type](c)
    keys["name"] = str(c.data.get("_name_or_path") or name or path.parent.name or model_type)
    return keys
