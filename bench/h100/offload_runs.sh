#!/usr/bin/env bash
# zero_real's optimizer offload on one GPU, for the offload time model (issue 18): the 1.3B GPT
# shape (profiles/h100_gpt1b3.json's), bf16, ZeRO-2 and ZeRO-3 at a fake world of 8 (one process,
# the rank's 1/8 shard), with and without optimizer_offload = "cpu"; and zero_real's own Adam
# arithmetic (ShardAdam, what HostAdam runs on the host) timed alone on the host's cores, the
# CPU rate a prediction of these runs needs. Run on the lent GPU box from the repository root:
#     bash bench/h100/offload_runs.sh OUTDIR
# Outputs: OUTDIR/runs/*.json (zero-real measurements), OUTDIR/logs/*.txt, OUTDIR/host_adam.json.
set -u
out=${1:?usage: offload_runs.sh OUTDIR}
mkdir -p "$out/runs" "$out/logs"
shape=(--set training.precision=bf16 --set training.activation_checkpointing=none
       --set training.flash_attention=true --set model.layers=24 --set model.hidden=2048
       --set model.heads=16)
for stage in 2 3; do
  for offload in none cpu; do
    name="gpt1b3_s${stage}_w8_offload_${offload}"
    timeout 150 python -m zero_real run scenarios/megatron_7b5_64gpu.toml --stage "$stage" \
      --backend nccl --fake-world-size 8 --steps 2 --timed-steps 3 "${shape[@]}" \
      --set training.optimizer_offload="$offload" --out "$out/runs/$name.json" \
      > "$out/logs/$name.txt" 2>&1 || echo "$name failed: $?" >> "$out/logs/failures.txt"
  done
done
timeout 120 python - "$out/host_adam.json" <<'EOF' > "$out/logs/host_adam.txt" 2>&1
"""ShardAdam's step (zero_real/parts/optim.py) on host fp32 tensors: elements per second at the
torch thread count zero_real runs with (the default) and at 1."""
import json, os, sys, time
import torch
from zero_real.parts.measure import Ledger
from zero_real.parts.optim import ShardAdam

n = 1_302_000_000 // 8  # about one rank's shard of the 1.3B GPT at a world of 8
rows = []
for threads in (torch.get_num_threads(), 1):
    torch.set_num_threads(threads)
    p = torch.zeros(n, dtype=torch.float32)
    opt = ShardAdam(p, torch.randn(n), world_size=1, ledger=Ledger(), ideal_elements=n)
    g = torch.randn(n)
    opt.step(g)
    times = []
    for _ in range(3):
        t = time.perf_counter(); opt.step(g); times.append(time.perf_counter() - t)
    times.sort()
    rows.append({"threads": threads, "elements": n, "median_s": times[1],
                 "elements_per_s": n / times[1]})
    print(rows[-1], flush=True)
json.dump({"torch": torch.__version__, "cpu_count": os.cpu_count(), "rows": rows},
          open(sys.argv[1], "w"), indent=1)
EOF
ls -la "$out/runs" "$out"
