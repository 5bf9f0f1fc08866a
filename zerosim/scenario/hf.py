"""The model shape from a Hugging Face config.json (the Llama, Mistral, Phi-3, Gemma, GPT-2 and
GPT-NeoX families; tests/fixtures/hf holds a real config.json of each).

Returns [model] keys; load.py lets explicit scenario keys override them. Architecture features that
change the parameter count and that ModelConfig cannot express are refused, never ignored.
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
    head_dim = c.data.get("head_dim")
    if head_dim is not None and not (all(type(v) is int for v in (head_dim, hidden, heads))
                                     and head_dim * heads == hidden):
        raise InputError(f"hf_config {c.path}: head_dim = {head_dim!r} other than hidden_size / "
                         f"num_attention_heads = {hidden!r} / {heads!r} is not modeled")
    keys = dict(hidden=hidden, layers=c.need("num_hidden_layers"), heads=heads,
                ffn=c.need("intermediate_size"), vocab=c.need("vocab_size"),
                mlp="swiglu", norm="rmsnorm", bias=False, position="rope",
                tied_embeddings=c.data.get("tie_word_embeddings", False),
                dropout=c.number("attention_dropout", 0.0) > 0)
    if c.data.get("num_key_value_heads") is not None:
        keys["kv_heads"] = c.data["num_key_value_heads"]
    if c.data.get("max_position_embeddings") is not None:
        keys["max_seq_len"] = c.data["max_position_embeddings"]
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


def _phi3(c: _Config) -> dict[str, Any]:
    """Phi-3: Llama's layout with Q, K and V in one Linear (qkv_proj) and the gate and up in
    one (gate_up_proj): the same parameters."""
    return {**_llama(c), "fused_qkv": True}


def _gemma(c: _Config) -> dict[str, Any]:
    """Gemma: Llama's layout with a GeGLU MLP and the head tied to the embedding by default."""
    keys = _llama(c, activation="gelu")
    keys["tied_embeddings"] = c.data.get("tie_word_embeddings", True)
    return keys


_READERS: dict[str, Callable[[_Config], dict[str, Any]]] = {
    "llama": _llama, "mistral": _llama, "phi3": _phi3, "gemma": _gemma, "gpt2": _gpt2,
    "gpt_neox": _gpt_neox}

_NOT_YET = {
    "qwen2": "biases on Q, K and V alone (Qwen2's attention)",
    "qwen3": "per-head RMSNorms on Q and K (Qwen3's attention)",
    "gemma2": "four norms a layer and alternating sliding-window layers (Gemma-2)",
    "gemma3_text": "four norms a layer, per-head Q/K norms and sliding-window layers (Gemma-3)",
    "gemma3": "four norms a layer, per-head Q/K norms and sliding-window layers (Gemma-3)",
    "falcon": "attention and MLP in parallel under one LayerNorm (Falcon)",
    "olmo": "a LayerNorm without parameters (OLMo)",
    "olmo2": "per-layer Q/K norms and norms after attention and MLP (OLMo-2)",
}
"""Dense families whose config reads but whose layout ModelConfig cannot say yet: refused,
naming what is missing."""
_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
"""Keys by which a config declares a mixture of experts (Mixtral, Qwen-MoE, DeepSeek, ...)."""


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """[model] keys (shape, MLP/norm/position kind, tying) from a config.json or its folder."""
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
    keys["name"] = str(c.data.get("_name_or_path") or path.parent.name or model_type)
    return keys
