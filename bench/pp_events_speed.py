"""Wall time of the pipeline's event executor (zerosim/sim/pipeline/events.run_pipeline) for one
step at the sizes issue 30 names: 1F1B with p = 64 and m = 1536 (a 1T model on 3072 GPUs),
1F1B with p = 8 and m = 512 (GPT-3 175B), and the interleaved schedule at p = 8, v = 4,
m = 512. Uniform stages with a link time, a cut last backward and an optimizer, so that every
path of the executor runs; with events kept (a trace) and without.

Goal (the lead's, for issue 30): well under 2 s for p = 64, m = 1536 on this 2-core box. A
measuring script: it prints and asserts nothing; the median of RUNS runs in this process.
Run: python bench/pp_events_speed.py
"""

from __future__ import annotations

import statistics
import time

from zerosim.sim.pipeline.events import PipelinePlan, StagePlan, run_pipeline

RUNS = 3
CASES = (("1f1b", 64, 1536, 1), ("1f1b", 8, 512, 1), ("interleaved_1f1b", 8, 512, 4))


def plan(schedule: str, p: int, m: int, v: int) -> PipelinePlan:
    """p like stages: a forward of 10 ms and a backward of 20 ms per micro-batch (per chunk a
    v-th of it), 0.5 ms per transfer, the last backward of each chunk cut in four pieces each
    launching 5 ms of reduction, a 40 ms optimizer."""
    pieces = tuple((0.25, 0.005) for _ in range(4))
    stage = StagePlan(forward_s=(0.010 / v,) * v, backward_s=(0.020 / v,) * v,
                      activation_bytes=(1 << 30,) * v, reduce=(pieces,) * v, optimizer_s=0.040,
                      static_bytes=1 << 34)
    return PipelinePlan(schedule, p, m, v, (stage,) * p, (0.0005,) * p, 1 << 25)


def main() -> None:
    print(f"{'case':<34} {'ops':>8} {'events kept':>12} {'no events':>10}  (median of {RUNS})")
    for schedule, p, m, v in CASES:
        the_plan, times = plan(schedule, p, m, v), {}
        for keep in (True, False):
            walls = []
            for _ in range(RUNS):
                start = time.perf_counter()
                runs = run_pipeline(the_plan, keep_events=keep)
                walls.append(time.perf_counter() - start)
            times[keep] = statistics.median(walls)
        label = f"{schedule} p={p} m={m}" + (f" v={v}" if v > 1 else "")
        step_s = max(run.end_s for run in runs)
        print(f"{label:<34} {2 * p * m * v:>8} {times[True]:>11.3f}s {times[False]:>9.3f}s"
              f"  step {step_s:.3f} s")


if __name__ == "__main__":
    main()
