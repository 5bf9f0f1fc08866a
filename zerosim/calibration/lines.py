"""A line on relative error: the least-squares fit the calibration fits are built from (no torch).

Collectives' α-β segments, the optimizer's, and a box's op-model record (fit_ops.py) each fit
time = intercept + slope·x where every point counts alike, a 1 KiB message as much as 256 MiB:
the residuals minimised are (y - fit) / y.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zerosim.errors import InputError


def fit_line(x, y) -> dict[str, Any]:
    """y = intercept + slope·x minimising the relative residuals (y - fit) / y. A negative
    intercept or slope is not physical (noise at one end): that term is dropped and the other
    refitted. Returns intercept, slope and the residuals in percent."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) == 0 or np.any(y <= 0) or not np.all(np.isfinite(x)) or not np.all(np.isfinite(y)):
        raise InputError("a fit needs positive, finite measurements")
    w = 1.0 / y
    if len(x) >= 2 and np.ptp(x) > 0:
        design = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
        intercept, slope = np.linalg.lstsq(design, y * w, rcond=None)[0]
    else:
        intercept, slope = -1.0, 0.0
    if intercept < 0 or slope < 0:
        if intercept < 0 and np.any(x > 0):  # through the origin
            intercept, slope = 0.0, float(np.sum(x * w * w * y) / np.sum((x * w) ** 2))
        if slope < 0 or not np.any(x > 0):  # a constant
            intercept, slope = float(np.sum(w) / np.sum(w * w)), 0.0
    residuals = (intercept + slope * x - y) / y * 100
    return {"intercept": float(intercept), "slope": float(slope),
            "residuals_pct": [round(float(r), 3) for r in residuals]}


__all__ = ["fit_line"]
