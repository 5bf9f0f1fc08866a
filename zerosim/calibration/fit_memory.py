"""Memory mechanisms: the bytes a real step holds beyond the analytic model, each from a mechanism
measured once on the box (zero_real/calibration/memory_bench.py) or derived exactly from the code
that holds them, never fitted to the real stages' own runs (no torch).

fit.memory[processes][mechanism] = {"fixed_bytes": F, "per": {count: bytes per count}, "how":
"measured" | "derived", "source": where the bytes come from, and for a measured one its "points"
([counts, bytes]) and "residuals_pct"}. sim/costs.memory_terms prices each at a scenario's counts
(costs.MEMORY_MECHANISMS: which step term each joins; costs.mechanism_counts: what it counts). Every coefficient is a
byte count of something held, so none is negative: a fit that wants one below zero drops that term
and refits the rest (non-negative least squares), and a mechanism measured as holding nothing fits
to zeros.

Measured (rows of measurements["memory_mechanisms"]):
- loss_backward: fp32 cross-entropy's backward over the logits (nll_loss's and log_softmax's
  gradients), per logit;
- norm_saved: what autograd saves of a norm beyond its input, per token and token x hidden;
- attention_saved: what autograd saves of the attention core beyond the qkv output, per qkv
  element, score and row (costs adds only its excess over what the analytic model counts);
- optimizer_grad: the fp32 gradient the optimizer makes of a 16-bit one, per element of the shard;
- optimizer_step: the step's temporaries, per element of the one optimizer stepping at a time.
Derived (DERIVED, from zero_real's code, at the scenario's dtype where they are activations).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

MEASURED = ("loss_backward", "norm_saved", "attention_saved", "optimizer_grad", "optimizer_step")
_SOURCES = {
    "loss_backward": "memory_bench.loss_backward_bytes: F.cross_entropy(logits.float()) backward",
    "norm_saved": "memory_bench.norm_saved_bytes: saved-tensor hooks on the scenario's norm",
    "attention_saved": "memory_bench.attention_saved_bytes: saved-tensor hooks on the attention "
                       "core through the scenario's kernel",
    "optimizer_grad": "memory_bench.optimizer_grad_bytes: ShardAdam.unscaled_grad on a shard",
    "optimizer_step": "memory_bench.optimizer_step_bytes: ShardAdam.step on a shard",
}

# What zero_real's step holds by construction, counted from its code (bytes per count).
DERIVED: dict[str, dict[str, Any]] = {
    "saved_ids": {"fixed_bytes": 16.0, "per": {"token": 16.0, "position": 8.0},
                  "source": "int64 token ids (saved by the embedding) and targets (by nll_loss), "
                            "zero_real/parts/model.py random_batch; learned positions' "
                            "torch.arange (Embedding.forward); the loss, its clone and "
                            "backward's seed (stages/replicated.py DDP.step), 4 bytes each"},
    "math_attention_batch1": {"fixed_bytes": 0.0, "per": {"layer_token_qk_bytes": 1.0},
                              "source": "math SDPA at micro-batch 1: V's (1, heads, s, d) view of "
                                        "the fused qkv output reshapes for bmm without a copy, so "
                                        "autograd keeps the whole qkv output, Q's and K's parts "
                                        "beside their own copies (parts/model.py "
                                        "Block.attention; aten _scaled_dot_product_attention_math)"},
    "bucket_pool": {"fixed_bytes": 0.0, "per": {"pool_bytes": 1.0},
                    "source": "stages/replicated.py ZeRO2._bucket and reduce_bucket: each reduced "
                              "bucket's buffer goes back to a pool kept for the next bucket and "
                              "the next step, up to STAGE2_LIVE_BUCKETS filling at once (a "
                              "linear's weight and bias reach the hooks out of address order)"},
    "last_unit_kept": {"fixed_bytes": 0.0, "per": {"unit_bytes": 1.0},
                       "source": "stages/zero3.py _leave keeps what the next visits need: after "
                                 "the last unit's forward comes its own backward, so it stays "
                                 "gathered (the head and, tied, the token matrix again)"},
    "tied_grad_kept": {"fixed_bytes": 0.0, "per": {"matrix_bytes": 1.0},
                       "source": "stages/zero3.py after_backward: the tied matrix's whole "
                                 "gradient waits in its full buffer from the head's backward to "
                                 "the embedding's, which adds its part and reduce-scatters it"},
    "head_kept": {"fixed_bytes": 8.0, "per": {"token_hidden_bytes": 2.0, "token": 16.0},
                  "source": "stages/replicated.py DDP.step keeps the head's input and its "
                            "gradient, the loss and the micro-batch's ids and targets until the "
                            "step's end"},
}


def nonnegative_fit(counts: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Least squares of values on the columns of counts (the first a column of ones for the fixed
    bytes), every coefficient >= 0: the most negative is dropped and the rest refitted until none
    is (Lawson and Hanson's active set, enough for a handful of columns)."""
    active = list(range(counts.shape[1]))
    out = np.zeros(counts.shape[1])
    while active:
        solution = np.linalg.lstsq(counts[:, active], values, rcond=None)[0]
        if np.all(solution >= 0):
            out[active] = solution
            return out
        active.pop(int(np.argmin(solution)))
    return out


def _fit_mechanism(rows: list[dict[str, Any]]) -> dict[str, Any]:
    names = sorted({name for r in rows for name in r["counts"]})
    counts = np.array([[1.0] + [float(r["counts"].get(n, 0)) for n in names] for r in rows])
    values = np.array([max(0.0, float(r["bytes"])) for r in rows])  # a byte count is never < 0
    coef = nonnegative_fit(counts, values)
    fitted = counts @ coef
    coef = np.round(coef, 6)  # bytes per unit: rounding noise of the solve is not a byte
    return {"fixed_bytes": float(coef[0]),
            "per": {n: float(c) for n, c in zip(names, coef[1:])},
            "points": [[r["counts"], int(r["bytes"])] for r in rows],
            "residuals_pct": [round(float((f - v) / v * 100), 3) if v > 0 else 0.0
                              for f, v in zip(fitted, values)]}


def fit_memory(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """fit.memory: per processes count, each measured mechanism fitted from its rows, and the
    derived ones as DERIVED states them."""
    groups: dict[tuple[int, str], list] = defaultdict(list)
    for r in rows:
        if r["mechanism"] in MEASURED:
            groups[int(r["processes"]), r["mechanism"]].append(r)
    memory: dict[str, Any] = {}
    for (n, name), group in sorted(groups.items()):
        entry = {**_fit_mechanism(group), "how": "measured", "source": _SOURCES[name],
                 "dtype": group[0]["dtype"]}
        for key in ("norm", "kernel"):  # what the rows ran: priced only for the same
            if key in group[0]:
                entry[key] = group[0][key]
        memory.setdefault(str(n), {})[name] = entry
    for by_name in memory.values():
        for name, entry in DERIVED.items():
            by_name[name] = {**entry, "per": dict(entry["per"]), "how": "derived"}
    return memory


__all__ = ["DERIVED", "MEASURED", "fit_memory", "nonnegative_fit"]
