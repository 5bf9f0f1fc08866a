"""The model shape from a Hugging Face config.json (Llama/Mistral, GPT-2, GPT-NeoX families).

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


def _llama(c: _Config) -> dict[str, Any]:
    c.refuse("attention_bias", False, "biases on attention projections")
    c.refuse("mlp_bias", False, "biases on MLP projections")
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


_READERS: dict[str, Callable[[_Config], dict[str, Any]]] = {
    "llama": _llama, "mistral": _llama, "gpt2": _gpt2, "gpt_neox": _gpt_neox}


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """[model] keys (shape, MLP/norm/position kind, tying) from a config.json or its folder."""
    path = Path(path)
    refuse_special(path, "cannot read hf_config")  # is_dir raised on a name past the limit (T2)
    if path.is_dir():
        path = path / "config.json"
    c = _Config(read_json_object(path, "hf_config"), path)
    model_type = c.data.get("model_type")
    if not isinstance(model_type, str) or model_type not in _READERS:
        raise InputError(f"hf_config {path}: model_type {model_type!r} is not supported "
                         f"(supported: {', '.join(_READERS)})")
    keys = _READERS[model_type](c)
    keys["name"] = str(c.data.get("_name_or_path") or path.parent.name or model_type)
    return keys
