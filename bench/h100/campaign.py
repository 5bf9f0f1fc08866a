"""One batched measurement session on a GPU box (the device tool lends one H100 for minutes): run
the named parts in order, each command with its own time limit, keep every output file, and pack
them into one archive after each part, so a call cut short still brings back what it measured.

    python bench/h100/campaign.py --parts env,context,smoke --work /tmp/c --out $OUT/c.tgz

Parts:
  env        nvidia-smi, torch and `zero-real info`
  context    bench/h100/context_memory.py: the CUDA context and NCCL's buffers, as the driver sees
  smoke      zero_real on the tiny GPT, stages 0-3, NCCL with one process and a fake world of 8
  micro      bench/h100/microbench.py (GEMMs, attention, memory-bound ops, Adam, launches)
  fsdp2      bench/h100/fsdp2_memory.py presets: what FSDP2 holds at W-way sharding
  fsdp2fused the first preset with fused AdamW (no foreach temporaries)
  runs1b3    zero_real on the 1.3B GPT shape, stages 0-3, worlds 1 (NCCL) and fake 8 and 64
  runs350m   the same on a 350M shape, worlds 1 and fake 8
  runs7b5    the 7.5B shape at fake 64 (stages 1-3) and 8 (stage 3): DDP cannot fit one GPU
  calibrate  `zero-real calibrate --nproc 1` on the 1.3B shape: the profile validate uses
  heldout    runs the profile did not see: another micro-batch and sequence, bf16 and fp16

Every command's stdout/stderr lands in WORK/logs/NAME.txt; runs write WORK/runs/NAME.json. Give
WORK relative to the repository (e.g. gpu_out/c1): the files record the paths they were written
to, and committed files name no absolute path.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from zerosim.contract import STAGES

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
ZR = [PY, "-m", "zero_real"]
TINY = "scenarios/tiny_gpt_4rank_cpu.toml"
GPT = "scenarios/megatron_7b5_64gpu.toml"  # the 7.5B shape; smaller ones by --set
BF16 = ["training.precision=bf16", "training.activation_checkpointing=none"]
SHAPES = {  # name: overrides of the Megatron 7.5B scenario (heads keep head_dim 64 or 128)
    "gpt350m": ["model.layers=24", "model.hidden=1024", "model.heads=16"],
    "gpt1b3": ["model.layers=24", "model.hidden=2048", "model.heads=16"],
    "gpt7b5": [],
}
STEPS = ["--steps", "2", "--timed-steps", "3"]


def _sets(overrides: list[str]) -> list[str]:
    return [a for o in overrides for a in ("--set", o)]


DEADLINE = [float("inf")]  # perf_counter time after which no command starts (--budget-s)
ARCHIVE: list[Path] = []  # the archive, repacked after every command


def run_cmd(name: str, argv: list[str], work: Path, timeout_s: float) -> int:
    """One command, its output in logs/NAME.txt; a time-out or failure is logged, not raised.
    The command is skipped when the budget cannot hold it; it is cut at what remains."""
    log = work / "logs" / f"{name}.txt"
    start = time.perf_counter()
    left = DEADLINE[0] - start
    if left < 20:
        print(f"  {name}: skipped, {left:.0f} s of the budget left", flush=True)
        return 125
    timeout_s = min(timeout_s, left)
    with open(log, "w", encoding="utf-8") as f:
        f.write("$ " + " ".join(argv) + "\n")
        f.flush()
        try:
            rc = subprocess.run(argv, check=False, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT,
                                timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            rc = 124
        f.write(f"\n[rc {rc} in {time.perf_counter() - start:.1f} s]\n")
    if ARCHIVE:
        pack(work, ARCHIVE[0])
    print(f"  {name}: rc {rc} in {time.perf_counter() - start:.1f} s", flush=True)
    if rc:
        print("    " + "\n    ".join(log.read_text(encoding="utf-8").splitlines()[-6:]),
              flush=True)
    return rc


def zr_run(name, scenario, stage, overrides, work, extra=(), timeout_s=240.0) -> int:
    out = work / "runs" / f"{name}.json"
    argv = [*ZR, "run", scenario, "--stage", str(stage), "--backend", "nccl", *STEPS,
            *_sets(overrides), *extra, "--out", str(out), "--timeout-s", "120"]
    return run_cmd(name, argv, work, timeout_s)


def part_env(work: Path) -> None:
    run_cmd("nvidia_smi", ["nvidia-smi"], work, 30)
    probe = "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_properties(0))"
    run_cmd("torch", [PY, "-c", probe], work, 60)
    run_cmd("zero_real_info", [*ZR, "info"], work, 120)


def part_context(work: Path) -> None:
    run_cmd("context", [PY, "bench/h100/context_memory.py", "--out",
                        str(work / "context.json")], work, 120)


def part_smoke(work: Path) -> None:
    for stage in STAGES:
        zr_run(f"tiny_s{stage}_w1", TINY, stage, [], work, timeout_s=120)
        zr_run(f"tiny_s{stage}_w8", TINY, stage, [], work, ["--fake-world-size", "8"], 120)
    zr_run("gpt350m_s3_w8_smoke", GPT, 3, BF16 + SHAPES["gpt350m"], work,
           ["--fake-world-size", "8"])
    run_cmd("calibrate_tiny", [*ZR, "calibrate", TINY, "--nproc", "1", "--backend", "nccl",
                               "--out", str(work / "h100_tiny.json")], work, 240)


def part_micro(work: Path) -> None:
    run_cmd("microbench", [PY, "bench/h100/microbench.py", "--out",
                           str(work / "microbench.json")], work, 300)


def part_fsdp2(work: Path) -> None:
    presets = ("llama2_7b_s4096_b2_w8_full,llama2_7b_s4096_b2_w64_full,llama2_7b_s2048_b4_w8_sel,"
               "llama3_8b_s4096_b1_w8_none,llama_1b_s2048_b4_w8_none")
    run_cmd("fsdp2", [PY, "bench/h100/fsdp2_memory.py", "--preset", presets, "--out",
                      str(work / "fsdp2.json")], work, 420)


def _runs(shape: str, worlds: tuple[int, ...], stages: tuple[int, ...], work: Path) -> None:
    for world in worlds:
        for stage in stages:
            extra = [] if world == 1 else ["--fake-world-size", str(world)]
            zr_run(f"{shape}_s{stage}_w{world}", GPT, stage, BF16 + SHAPES[shape], work, extra)


def part_fsdp2fused(work: Path) -> None:
    """The first preset again with fused AdamW: what foreach AdamW's temporaries add."""
    run_cmd("fsdp2_fused", [PY, "bench/h100/fsdp2_memory.py", "--preset",
                            "llama2_7b_s4096_b2_w8_full", "--fused", "--out",
                            str(work / "fsdp2_fused.json")], work, 180)


