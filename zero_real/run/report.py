"""A finished run for people: the lines `zero-real run` prints after its measurement."""

from __future__ import annotations

from zero_real.parts.tensor import PREFIX
from zerosim.contract import COMM, P2P, Measurement
from zerosim.units import MiB


def summary(result: Measurement, out: str | None) -> str:
    lines = [f"{result['stage_name']} (stage {result['stage']}) on {result['world_size']} ranks, "
             f"{result['backend']}/{result['collectives']}, torch {result['torch_version']}, "
             f"{result['hardware']}",
             "losses " + " ".join(f"{x:.4f}" for x in result["losses"])]
    zerosim_host = result["zerosim_memory"].get("host_bytes", 0)
    stages = result.get("zerosim_pipeline_memory")
    for r in result["ranks"]:
        # Under a pipeline, the rank's own stage's states (the stages hold different layers).
        zerosim = stages[r["pipeline_stage"]] if stages else result["zerosim_memory"]
        zerosim_states = zerosim["model_states_bytes"]
        phases = " ".join(f"{k.removeprefix('after_')} {v / MiB:.2f}" for k, v in r["phases"].items()
                          if v is not None)
        # CUDA: the allocator's reservation beside its allocation (absent on CPU).
        reserved = (f" (reserved {r['peak_reserved_bytes'] / MiB:.2f} MiB)"
                    if r.get("peak_reserved_bytes") is not None else "")
        # Optimizer offload: the states in host memory, beside zerosim's host_bytes.
        host = r["ledger"].get("host", 0)
        host = (f", host {host / MiB:.3f} MiB (zerosim {zerosim_host / MiB:.3f})"
                if host or zerosim_host else "")
        lines.append(f"rank {r['rank']}: model states {r['ledger']['model_states'] / MiB:.3f} MiB "
                     f"(zerosim {zerosim_states / MiB:.3f}){host}, peak "
                     f"{r['peak_bytes'] / MiB:.2f} MiB{reserved}, after: {phases} MiB")
    comm = [e for e in result["events"] if e["stream"] == COMM and e["rank"] == 0]
    step_s = max((e["end_s"] for e in result["events"]), default=0.0)
    # Under tensor parallelism, how many of them ran in the TP group (parts/tensor.py's names).
    tp = sum(e["name"].startswith(PREFIX) for e in comm)
    tp = f" ({tp} tensor-parallel)" if tp else ""
    # Under pipeline parallelism, the transfers between stages beside them.
    p2p = [e for e in result["events"] if e["stream"] == P2P and e["rank"] == 0]
    p2p = f", {len(p2p)} p2p transfers, {sum(e['bytes'] for e in p2p) / MiB:.2f} MiB" if p2p else ""
    lines.append(f"rank 0: {len(comm)} collectives{tp}, "
                 f"{sum(e['bytes'] for e in comm) / MiB:.2f} MiB{p2p}, run {step_s:.2f} s")
    if out:
        lines.append(f"wrote {out}")
    return "\n".join(lines)
