"""What a CUDA process holds on the device before the model: the driver's used memory (what
nvidia-smi shows) at each step of a training process's start-up, in a fresh process.

    python bench/h100/context_memory.py --out context.json

Steps: before CUDA is touched (other processes only), after the primary context is created
(torch.cuda.init + a 1-element tensor), after the first bf16 matrix product (cuBLAS handle and
workspace), after a 1-rank NCCL process group and one all-reduce, after a fake-world process
group (no NCCL). Each figure is total - free from cudaMemGetInfo; the allocator's own reservation
is recorded beside it so the context alone is `used - reserved - before`.

zerosim's CUDA context constant (zerosim/sim/device.py) is the figure this measures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess


def _smi_used_MiB() -> float | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        return float(out.split()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    record = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "smi_used_MiB_before": _smi_used_MiB(), "steps": []}
    import torch
    import torch.distributed as dist

    record["torch"], record["cuda"] = torch.__version__, torch.version.cuda
    record["cudnn"] = torch.backends.cudnn.version()
    try:
        record["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as e:  # noqa: BLE001 - recorded, not fatal
        record["nccl"] = repr(e)

    def step(name: str) -> None:
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        record["steps"].append({"step": name, "used_bytes": total - free, "total_bytes": total,
                                "reserved_bytes": torch.cuda.memory_reserved(),
                                "allocated_bytes": torch.cuda.memory_allocated(),
                                "smi_used_MiB": _smi_used_MiB()})
        print(f"{name}: used {(total - free) / 2**20:.0f} MiB, reserved "
              f"{torch.cuda.memory_reserved() / 2**20:.0f} MiB", flush=True)

    torch.cuda.init()
    torch.cuda.set_device(0)
    record["device"] = torch.cuda.get_device_name(0)
    torch.empty(1, device="cuda")
    step("context")
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    step("first_bf16_matmul")
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.float32)
    (b @ b).sum().item()
    step("first_fp32_matmul")
    del a, b
    torch.cuda.empty_cache()
    step("after_empty_cache")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    t = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(t)
    step("nccl_world1_all_reduce")
    dist.destroy_process_group()
    step("nccl_destroyed")
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