def part_runs1b3(work: Path) -> None:
    _runs("gpt1b3", (1, 8, 64), STAGES, work)


def part_runs350m(work: Path) -> None:
    _runs("gpt350m", (1, 8), STAGES, work)


def part_runs7b5(work: Path) -> None:
    # DDP would need 16 bytes x 7.5e9 = 120 GB: stages 1-3 only, at 64-way; stage 3 also at 8.
    _runs("gpt7b5", (64,), (1, 2, 3), work)
    _runs("gpt7b5", (8,), (3,), work)


def part_calibrate(work: Path) -> None:
    argv = [*ZR, "calibrate", GPT, "--nproc", "1", "--backend", "nccl", "--micro-batches",
            "1,2,4", *_sets(BF16 + SHAPES["gpt1b3"]), "--out", str(work / "h100_gpt1b3.json")]
    run_cmd("calibrate_gpt1b3", argv, work, 420)


def part_heldout(work: Path) -> None:
    """Configurations the profile was not fitted on (it saw gpt1b3, seq 2048, bf16)."""
    for stage in STAGES:
        zr_run(f"gpt1b3_s{stage}_w8_mb3", GPT, stage,
               BF16 + SHAPES["gpt1b3"] + ["training.micro_batch=3"], work,
               ["--fake-world-size", "8"])
        zr_run(f"gpt1b3_s{stage}_w16_seq1024_mb2", GPT, stage,
               BF16 + SHAPES["gpt1b3"] + ["training.seq_len=1024", "training.micro_batch=2"],
               work, ["--fake-world-size", "16"])


PARTS = {"env": part_env, "context": part_context, "smoke": part_smoke, "micro": part_micro,
         "fsdp2": part_fsdp2, "fsdp2fused": part_fsdp2fused, "runs1b3": part_runs1b3, "runs350m": part_runs350m,
         "runs7b5": part_runs7b5, "calibrate": part_calibrate,
         "heldout": part_heldout}


def pack(work: Path, out: Path) -> None:
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(work, arcname=work.name)
    os.replace(tmp, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", required=True, help="comma-separated: " + ",".join(PARTS))
    parser.add_argument("--work", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path, help="the archive (.tgz)")
    parser.add_argument("--flash", action="store_true",
                        help="scenarios with training.flash_attention = true (fused attention)")
    parser.add_argument("--budget-s", type=float, default=float("inf"),
                        help="start no command after this many seconds; cut the last at it")
    args = parser.parse_args()
    DEADLINE[0] = time.perf_counter() + args.budget_s
    if args.flash:
        BF16.append("training.flash_attention=true")
    ARCHIVE.append(args.out)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        print(f"--parts: unknown {', '.join(unknown)}; known: {', '.join(PARTS)}",
              file=sys.stderr)
        return 2
    for sub in ("logs", "runs"):
        (args.work / sub).mkdir(parents=True, exist_ok=True)
    for part in parts:
        start = time.perf_counter()
        print(f"[{part}]", flush=True)
        PARTS[part](args.work)
        print(f"[{part} done in {time.perf_counter() - start:.0f} s]", flush=True)
        pack(args.work, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
