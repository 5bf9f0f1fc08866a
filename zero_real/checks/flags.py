"""The numeric flags of `zero-real run` and `calibrate` as argparse types: text in, a checked
value out, or argparse's one line (`argument --lr: 'nan' is not a number in (0, 1]`, exit 2)
naming the flag and the range it allows. Checked while parsing, so no bad value reaches torch
(whose messages name neither the flag nor the range) or runs for minutes first.

Each bound says why it is where it is; they are limits of the tool, not of a box (what this box
can hold is preflight.py's question)."""

from __future__ import annotations

import argparse
import math
from typing import Callable

from zerosim.commandline import whole_number

MAX_WORLD = 2**16
"""Ranks (--nproc, --fake-world-size): work per rank grows with the world (every sharded
collective cuts a piece per rank, every flat buffer is padded to a multiple of it). Measured on a
2-core box, one ZeRO-3 step of the tiny scenario with --fake-world-size 65536 (2**16) ran 44 s
whole, 2**20 over 5 minutes, and torch's own message came at 2**40. A local --nproc meets
preflight's memory check long before this bound."""
MAX_SHARD_GROUP = MAX_WORLD
"""--shard-group: ranks per shard group (0: all of them), at most as many as there can be ranks;
that it divides the run's ranks is checked once they are known (cli.prepare_run)."""
MAX_TENSOR_PARALLEL = MAX_WORLD
"""--tensor-parallel: ranks per tensor-parallel group, at most as many as there can be ranks;
that it divides the run's ranks and the model's heads is checked once they are known."""
MAX_PIPELINE_PARALLEL = MAX_WORLD
"""--pipeline-parallel: pipeline stages, at most as many as there can be ranks; that t x p
divides the run's ranks and p the model's layers is checked once they are known."""
MAX_STEPS = 10_000
"""--steps and --timed-steps: every step's events are held in memory (the profiler keeps every
allocation of a profiled step besides) and written to the measurement: 13 KB per step for 2
ranks of the tiny scenario, 130 MB at this bound, and more with every rank and layer."""
MAX_SEED = 2**31 - 1
"""Seeds are mixed into torch generator seeds as (seed x 7919 + step) x 1,000,003 + row
(zero_real.parts.model.random_batch), which must stay below 2**64."""
TIMEOUT_S = (0.001, 2_147_483.0)
"""--timeout-s and --run-timeout-s: a limit a person puts on a collective or a run; 2**31 - 1 ms
(24.8 days) is longer than any run needs. Past ~9.2e12 s gloo fails an internal check (its
timeout in int64 microseconds overflows), past 8.64e13 s datetime.timedelta does, and 1e300 was
an OverflowError in a rank: messages that name no flag. Below 1 ms the timeout is 0 ms, no limit
at all (a run with --timeout-s 1e-300 ran to its end)."""
MAX_LR = 1.0
"""--lr: Adam moves every weight by about lr per step whatever the gradient; above 1 (weights
start at 0.02) the first step leaves noise. Also refuses nan and inf, which train nans."""
MAX_SIZE_BYTES = 2**40
"""--min-size-KiB and --max-size-MiB: 1 TiB per collective buffer, beyond any box's memory
(preflight then checks this box's) and within exact float arithmetic."""
MAX_SECONDS_PER_SIZE = 60.0
"""--seconds-per-size: timed iterations are capped at 500 over the rounds anyway
(calibration/bench.py)."""
DEFAULT_ROUNDS, MAX_ROUNDS = 3, 20
"""--rounds: each round repeats every timed microbenchmark of a world (a minute or so of a small
model's); twenty take about twenty times that."""
MAX_MICRO_BATCH, MAX_MICRO_BATCHES = 2**20, 16
"""--micro-batches: each value a number of sequences per rank (the memory check refuses far
less on a real box); at most 16 values, each adding a compute shape per unit kind and a memory
run per stage to every world."""


def whole(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: a whole number in lo..hi, in ASCII digits as every flag of both command
    lines (zerosim.commandline.whole_number: int() took `--nproc ٢`, review I14)."""
    def parse(text: str) -> int:
        value = whole_number(text)
        if value is None or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number in {lo}..{hi}")
        return value
    return parse


def number(lo: float, hi: float, *, above: bool = True) -> Callable[[str], float]:
    """An argparse type: a number in (lo, hi], or [lo, hi] with above=False; never nan or inf."""
    interval = f"{'(' if above else '['}{shown(lo)}, {shown(hi)}]"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not ((lo < value if above else lo <= value) and value <= hi):  # nan fails both
            raise argparse.ArgumentTypeError(f"{text!r} is not a number in {interval}")
        return value
    return parse


def shown(x: float) -> str:
    """A flag's number as text that parses back to the same value (`64`, `0.3`, `1048576`)."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def micro_batches(text: str) -> tuple[int, ...]:
    """An argparse type: distinct micro-batches, sorted, from `1,2,4`."""
    one = whole(1, MAX_MICRO_BATCH)
    try:
        values = sorted({one(v) for v in text.split(",")})
    except argparse.ArgumentTypeError:
        values = []
    if not 1 <= len(values) <= MAX_MICRO_BATCHES:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give 1 to {MAX_MICRO_BATCHES} whole numbers in 1..{MAX_MICRO_BATCH} "
            f"separated by commas, e.g. 1,2,4")
    return tuple(values)


nproc = whole(1, MAX_WORLD)
shard_group = whole(0, MAX_SHARD_GROUP)
tensor_parallel = whole(1, MAX_TENSOR_PARALLEL)
pipeline_parallel = whole(1, MAX_PIPELINE_PARALLEL)
steps = whole(1, MAX_STEPS)
timed_steps = whole(0, MAX_STEPS)
seed = whole(0, MAX_SEED)
lr = number(0.0, MAX_LR)
timeout_s = number(*TIMEOUT_S, above=False)
size_KiB = number(0.0, MAX_SIZE_BYTES / 2**10)
size_MiB = number(0.0, MAX_SIZE_BYTES / 2**20)
seconds_per_size = number(0.0, MAX_SECONDS_PER_SIZE)
rounds = whole(1, MAX_ROUNDS)
