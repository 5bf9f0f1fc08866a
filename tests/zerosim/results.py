"""Small results with known numbers, as the commands write them: sweep rows and files, validate
reports. Shared by the figure and command tests (their fixtures are in conftest.py)."""

import csv
import json

GiB, MiB = 2**30, 2**20
STAGE_NAMES = ["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3"]
# (stage, world_size): peak GiB, comm GB per rank per step, comm s per step. On bytes, ZeRO-1 at 8
# GPUs (7, 7) is beaten by ZeRO-2 (5, 7) and DDP by everything; on time DDP is fastest.
NUMBERS = {(0, 4): (16, 6, 0.1), (0, 8): (16, 7, 0.2), (1, 4): (10, 6, 0.12),
           (1, 8): (7, 7, 0.22), (2, 4): (8, 6, 0.12), (2, 8): (5, 7, 0.22),
           (3, 4): (4, 9, 0.3), (3, 8): (2.5, 10.5, 0.4)}


def sweep_row(stage, world_size, peak_GiB, comm_GB, comm_s, **inputs):
    """One row of `zerosim sweep` (its column order) with a stack that adds up to the peak."""
    peak = int(peak_GiB * GiB)
    row = {"point": 0, **{k[5:]: v for k, v in inputs.items() if k.startswith("vary.")},
           "stage": stage, "stage_name": STAGE_NAMES[stage], "world_size": world_size,
           "params": 10**9, "tokens_per_step": 4096, "params_bytes": peak // 4,
           "grads_bytes": peak // 4, "optimizer_bytes": peak // 4,
           "model_states_bytes": 3 * peak // 4,
           "activations_bytes": peak // 8, "buffers_bytes": peak // 8, "host_bytes": 0,
           "peak_bytes": peak, "gpu_memory_bytes": 32 * GiB, "fits_gpu_memory": peak <= 32 * GiB,
           "step_time_s": 1.5, "compute_s": 1.0, "exposed_comm_s": 0.5, "comm_time_s": comm_s,
           "comm_bytes_per_rank_total": int(comm_GB * 10**9), "comm_bytes_all_reduce": 0,
           "comm_bytes_reduce_scatter": 0, "comm_bytes_all_gather": 0,
           "simulated_peak_bytes": peak, "gpu_seconds_per_step": 1.5 * world_size,
           "algorithm": "ring", "model.name": "test model", "cluster.nodes": world_size // 4,
           "cluster.gpus_per_node": 4, "training.precision": "bf16"}
    row.update({k.removeprefix("vary."): v for k, v in inputs.items()})  # values; places above
    return row


def write_sweep(path, rows):
    """A sweep file as `zerosim sweep --out` writes it: CSV (true/false, None empty) or JSON."""
    columns = list(dict.fromkeys(c for row in rows for c in row))
    if path.suffix == ".json":
        path.write_text(json.dumps({"zerosim_sweep": 1, "scenario": "s.toml", "vary": {},
                                    "overrides": [], "columns": columns, "rows": rows}))
        return path
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(columns)
        for row in rows:
            writer.writerow(["" if row.get(c) is None else str(row[c]).lower()
                             if isinstance(row[c], bool) else row[c] for c in columns])
    return path


def report(stage, metrics, **extra):
    return {"stage": stage, "measurement": f"m{stage}.json", "mean_abs_error_pct": 5.0,
            "metrics": [{"name": n, "measured": m, "simulated": s,
                         "error_pct": None if not m or s is None else (s - m) / m * 100}
                        for n, m, s in metrics], **extra}


REPORTS = [report(1, [("step_time_s", 0.05, 0.045), ("compute_s", 0.03, 0.033),
                      ("comm_all_gather_s", None, 0.004), ("peak_bytes", 4 * MiB, 5 * MiB)],
                  tolerance_pct=20),
           report(3, [("step_time_s", 0.08, 0.1), ("exposed_comm_s", 0.0, 0.01),
                      ("memory_after_forward_bytes", 2 * MiB, 1.5 * MiB)], tolerance_pct=20)]
