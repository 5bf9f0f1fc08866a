"""One pipelined training step of a stage: its plan (plan.py) run as events (events.py), every
pipeline stage simulated (stages differ: the first holds the embedding and the most
activations, the last the head and the loss), reported as one StageResult whose times are the
stage that finished last's and whose memory is the worst stage's, with every stage's own figures
beside them (StageResult.pipeline).

One representative rank per pipeline stage: the d data-parallel replicas and the t tensor-
parallel ranks of a stage do the same thing at the same time, as the engine's symmetric mode
assumes for a step without a pipeline. [variation]'s stragglers, degraded links and jitter are
not modelled beside a pipeline.
"""

from __future__ import annotations

from zerosim.analytic.model import model_flops_per_token
from zerosim.contract import P2P, P2P_OPS
from zerosim.errors import InputError
from zerosim.frameworks import framework_of
from zerosim.parallel.pipeline import layout_of
from zerosim.sim.device import overhead
from zerosim.sim.groups import WORLD
from zerosim.sim.pipeline.events import StageRun, run_pipeline
from zerosim.sim.pipeline.plan import Pricer, pipeline_plan
from zerosim.sim.result import StageResult

SEND = P2P_OPS[0]
MAX_PIPELINE_OPS = 2_000_000
"""Forwards and backwards one simulated step may run, 2 p v m: about 6.5 us each on this
project's 2-core CI box (bench/pp_events_speed.py: p = 64, m = 1536, 196,608 ops in 1.26 s with
events kept), so the cap is about 13 s."""


def check_pipeline_step(scenario, stage: int, mode: str) -> None:
    """Refuse what a pipelined step does not model: a ZeRO stage its framework does not run
    beside a pipeline, [variation], every rank simulated."""
    t = scenario.training
    fw = framework_of(t)
    if stage not in fw.pipeline_stages:
        allowed = " or ".join(map(str, fw.pipeline_stages))
        raise InputError(f"stage {stage} beside a pipeline (parallelism.pipeline_parallel = "
                         f"{scenario.parallelism.pipeline_parallel}): training.framework = "
                         f"{fw.name!r} runs stage {allowed} there: {fw.pipeline_refusal}")
    p = scenario.parallelism
    ops = 2 * p.pipeline_parallel * p.virtual_stages * t.gradient_accumulation
    if ops > MAX_PIPELINE_OPS:
        raise InputError(f"one step of {p.pipeline_parallel} pipeline stages x "
                         f"{p.virtual_stages} chunks x {t.gradient_accumulation:,} micro-batches "
                         f"runs {ops:,} forwards and backwards, more than the {MAX_PIPELINE_OPS:,} "
                         f"simulated in about 13 s: lower training.gradient_accumulation (and "
                         f"raise micro_batch)")
    if not scenario.variation.is_uniform or mode == "per_rank":
        raise InputError("[variation] (stragglers, degraded links, jitter) and --mode per_rank "
                         "are not modelled beside a pipeline yet: one representative rank per "
                         "pipeline stage is simulated")


def simulate_pipeline(scenario, stage: int, mode: str = "auto",
                      keep_events: bool = True) -> StageResult:
    """One step of `stage` under the scenario's pipeline."""
    check_pipeline_step(scenario, stage, mode)
    plan, pricer, rows = pipeline_plan(scenario, stage)
    runs = run_pipeline(plan, keep_events=keep_events)
    last = max(range(plan.stages), key=lambda i: (runs[i].end_s, runs[i].compute_s, -i))
    critical = runs[last]
    t, p = scenario.training, scenario.parallelism
    step_s = critical.end_s
    tokens_per_s = t.tokens_per_rank / (p.tensor_parallel * p.pipeline_parallel) / step_s
    # what the optimizer step holds, when more than the schedule's peak (memory's third term)
    peaks = [max(run.peak_bytes, row.peak_bytes) for run, row in zip(runs, rows)]
    device = [peak + overhead(scenario.cluster, *pricer.libraries.values()) for peak in peaks]
    worst = max(range(plan.stages), key=lambda i: device[i])
    sent = [dict(pricer.sent[i]) if i < len(pricer.sent) else {} for i in range(plan.stages)]
    for i, run in enumerate(runs):
        if run.p2p_sent_bytes:
            sent[i][f"{SEND} ({P2P})"] = run.p2p_sent_bytes
    per_stage = [_stage_summary(scenario, i, run, peaks[i], device[i], sent[i])
                 for i, run in enumerate(runs)]
    return StageResult(
        stage=stage, step_time_s=step_s, compute_s=critical.compute_s,
        exposed_comm_s=step_s - critical.compute_s,
        comm_bytes_per_rank=_by_op(sent[last]), comm_time_s=critical.comm_s,
        host_bytes_per_rank={}, host_time_s=0.0,
        peak_bytes=max(peaks), memory_at={}, peak_allocated_bytes=max(peaks),
        peak_reserved_bytes=max(peaks), device_bytes=device[worst],
        tokens_per_s_per_gpu=tokens_per_s,
        mfu=model_flops_per_token(scenario.model, t) * tokens_per_s
        / (scenario.cluster.peak_tflops * 1e12),
        algorithm=_algorithms(pricer), mode="symmetric", ranks_simulated=plan.stages,
        slowest_rank=last * scenario.world_size // plan.stages,
        notes=list(scenario.cluster.notes) + [_NOTE], comm_bytes_per_group=_by_group(sent[last]),
        pipeline=per_stage, pipeline_runs=runs)


_NOTE = ("pipeline: one representative rank per stage; its data-parallel collectives and its "
         "point-to-point transfers are priced alone on their links; the caching allocator is "
         "not modelled (allocated = reserved = the analytic peak of the stage)")


def _stage_summary(scenario, i: int, run: StageRun, peak: int, device: int,
                   sent: dict[str, float]) -> dict:
    return {"pipeline_stage": i, "layers": layout_of(scenario).stage_layers(i),
            "step_time_s": run.end_s, "compute_s": run.compute_s,
            "idle_s": run.end_s - run.compute_s, "comm_time_s": run.comm_s, "activations_held": run.max_held,
            "peak_bytes": peak, "device_bytes": device,
            "comm_bytes_per_rank": _by_op(sent)}


def _by_op(sent: dict[str, float]) -> dict[str, int]:
    return {op: round(b) for op, b in sorted(sent.items())}


def _by_group(sent: dict[str, float]) -> dict[str, dict[str, int]]:
    """Bytes by group: "dp" for the stage's data-parallel ranks, "tp", "p2p"."""
    out: dict[str, dict[str, int]] = {}
    for key, size in sorted(sent.items()):
        op, _, group = key.partition(" (")
        out.setdefault(group.rstrip(")") or "dp", {})[op] = round(size)
    return dict(sorted(out.items()))


def _algorithms(pricer: Pricer) -> str:
    """What ran the stage's collectives, per op: the algorithm/protocol that moved the most
    bytes first (result.algorithms_used's form)."""
    if pricer.libraries[WORLD].library == "gloo" or not pricer.used:
        return pricer.libraries[WORLD].algorithm
    return ", ".join(f"{op} {'+'.join(sorted(labels, key=lambda k: -labels[k]))}"
                     for op, labels in pricer.used.items())
