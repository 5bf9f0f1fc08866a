"""Synthetic calibration measurements whose true parameters are known: what the fit must
recover and the engine must reproduce (tests/zerosim/test_calibrate.py, test_validate.py)."""

import dataclasses

from tests.conftest import SCENARIOS
from zerosim.analytic.model import unit_flops
from zerosim.scenario.load import load_scenario
from zerosim.sim.engine import simulate

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
SIZES = [2.0 ** k for k in range(10, 29)]  # 1 KiB .. 256 MiB
ALPHA, BETA = 40e-6, 1 / 2.5e9  # 40 us, 2.5 GB/s

OVERHEAD = {"embedding": (2e-4, 3e-4), "block": (5e-4, 9e-4), "head": (4e-4, 6e-4)}
SECONDS_PER_FLOP, SECONDS_PER_TOKEN = 1 / 20e9, 1e-7
OPT = (1e-3, 2e-9)  # overhead, seconds per element
EXTRA = {"activations": (1000, 40), "residue": (3000, 0), "workspace": (5000, 20)}


def unit_time(scenario, unit, phase, b):
    """The synthetic time of one unit's pass at micro-batch b: overhead + per FLOP (per token)."""
    t = dataclasses.replace(scenario.training, micro_batch=b)
    flops = unit_flops(scenario.model, t)
    index = {"embedding": 0, "block": 1, "head": scenario.model.layers + 1}[unit]
    work = getattr(flops[index], phase)
    slope = SECONDS_PER_FLOP * work if work else SECONDS_PER_TOKEN * b * t.seq_len
    return OVERHEAD[unit][phase == "backward"] + slope


def synthetic_raw(scenario, processes=(2, 4), micro_batches=(1, 2, 4)):
    collectives, compute, optimizer, memory = [], [], [], []
    for n in processes:
        for op, factor in (("all_reduce", 2.0), ("reduce_scatter", 1.0), ("all_gather", 1.0)):
            for s in SIZES:
                collectives.append({"impl": "native", "op": op, "ranks": n, "size_bytes": s,
                                    "time_s": factor * (n - 1) * (ALPHA + BETA * s / n)})
        for b in micro_batches:
            for unit in ("embedding", "block", "head"):
                compute.append({"processes": n, "unit": unit, "micro_batch": b,
                                "seq_len": scenario.training.seq_len,
                                "forward_s": unit_time(scenario, unit, "forward", b),
                                "backward_s": unit_time(scenario, unit, "backward", b)})
        for e in (2 ** 10, 2 ** 14, 2 ** 18):
            optimizer.append({"processes": n, "elements": e, "time_s": OPT[0] + OPT[1] * e})
    raw = {"format": "zerosim-profile", "version": 1, "provenance": {"host": "synthetic"},
           "measurements": {"collectives": collectives, "compute": compute,
                            "optimizer": optimizer}}
    # memory "measured": the uncalibrated engine plus known extras
    for n in processes:
        for stage in range(4):
            for b in micro_batches:
                s = load_scenario(TINY, [f"training.micro_batch={b}", f"cluster.gpus_per_node={n}",
                                         "training.overlap_comm=false"])
                r = simulate(s, stage, keep_events=False)
                tokens = b * s.training.seq_len
                extra = {k: f + p * tokens for k, (f, p) in EXTRA.items()}
                phases = dict(r.memory_at)
                phases["after_forward"] += extra["activations"]
                for point in ("after_backward", "after_step"):
                    phases[point] += extra["residue"]
                memory.append({"processes": n, "stage": stage, "micro_batch": b,
                               "seq_len": s.training.seq_len, "phases": phases,
                               "peak_bytes": r.peak_bytes + extra["activations"]
                               + extra["workspace"]})
    raw["measurements"]["memory"] = memory
    return raw


def with_profile(path, *overrides):
    return load_scenario(TINY, [f'cluster.profile="{path}"', *overrides])
