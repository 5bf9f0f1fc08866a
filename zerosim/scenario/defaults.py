"""Notes on the defaults that decide an answer: a scenario that leaves one of these keys out
gets a line saying which value was taken, why it matters, and which key to set. The commands
print them on stderr, and --json carries them (report.memory_json's "notes", each simulated
stage's "default_notes"); nothing is changed by them.

- training.seq_len from model.max_seq_len (a Hugging Face config's max_position_embeddings:
  Mistral-7B's 32768 makes 2.4 TB of activations per GPU; its sliding window of 4096 caps the
  attention's work under FlashAttention-2, not the memory);
- training.flash_attention off on a GPU whose record has flash kernels (the s x s scores are
  stored and timed);
- training.framework = "zero": the ZeRO paper's accounting, without any framework's own buffers
  (the fp32 loss, DeepSpeed's fp32 gradient partition, FSDP2's fp32 shards);
- a framework named without its bucket size where its own differs (DeepSpeed: 5e8 elements).
"""

from __future__ import annotations

from typing import Any

from zerosim.frameworks import REGISTRY


LAYOUT = ("mlp", "norm", "position")
"""What makes a model family for a calibration profile: its per-op constants transfer across
them; its whole-unit overheads and memory mechanisms were measured on one."""


def default_notes(tables: dict[str, dict[str, Any]], model, training, cluster,
                  profile=None) -> list[str]:
    """The notes for a scenario built from `tables` (the keys as given) into these configs, and
    the calibration profile it names."""
    given = tables.get("training", {})
    if model.is_bare:
        return []
    notes = _profile_notes(profile, model)
    if "seq_len" not in given and training.seq_len is not None:
        model_table = tables.get("model", {})
        source = ("the config's position limit (max_position_embeddings, n_positions)"
                  if "hf_config" in model_table and "max_seq_len" not in model_table
                  else "model.max_seq_len")
        notes.append(f"training.seq_len = {training.seq_len} comes from {source}: activations "
                     f"and attention grow with it{_window_caps(model, training.seq_len)}; set "
                     f"training.seq_len to the sequences you train on")
    device = cluster.device
    has_flash = (device is not None and device.op_model is not None
                 and bool(device.op_model.flash_causal_by_seq))
    if "flash_attention" not in given and not training.flash_attention and has_flash:
        notes.append(f"training.flash_attention = false (the default): the s x s attention "
                     f"scores are stored and timed as {cluster.gpu} computes them without a "
                     f"flash kernel; set training.flash_attention = true if the run uses "
                     f"FlashAttention or SDPA's fused kernels")
    if "framework" not in given and cluster.generation is not None:  # a CPU box runs zero_real
        notes.append("training.framework = 'zero' (the default) counts the ZeRO paper's model "
                     "states, activations and buffers, without what a framework's code holds "
                     "beside them (the fp32 loss, DeepSpeed's fp32 gradient partition, FSDP2's "
                     "fp32 shards, DDP's bucket copies); set training.framework to the one you "
                     "run (deepspeed, fsdp2, fsdp1, ddp)")
    elif "reduce_bucket_MiB" not in given:  # the tables show every stage
        own = REGISTRY[training.framework].bucket_elements
        if own is not None:
            notes.append(f"training.reduce_bucket_MiB = {training.reduce_bucket_MiB:g} "
                         f"(zerosim's default) where {training.framework}'s reduce bucket "
                         f"defaults to {own:,} elements ({own * 2 / 2**20:g} MiB in 16 bits): "
                         f"set it, or read your ds_config with --deepspeed")
    return notes


def _window_caps(model, seq_len: int) -> str:
    """What a sliding window shorter than the sequence changes of the note: it caps the
    attention's work (under FlashAttention-2), not the activations."""
    if not model.windowed_layers or model.sliding_window >= seq_len:
        return ""
    return (f" (the sliding window of {model.sliding_window} tokens caps the attention of "
            f"{model.windowed_layers} of {model.layers} layers, under FlashAttention-2, not "
            f"their memory)")


def _profile_notes(profile, model) -> list[str]:
    measured = (profile.data.get("scenario", {}) or {}).get("model", {}) if profile else {}
    theirs = [measured.get(key) for key in LAYOUT]
    ours = [getattr(model, key) for key in LAYOUT]
    if not measured or theirs == ours or None in theirs:
        return []
    return [f"cluster.profile = {profile.path} was measured on a {'/'.join(map(str, theirs))} "
            f"model and this one is {'/'.join(ours)}: its per-op constants transfer, its "
            f"whole-unit overheads and memory mechanisms were measured on the other layout "
            f"(calibrate on this model to be sure)"]

