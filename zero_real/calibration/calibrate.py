"""`zero-real calibrate`: measure this box for zerosim. For each world of n = 1..N local processes
(ranks share a CPU box's cores: each world size runs at its own threads per rank, so each gets
its own record), launched like `zero-real run --nproc n`, every rank measures
collectives, compute per unit, the op model's constants, the optimizer and the real stages'
memory (bench.py, ops.py);
this side checks the request, starts each world, shows progress, and writes one JSON profile:
the raw measurements and what zerosim.calibration.fit.build_profile fits from them.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import shlex
import socket
import sys
import time
from pathlib import Path

from zero_real.checks import flags, preflight
from zero_real.run.progress import shown
from zero_real.run.runconfig import CalibrationWorld, portable_path
from zerosim.contract import (COLLECTIVE_IMPLS, EXIT_FAILED, EXIT_OK, PROFILE_FORMAT,
                              PROFILE_VERSION, STAGES)
from zerosim.errors import InputError
from zerosim.files import write_text
from zerosim.units import KiB, MiB

COLLECTIVE_BUFFERS = 3  # per rank at the largest size: the buffer, the ring's scratch, gloo's copy


def _modes(text: str) -> list[str]:
    modes = list(dict.fromkeys(m.strip() for m in text.split(",") if m.strip()))
    unknown = [m for m in modes if m not in COLLECTIVE_IMPLS]
    if unknown or not modes:
        raise InputError(f"--collectives {text}: {', '.join(unknown) or 'nothing'} is not a "
                         f"collectives mode; allowed: {', '.join(COLLECTIVE_IMPLS)} "
                         f"(comma-separated)")
    return modes


def _sizes(args, nproc: int) -> list[int]:
    """Powers of two in bytes from --min-size-KiB to --max-size-MiB (nccl-tests' -b/-e/-f 2);
    each flag is in range already (checks/flags.py)."""
    lo, hi = args.min_size_KiB * KiB, args.max_size_MiB * MiB
    if lo > hi:
        raise InputError(f"--min-size-KiB {flags.shown(args.min_size_KiB)} = {lo:g} bytes exceeds "
                         f"--max-size-MiB {flags.shown(args.max_size_MiB)} = {hi:g} bytes")
    size, sizes = 1 << max(0, math.ceil(math.log2(lo))), []
    while size <= hi:
        sizes.append(size)
        size *= 2
    if not sizes:
        raise InputError(f"no power of two bytes lies between {lo:g} and {hi:g} bytes")
    if nproc > 1 and sizes[0] < 4 * nproc:
        raise InputError(f"--min-size-KiB {flags.shown(args.min_size_KiB)}: the smallest buffer, "
                         f"{sizes[0]} bytes, must hold one fp32 element per rank: >= 4 x {nproc} "
                         f"= {4 * nproc} bytes")
    return sizes


def prepare(args) -> dict:
    """Check everything before the first process starts, the largest world first (what fits
    this box bounds --nproc before a world is built); the settings of every world."""
    preflight.require_torch()
    from zerosim.analytic.model import total_params
    from zerosim.scenario.load import load_scenario

    modes, sizes = _modes(args.collectives), _sizes(args, args.nproc)
    preflight.check_out(args.out)
    preflight.check_devices(args.backend, args.nproc)

    def load(n: int, *extra: str):
        # cluster.profile = "": the scenario may name the very profile being written
        return load_scenario(args.scenario, [*args.overrides, 'cluster.profile=""',
                                             "cluster.nodes=1", f"cluster.gpus_per_node={n}",
                                             *extra])

    scenario = load(args.nproc)
    preflight.check_scenario(scenario, args.scenario)
    micro_batches = args.micro_batches or sorted({1, scenario.training.micro_batch,
                                                  2 * scenario.training.micro_batch})
    if args.backend == "gloo":  # ranks share this box's memory: refuse what cannot fit
        preflight.check_memory(load(args.nproc, "training.zero_stage=0",
                                    f"training.micro_batch={micro_batches[-1]}"),
                               0, args.nproc, args.nproc)
        if args.nproc > 1:
            preflight.check_fits(args.nproc, COLLECTIVE_BUFFERS * sizes[-1],
                                 f"for {COLLECTIVE_BUFFERS} buffers of --max-size-MiB "
                                 f"{flags.shown(args.max_size_MiB)}")
    psi, elements = total_params(scenario.model), [KiB]
    while elements[-1] * 4 <= max(2**22, psi):
        elements.append(elements[-1] * 4)
    from zerosim.analytic.memory import stage_memory

    from zero_real.calibration.grad_path import visit_scenarios

    worlds = {}
    for n in range(1, args.nproc + 1):
        runs = {(s, b): load(n, f"training.zero_stage={s}", f"training.micro_batch={b}")
                for s in STAGES for b in micro_batches}
        largest = stage_memory(runs[(0, micro_batches[-1])], 0).peak_bytes
        worlds[n] = CalibrationWorld(
            scenario=load(n), backend=args.backend, nproc=n, timeout_s=args.timeout_s,
            collective_modes=tuple(modes), sizes=tuple(sizes),
            seconds_per_size=args.seconds_per_size, rounds=args.rounds,
            micro_batches=tuple(micro_batches),
            optimizer_elements=tuple(elements),
            memory_scenarios=runs,
            visit_scenarios=visit_scenarios(runs[(3, micro_batches[0])], largest))
    return {"scenario": scenario, "worlds": worlds, "modes": modes}


def assemble(args, the_plan: dict, results: dict[int, list[dict]], command: str) -> dict:
    """The profile's raw JSON: rank 0's numbers, maxima over ranks where they can differ."""
    import torch

    scenario, first = the_plan["scenario"], results[min(results)][0]
    t = scenario.training
    rows = {"collectives": [], "compute": [], "ops": [], "optimizer": [], "memory": [],
            "memory_mechanisms": [], "grad_path": []}
    for n, ranks in results.items():
        zero = ranks[0]
        rows["collectives"] += zero["collectives"]
        for i, row in enumerate(zero["compute"]):
            rows["compute"].append({
                **{k: row[k] for k in ("processes", "unit", "micro_batch", "seq_len",
                                       "forward_s", "backward_s")},
                "forward_s_max_rank": max(r["compute"][i]["forward_s"] for r in ranks),
                "backward_s_max_rank": max(r["compute"][i]["backward_s"] for r in ranks),
                "iterations": row["iterations"]})
        rows["ops"] += [_with_max_rank(row, [r["ops"][i] for r in ranks])
                        for i, row in enumerate(zero["ops"])]
        rows["memory_mechanisms"] += zero["memory_mechanisms"]  # bytes: alike on every rank
        rows["grad_path"] += zero["grad_path"]
        for i, row in enumerate(zero["optimizer"]):
            rows["optimizer"].append({**row, "time_s_max_rank": max(r["optimizer"][i]["time_s"]
                                                                    for r in ranks)})
        for i, row in enumerate(zero["memory"]):
            per_rank = [r["memory"][i] for r in ranks]
            rows["memory"].append({
                "processes": n, "stage": row["stage"], "micro_batch": row["micro_batch"],
                "seq_len": t.seq_len, "collectives": the_plan["modes"][0],
                "peak_bytes": max(r["peak_bytes"] for r in per_rank),
                "phases": {p: max(r["phases"][p] for r in per_rank) for p in row["phases"]},
                "timing": {k: sum(r["timing"].get(k, 0.0) for r in per_rank) / len(per_rank)
                           for k in row["timing"]},
                "ledger_phases": row["ledger_phases"]})
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return {
        "format": PROFILE_FORMAT, "version": PROFILE_VERSION,
        "provenance": {"host": socket.gethostname(), "hardware": first["hardware"],
                       "backend": args.backend, "device": first["device"],
                       "torch_version": torch.__version__, "date": date,
                       "scenario": portable_path(args.scenario), "overrides": args.overrides,
                       "nproc": args.nproc, "collectives": the_plan["modes"], "command": command},
        "scenario": {"model": dataclasses.asdict(scenario.model),
                     "training": {"precision": t.precision, "optimizer": t.optimizer,
                                  "seq_len": t.seq_len, "micro_batch": t.micro_batch}},
        "measurements": rows}


def _with_max_rank(row: dict, per_rank: list[dict]) -> dict:
    """An op row (ops.py) with each time's maximum over the ranks beside it (`forward_s_max_rank`;
    null where the time is: a copy's backward)."""
    times = [k for k in row if k.endswith("_s")]
    return {**row, **{f"{k}_max_rank": None if row[k] is None else max(r[k] for r in per_rank)
                      for k in times}}


def fit(scenario, raw: dict, out: str) -> dict:
    """zerosim's fit (zerosim.calibration.fit.build_profile); if it fails, the raw measurements are
    kept beside the output before the error is reported."""
    from zerosim.calibration.fit import build_profile

    try:
        return build_profile(scenario, raw)
    except Exception as exc:  # noqa: BLE001 - keep what took minutes to measure, whatever failed
        kept = str(Path(out).with_suffix(".raw.json"))
        write_json(kept, raw)
        raise InputError(f"fitting the profile failed ({type(exc).__name__}: {exc}); the "
                         f"measurements are in {kept}") from None


def write_json(path: str, data: dict) -> None:
    """Whole or not at all (zerosim.files.write_text)."""
    write_text(Path(path), json.dumps(data, indent=1) + "\n", "--out")


def reproduce(args) -> str:
    """The command, every setting spelled out (defaults included), to redo this calibration;
    its paths as typed (portable_path)."""
    argv = ["zero-real", "calibrate", portable_path(args.scenario), "--nproc", str(args.nproc),
            "--backend", args.backend, "--collectives", args.collectives,
            "--min-size-KiB", flags.shown(args.min_size_KiB),
            "--max-size-MiB", flags.shown(args.max_size_MiB)]
    if args.micro_batches is not None:
        argv += ["--micro-batches", ",".join(map(str, args.micro_batches))]
    for override in args.overrides:
        argv += ["--set", override]
    argv += ["--seconds-per-size", flags.shown(args.seconds_per_size),
             "--rounds", str(args.rounds), "--timeout-s", flags.shown(args.timeout_s)]
    if args.run_timeout_s is not None:
        argv += ["--run-timeout-s", flags.shown(args.run_timeout_s)]
    return shlex.join([*argv, "--out", portable_path(args.out)])


def calibrate(args) -> int:
    """`zero-real calibrate`: exit 0 with the profile written, 1 a rank failed, 2 bad input."""
    the_plan = prepare(args)
    from zero_real.calibration.bench import measure_world
    from zero_real.run.launch import RankFailed, Stopped, signals_stop_the_run, spawn

    start, results, n = time.monotonic(), {}, None
    try:
        with signals_stop_the_run():
            for n, world in the_plan["worlds"].items():
                with shown(f"calibrate n={n}", sys.stderr, f"starting {n} process(es)") as path:
                    results[n] = spawn(measure_world, n,
                                       dataclasses.replace(world, progress_path=path),
                                       args.run_timeout_s)
    except RankFailed as exc:
        print(f"zero-real: error: calibrate n={n}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except Stopped as exc:
        print(f"zero-real: {exc.name}: every rank stopped", file=sys.stderr)
        return 128 + exc.signum
    raw = assemble(args, the_plan, results, reproduce(args))
    write_json(args.out, fit(the_plan["scenario"], raw, args.out))
    counts = ", ".join(f"{len(v)} {k}" for k, v in raw["measurements"].items())
    print(f"calibrated {raw['provenance']['hardware']} ({args.backend}) for "
          f"{the_plan['scenario'].model.name}, n = {', '.join(map(str, results))}: {counts} "
          f"in {time.monotonic() - start:.0f} s; wrote {args.out}")
    return EXIT_OK
