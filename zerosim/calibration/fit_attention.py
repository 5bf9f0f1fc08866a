"""The attention core's constants in a box's record, from `zero-real calibrate`'s attention rows
(no torch): a flash kernel's per-call overhead and its rate by sequence length; the math kernel's
overhead, seconds per score element and one rate (sim/op_costs.measured_attention prices both).

Rates count the causal FLOPs (4 b s^2 (heads head_dim) / 2 forward, FLASH_BACKWARD_FLOPS times
that backward) whatever the kernel computes; every fit keeps its residuals.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zerosim.calibration.lines import fit_line
from zerosim.contract import PASSES
from zerosim.errors import InputError
from zerosim.sim.op_costs import FLASH_BACKWARD_FLOPS


class Unfitted(InputError):
    """A kernel whose measured time did not grow with its work: the rows are noise (a busy box
    descheduled the process), so the kernel is left out of the record, named in its `unfitted`,
    and the op model prices it as the catalogue would at the record's bandwidth."""


def residuals_pct(predicted, measured) -> list[float]:
    """Each fit's residuals: percent of the measured time, in the order of its rows."""
    return [round(float((p - m) / m * 100), 3) for p, m in zip(predicted, measured)]


def _causal_flops(r: dict[str, Any]) -> float:
    """QK^T and AV over half the pairs (op_costs.measured_attention's count)."""
    return 4 * r["batch"] * r["seq"] ** 2 * r["heads"] * r["head_dim"] / 2


def _shared_overhead(work: np.ndarray, seconds: np.ndarray, seq: np.ndarray) -> float:
    """One per-call overhead under every sequence length's own rate: seconds = overhead + work
    / rate(seq), least squares on relative error. It needs two sizes of work at one length at
    least (heads or batch); else (one size per length) the design's line through seconds vs work
    over the lengths, a single rate. Floored at 0; 0 where it leaves a rate <= 0 (noise)."""
    lengths = np.unique(seq)
    identified = any(len(np.unique(work[seq == s])) > 1 for s in lengths)
    if identified:
        design = np.column_stack([np.ones_like(work)] + [np.where(seq == s, work, 0.0)
                                                         for s in lengths]) / seconds[:, None]
        overhead = float(np.linalg.lstsq(design, np.ones_like(work), rcond=None)[0][0])
    else:
        overhead = fit_line(work, seconds)["intercept"]
    return max(0.0, overhead) if np.all(seconds > overhead) else 0.0


def _rates_by_seq(work, seconds, seq, overhead) -> dict[int, float]:
    """TFLOP/s at each length given the overhead: least squares on relative error of the
    time less the overhead, through the origin (one row: its own rate)."""
    out = {}
    for s in np.unique(seq):
        w, t = work[seq == s], seconds[seq == s]
        x = np.sum(w * (t - overhead) / t ** 2) / np.sum((w / t) ** 2)  # seconds per FLOP
        out[int(s)] = float(1 / x / 1e12)
    return out


def _scores(r: dict[str, Any]) -> float:
    """The s x s score elements of all heads (what the math kernel writes, masks and softmaxes)."""
    return r["batch"] * r["heads"] * r["seq"] ** 2


def _nonnegative_lstsq(design: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0: a negative one (noise) is dropped and the
    others refitted, until none is (at most as many rounds as coefficients)."""
    keep = list(range(design.shape[1]))
    while True:
        coef = np.zeros(design.shape[1])
        coef[keep] = np.linalg.lstsq(design[:, keep], target, rcond=None)[0]
        negative = [i for i in keep if coef[i] < 0]
        if not negative:
            return coef
        keep.remove(min(negative, key=lambda i: coef[i]))


def fit_math_attention(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The math kernel (softmax(QK^T)V materialized, zero_real's flash_attention = false):
    seconds = overhead + score_s x (b heads s^2) + causal FLOPs / rate per pass, least squares on
    relative error, no coefficient negative: two matmuls at one rate and an s x s pass through
    memory (scores, mask, softmax). Needs head sizes apart at a length to tell FLOPs from scores."""
    scores = np.array([_scores(r) for r in rows], dtype=float)
    overheads, per_score, rates, residuals = [], [], [], []
    for name, scale in zip(PASSES, (1.0, FLASH_BACKWARD_FLOPS)):
        work = np.array([scale * _causal_flops(r) for r in rows])
        seconds = np.array([r[f"{name}_s"] for r in rows], dtype=float)
        design = np.column_stack([np.ones_like(work), scores, work]) / seconds[:, None]
        overhead, score_s, per_flop = _nonnegative_lstsq(design, np.ones_like(work))
        if per_flop <= 0:
            raise Unfitted(f"measurements.ops: math attention {name}: the time does not grow "
                           f"with the FLOPs (measure several head sizes)")
        overheads.append(float(overhead))
        per_score.append(float(score_s))
        rates.append(float(1 / per_flop / 1e12))
        residuals += residuals_pct(overhead + score_s * scores + per_flop * work, seconds)
    lengths = sorted({int(r["seq"]) for r in rows})
    return {"kernel": "math", "overhead_s": overheads, "score_s": per_score,
            "by_seq": [[s, rates[0], rates[1]] for s in lengths], "residuals_pct": residuals}


def fit_attention(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per pass: the per-call overhead shared by every length (_shared_overhead), then at each
    sequence length the rate in TFLOP/s on the causal FLOPs of the time less that overhead
    (a flash kernel, whose rate grows with the length); the math kernel by its own law
    (fit_math_attention)."""
    kernels = sorted({r["kernel"] for r in rows})
    if len(kernels) != 1:
        raise InputError(f"measurements.ops: attention rows of kernels {', '.join(kernels)}; "
                         f"a record holds one (the scenario's)")
    if kernels[0] == "math":
        return fit_math_attention(rows)
    seq = np.array([int(r["seq"]) for r in rows])
    overheads, rates, residuals = [], [], []
    for name, scale in zip(PASSES, (1.0, FLASH_BACKWARD_FLOPS)):
        work = np.array([scale * _causal_flops(r) for r in rows])
        seconds = np.array([r[f"{name}_s"] for r in rows], dtype=float)
        overhead = _shared_overhead(work, seconds, seq)
        by_seq = _rates_by_seq(work, seconds, seq, overhead)
        overheads.append(overhead)
        rates.append(by_seq)
        residuals += residuals_pct([overhead + w / (by_seq[s] * 1e12) for w, s in zip(work, seq)],
                                seconds)
    return {"kernel": kernels[0], "overhead_s": overheads,
            "by_seq": [[s, rates[0][s], rates[1][s]] for s in sorted(rates[0])],
            "residuals_pct": residuals}


__all__ = ["Unfitted", "fit_attention", "fit_math_attention", "residuals_pct"]
