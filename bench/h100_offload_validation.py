"""Offload's time on a real H100 against the simulator: zero_real's ZeRO-2 and ZeRO-3 runs of the
1.3B GPT with and without optimizer_offload = "cpu" (bench/h100/offload_runs.sh, committed in
profiles/h100/offload_2026-11-26/), one process at a fake world of 8 (collectives are no-ops
there, so a step is compute plus, under offload, the copies and the host's Adam).

What is compared is what offload adds to a step, measured (median step with offload minus
without) against simulated (the same difference, zerosim with the H100's record,
profiles/h100_record_2026-11-24.json built from its microbenchmarks by bench/h100/record.py,
for compute, on an H100 (cluster.gpu; the scenario file names a V100), and that box's own host
figures: the pinned copy rate of profiles/h100/offload_microbench_2026-11-26.json, 54.9 GB/s,
and zero_real's Adam arithmetic
timed alone on its 16 cores, host_adam.json). Both are microbenchmarks of the parts; the runs
are the test. Runs on any machine: the measurements are files.

    python bench/h100_offload_validation.py [--profile PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zerosim.calibration.measured import step_figures  # noqa: E402
from zerosim.calibration.validate import scenario_of  # noqa: E402
from zerosim.scenario.load import load_scenario  # noqa: E402
from zerosim.sim.engine import simulate  # noqa: E402

RUNS = ROOT / "profiles" / "h100" / "offload_2026-11-26"
PROFILE = ROOT / "profiles" / "h100_record_2026-11-24.json"
HOST_LINK_GBPS = 54.9  # offload_microbench_2026-11-26.json, pinned H2D at 1 GiB
CORES = 16


def host_keys() -> list[str]:
    adam = json.loads((RUNS / "host_adam.json").read_text())
    rate = max(row["elements_per_s"] for row in adam["rows"])  # all 16 threads
    return [f"cluster.host_link_GBps={HOST_LINK_GBPS}", f"cluster.cpu_cores_per_gpu={CORES}",
            f"cluster.cpu_adam_Melements_per_s_per_core={rate / CORES / 1e6:.4f}"]


def measured_and_simulated(stage: int, offload: str,
                           profile: Path = PROFILE) -> tuple[float, float, dict]:
    m = json.loads((RUNS / "runs" / f"gpt1b3_s{stage}_w8_offload_{offload}.json").read_text())
    measured = step_figures(m)["step_time_s"]
    base = scenario_of(m, profile=str(profile))
    scenario = load_scenario(base.source, [*m["overrides"], "cluster.nodes=1",
                                           "cluster.gpus_per_node=8", f"training.zero_stage={stage}",
                                           "training.overlap_comm=false",
                                           "cluster.gpu=H100-80GB",
                                           f"cluster.profile={json.dumps(str(profile))}",
                                           *host_keys()])
    result = simulate(scenario, stage, keep_events=False)
    return measured, result.step_time_s, {"host_s": result.host_time_s,
                                          "host_bytes": result.host_bytes_per_rank}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", type=Path, default=PROFILE, help="a version-2 profile")
    profile = ap.parse_args(argv).profile.resolve()
    print(f"profile: {profile}")
    print(f"host figures: {', '.join(host_keys())}")
    print(f"{'stage':>5}  {'measured +s':>11}  {'simulated +s':>12}  {'error':>7}  "
          f"{'measured step':>13}  {'simulated step':>14}  host operations (simulated)")
    for stage in (2, 3):
        m_none, s_none, _ = measured_and_simulated(stage, "none", profile)
        m_off, s_off, host = measured_and_simulated(stage, "cpu", profile)
        added_m, added_s = m_off - m_none, s_off - s_none
        print(f"{stage:>5}  {added_m:>11.3f}  {added_s:>12.3f}  {added_s / added_m - 1:>+7.1%}  "
              f"{m_off:>13.3f}  {s_off:>14.3f}  {host['host_s']:.3f} s, "
              + ", ".join(f"{op} {b / 1e9:.2f} GB" for op, b in host["host_bytes"].items()))
    print("(measured step: median over the timed steps; without offload "
          "the simulated step prices the collectives a fake world does not run, which the "
          "difference cancels)")


if __name__ == "__main__":
    main()
