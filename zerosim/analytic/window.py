"""Sliding-window attention: the query-key pairs a window keeps of a causal sequence, and
whether the attention kernel skips the rest (so that the window saves work) or masks them.

A layer of window w (Hugging Face's sliding_window, model.sliding_window) lets query i attend
keys i - w < j <= i: min(i + 1, w) of them. Its attention's FLOPs are full causal attention's
times window_share; the memory never changes: a flash kernel keeps no scores either way, and
standard attention (Hugging Face's eager path) computes and stores the whole s x s scores with
the window as a mask. Which layers have a window: model_table.layer_windows.
"""

from __future__ import annotations

from zerosim.scenario.config import TrainingConfig


def window_pairs(seq_len: int, window: int | None) -> int:
    """Query-key pairs of one causal sequence whose queries each see at most `window` keys,
    themselves included: sum over i < s of min(i + 1, w), which is s(s + 1)/2 for w >= s (or
    no window) and w·s - w(w - 1)/2 below (Hugging Face's mask, masking_utils.
    sliding_window_overlay: key j for query i where i - w < j <= i; its FlashAttention-2 path
    passes window_size = (w - 1, w - 1), the same w keys)."""
    s = seq_len
    if window is None or window >= s:
        return s * (s + 1) // 2
    return window * s - window * (window - 1) // 2


def window_share(seq_len: int, window: int | None) -> float:
    """A sliding-window layer's attention over causal full attention's: its pairs over
    s(s + 1)/2, the factor its score and AV FLOPs take (1 where the window covers s)."""
    return window_pairs(seq_len, window) / (seq_len * (seq_len + 1) // 2)


def window_skipped(t: TrainingConfig) -> bool:
    """Whether the attention kernel skips the blocks outside a sliding window, so that the
    window saves work: FlashAttention-2 (flash-attn >= 2.3's window_size, which Hugging Face's
    flash_attention_2 passes). Not standard attention, which computes the whole s x s scores
    and masks them (Hugging Face's eager path adds the mask to them), nor FlashAttention-1 or
    Triton's kernel, which take no window."""
    return t.flash_attention and t.flash_kernel == "fa2"
