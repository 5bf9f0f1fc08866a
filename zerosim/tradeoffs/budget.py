"""What a training run costs: the time to train on a token budget, its GPU-hours and its price,
from one simulated step per stage.

A step trains `tokens_per_s_per_gpu` tokens a second on each of the world's GPUs (the simulated
step's throughput; under tensor or pipeline parallelism the GPUs of a model copy share its
tokens, which that figure already divides). A budget of T tokens then takes
T / (tokens_per_s_per_gpu x N) seconds on N GPUs, N times that in GPU-seconds. Only the step is
priced: no evaluation, checkpointing, restarts or the time a job waits for its nodes, so the
answer is a lower bound on a real run's wall-clock time and cost.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

from zerosim.errors import InputError

SECONDS_PER_HOUR = 3600
SECONDS_PER_DAY = 86400
TOKEN_SUFFIXES = {"K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}
"""Decimal, as token budgets are said ("2T tokens", "300B"): B and G are both 10^9."""
MAX_TOKENS = 10**18  # a million times the largest published budgets (~10^13): a typo past it

_TOKENS = re.compile(r"([0-9]+(?:\.[0-9]+)?(?:[eE][+]?[0-9]+)?)([KMBGT]?)", re.IGNORECASE)


def parse_tokens(text: str) -> int:
    """'2T', '300B', '1.5e12', '4_000_000' -> a whole number of tokens (suffixes decimal)."""
    match = _TOKENS.fullmatch(text.replace("_", "").strip())
    if match is None:
        raise InputError(f"--tokens {text!r} is not a token count: write e.g. 2T, 300B, 15e9")
    digits, suffix = match.groups()
    value = Decimal(digits) * TOKEN_SUFFIXES.get(suffix.upper(), 1)  # exact: no float rounding
    if not 1 <= value <= MAX_TOKENS or value != value.to_integral_value():
        raise InputError(f"--tokens {text!r} must be a whole number of tokens in 1..1e18")
    return int(value)


def check_price(price_per_gpu_hour: float | None) -> None:
    """A price is a finite number > 0 (in whatever currency the user thinks in)."""
    if price_per_gpu_hour is not None and not (math.isfinite(price_per_gpu_hour)
                                               and price_per_gpu_hour > 0):
        raise InputError(f"--price-per-gpu-hour {price_per_gpu_hour!r} must be a finite "
                         f"number > 0")


def budget_row(step: dict[str, Any], world_size: int, tokens: int,
               price_per_gpu_hour: float | None = None) -> dict[str, Any]:
    """One stage's run of `tokens` tokens from its `zerosim simulate --json` object: seconds,
    days, GPU-hours and (with a price) the cost."""
    rate = step["tokens_per_s_per_gpu"] * world_size  # tokens a second, the whole world
    seconds = tokens / rate
    gpu_hours = seconds * world_size / SECONDS_PER_HOUR
    return {"stage": step["stage"], "name": step["name"], "tokens": tokens,
            "world_size": world_size, "tokens_per_s": rate, "seconds": seconds,
            "days": seconds / SECONDS_PER_DAY, "gpu_hours": gpu_hours,
            "price_per_gpu_hour": price_per_gpu_hour,
            "cost": None if price_per_gpu_hour is None else gpu_hours * price_per_gpu_hour}


def budget_rows(steps: list[dict[str, Any]], world_size: int, tokens: int,
                price_per_gpu_hour: float | None = None) -> list[dict[str, Any]]:
    """budget_row for each simulated stage."""
    check_price(price_per_gpu_hour)
    rows = [budget_row(step, world_size, tokens, price_per_gpu_hour) for step in steps]
    if any(row["cost"] is not None and not math.isfinite(row["cost"]) for row in rows):
        raise InputError(f"--price-per-gpu-hour {price_per_gpu_hour:g} x the GPU-hours of "
                         f"{tokens:,} tokens passes what a number holds: a smaller price")
    return rows


def duration_text(seconds: float) -> str:
    """A duration as people plan it: '3.2 h', '41.7 days'."""
    if seconds < SECONDS_PER_HOUR:
        return f"{seconds / 60:.3g} min"
    if seconds < 2 * SECONDS_PER_DAY:
        return f"{seconds / SECONDS_PER_HOUR:.3g} h"
    return f"{seconds / SECONDS_PER_DAY:.4g} days"
