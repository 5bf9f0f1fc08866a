"""The H100's op-model record, built from the committed microbenchmarks (no GPU needed).

Reads profiles/h100/microbench_2026-11-24.json (bench/h100/microbench.py) and
profiles/h100/offload_microbench_2026-11-26.json (bench/h100/offload_microbench.py), turns the
rows that measure what `zero-real calibrate` measures into its raw rows (measurements["ops"],
/tmp/work31/design.md's list, the same keys), fits them with
zerosim.calibration.fit_ops.fit_record, and writes a version-2 profile,
profiles/h100_record_2026-11-24.json, whose fit.record["1"] is the H100 as one process saw it.

How each row maps (every row: processes 1, threads = the file's cpu_threads, device "cuda",
dtype "bfloat16", times the medians; one process, so each "*_max_rank" is the same figure):
- gemm: every "gemm" row (149: Llama linears' forward, dgrad, wgrad at 2048-16384 tokens, and
  squares 1024-16384) -> m = M, n = N, k = K, time_s = median_s. The file's operands are the
  transposed views autograd passes (a_t, b_t), torch.matmul; the op model does not tell them
  apart.
- launch: "add_1elem" -> per_op_s (x.add_(1) on one element, synchronized after 2000: the
  host's dispatch and launch, the GPU idling). autograd_node_s: not measured (AUTOGRAD_NODE_S,
  a placeholder nothing reads; "lacks").
  host_dispatch_s = [add_1elem, matmul_64x64] per_op_s goes into the record beside the fit
  (OpModel.host_dispatch_s, zerosim/sim/host_floor.py).
- attention: backend "default" rows with kv_heads = heads (MHA, as the GPT runs) -> kernel
  "flash" (zero_real's ATTENTION_KERNELS[True] enables flash, memory-efficient and cuDNN and
  lets SDPA's priority choose; the default rows' aten_ops show that it chose cuDNN, as zero_real
  would), batch b, heads, kv_heads, seq s, head_dim; forward_s = fwd median, backward_s =
  fwd_bwd median - fwd median. The file timed SDPA alone on (b, h, s, d) tensors: Block.attention's
  split, views, transposes and reshape around it are not in the time.
- memory_op (one size each, so the fit's line has no separate overhead):
  - swiglu -> swiglu, tokens 16384, width 14336 (F.silu(a) * b, as zero_real's MLP);
    backward_s = fwd_bwd - fwd.
  - residual_add -> residual, tokens 16384, width 4096 (torch.add); backward_s = the same
    kernel's median: autograd sums a residual's two branch gradients with one add
    (torch/csrc/autograd/input_buffer.cpp, InputBuffer::add).
  - copy -> copy, tokens 536870912, width 1 (x.clone() of 1 GiB); backward null;
    bandwidth_GBps is its bytes per second.
  - rms_norm: not mapped for this record, whose scenario is the GPT of the runs (nn.LayerNorm);
    rotary: the file's is rotate-half with cos and sin given, zero_real's _rope interleaves
    pairs and computes cos and sin per call; cross_entropy: the file's reads bf16 logits,
    zero_real's casts them to fp32 first (.float()). Each falls back to the catalogue's factor
    (sim/op_costs.memory_op), which was measured on these same rows.
- copy_host: offload_microbench host_link "pinned" and "pageable" rows -> direction h2d | d2h,
  pinned, bytes, time_s = median_s (bidirectional rows left out: the record has no such kind).
- optimizer: the file's rows are torch.optim.AdamW (foreach, fused) over 8 tensors, not
  zero_real's ShardAdam (eleven eager elementwise kernels over one flat shard,
  zero_real/parts/optim.py), so none maps. fit.optimizer["1"] is derived instead, not fitted:
  ShardAdam's bytes per element (SHARD_ADAM_BYTES, counted from its code) at the copy row's
  bytes per second, plus its eleven ops' host dispatch; provenance says so.
- the record's launch_s (the op model's per-kernel device gap) is not the launch rows: they are
  host-bound (enqueue_per_op_s 10.21 us against per_op_s 10.27 us: the GPU waited on the host),
  so they give host_dispatch_s; the device's own gap is the catalogue's H100 figure
  (zerosim/hardware/gpus.py, kernel_launch_us) and "lacks" says so.

    python bench/h100/record.py [--out PATH]     # writes the profile
    python bench/h100/record.py --count-ops      # the host op counts of zerosim/sim/host_floor.py
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from zerosim.contract import PROFILE_FORMAT, PROFILE_VERSION  # noqa: E402
from zerosim.files import read_json_object, write_text  # noqa: E402
from zerosim.hardware import DEVICES  # noqa: E402

MICROBENCH = "profiles/h100/microbench_2026-11-24.json"
OFFLOAD = "profiles/h100/offload_microbench_2026-11-26.json"
OUT = "profiles/h100_record_2026-11-24.json"
RUNS = "profiles/measurements/h100_2026-11-24"
# The runs' scenario (profiles/measurements/h100_2026-11-24/README.md): the GPT the record's
# memory ops were chosen for.
SCENARIO = "scenarios/megatron_7b5_64gpu.toml"
OVERRIDES = ["training.precision=bf16", "training.activation_checkpointing=none",
             "training.flash_attention=true"]
LACKS = [
    "linear: no nn.Linear rows (bias add, views, autograd's node beyond the GEMMs): "
    "linear_overhead_s from the GEMM rows alone",
    "launch.autograd_node_s: no backward of a chain of tiny ops (the record's 0.0 is a "
    "placeholder, read by nothing)",
    "memory_op norm as nn.LayerNorm (the runs' norm); the file's is F.rms_norm",
    "memory_op gelu", "memory_op embedding (token + learned position)", "memory_op dropout",
    "memory_op rotary as zero_real's _rope (the file's is rotate-half, cos and sin given)",
    "memory_op cross_entropy with zero_real's fp32 upcast (the file's reads bf16 logits)",
    "every memory_op at one size only (no overhead apart from the rate)",
    "attention at head_dim 64 (the 350M's; the file has 128 only) and as Block.attention runs "
    "it (SDPA alone was timed)",
    "optimizer rows of zero_real's ShardAdam (the file's are torch.optim.AdamW): "
    "fit.optimizer is derived from its bytes and the copy row",
    "the device's gap between kernels (the launch rows are host-bound): launch_s is the "
    "catalogue's H100 kernel_launch_us",
    "memory mechanisms on the GPU: fit.memory is measured on this machine's CPU at bf16, layer "
    "norm and flash attention (the same aten ops' outputs; memory_mechanisms())",
    "the per-unit host work of a stage's own hooks (gradient hooks, bucket bookkeeping): "
    "unit_overhead_s is whole units timed alone (profiles/h100/calibrate_gpt1b3_2026-11-24.json)",
]


# zero_real's ShardAdam step under mixed precision (zero_real/parts/optim.py: unscaled_grad,
# then step): bytes each eager kernel reads + writes per element of the shard (fp32 4, bf16 2).
SHARD_ADAM_BYTES = {
    "g = grad.float()": 2 + 4, "g.div_(N x scale)": 4 + 4, "m.mul_(beta1)": 4 + 4,
    "m.add_(g)": 8 + 4, "v.mul_(beta2)": 4 + 4, "v.addcmul_(g, g)": 12 + 4, "v.sqrt()": 4 + 4,
    "/ bias2_sqrt": 4 + 4, ".add_(eps)": 4 + 4, "master.addcdiv_(m, denom)": 12 + 4,
    "param.copy_(master)": 4 + 2}


def optimizer_segments(bench: dict) -> dict:
    """ShardAdam's seconds over shard elements: its bytes at the copy row's rate, its ops'
    dispatch as the intercept (a tiny shard waits on the host)."""
    copy = {r["op"]: r for r in bench["memory_bound"]}["copy"]
    rate = copy["bytes"] / copy["median_s"]
    alpha = len(SHARD_ADAM_BYTES) * host_dispatch_s(bench)[0]
    return {"segments": [{"alpha_s": alpha, "s_per_byte": sum(SHARD_ADAM_BYTES.values()) / rate,
                          "min_bytes": 0, "max_bytes": 2 ** 40}]}


# Not measured by the file (no backward of a chain of tiny ops): a placeholder the schema asks
# for (a number) and the op model does not read (hardware/measured.py); "lacks" says so.
AUTOGRAD_NODE_S = 0.0


def _base(meta: dict, kind: str) -> dict:
    return {"processes": 1, "threads": meta["cpu_threads"], "dtype": "bfloat16",
            "device": "cuda", "kind": kind}


def gemm_rows(bench: dict) -> list[dict]:
    out = []
    for r in bench["gemm"]:
        if "median_s" in r:
            out.append({**_base(bench["meta"], "gemm"), "m": r["M"], "n": r["N"], "k": r["K"],
                        "time_s": r["median_s"], "time_s_max_rank": r["median_s"],
                        "sm_count": bench["meta"]["sm_count"]})
    return out


def launch_rows(bench: dict) -> list[dict]:
    per_op = {r["op"]: r["per_op_s"] for r in bench["launch"]}["add_1elem"]
    return [{**_base(bench["meta"], "launch"), "per_op_s": per_op, "per_op_s_max_rank": per_op,
             "autograd_node_s": AUTOGRAD_NODE_S}]


def host_dispatch_s(bench: dict) -> list[float]:
    """[an aten op, a GEMM]: the launch rows' host-bound seconds per op."""
    per_op = {r["op"]: r["per_op_s"] for r in bench["launch"]}
    return [per_op["add_1elem"], per_op["matmul_64x64"]]


def attention_rows(bench: dict) -> list[dict]:
    rows = {(r["s"], r["pass"]): r for r in bench["attention"]
            if r["backend"] == "default" and r["kv_heads"] == r["heads"] and "median_s" in r}
    out = []
    for (s, p), r in sorted(rows.items()):
        if p != "fwd" or (s, "fwd_bwd") not in rows:
            continue
        backward = rows[s, "fwd_bwd"]["median_s"] - r["median_s"]
        out.append({**_base(bench["meta"], "attention"), "kernel": "flash", "batch": r["b"],
                    "heads": r["heads"], "kv_heads": r["kv_heads"], "seq": s,
                    "head_dim": r["head_dim"], "forward_s": r["median_s"], "backward_s": backward,
                    "forward_s_max_rank": r["median_s"], "backward_s_max_rank": backward})
    return out


# file op -> (record op, tokens, width, backward: "fwd_bwd" | "same" | None)
MEMORY_OPS = {"swiglu": ("swiglu", "fwd_bwd"), "residual_add": ("residual", "same"),
              "copy": ("copy", None)}


def memory_rows(bench: dict) -> list[dict]:
    rows = {(r["op"], r["pass"]): r for r in bench["memory_bound"] if "median_s" in r}
    out = []
    for op, (name, backward) in MEMORY_OPS.items():
        fwd = rows[op, "fwd"]
        shape = fwd["shapes"][0]
        tokens, width = (shape[0], shape[1]) if len(shape) == 2 else (shape[0], 1)
        back = {"fwd_bwd": lambda: rows[op, "fwd_bwd"]["median_s"] - fwd["median_s"],
                "same": lambda: fwd["median_s"], None: lambda: None}[backward]()
        out.append({**_base(bench["meta"], "memory_op"), "op": name, "tokens": tokens,
                    "width": width, "forward_s": fwd["median_s"], "backward_s": back,
                    "forward_s_max_rank": fwd["median_s"], "backward_s_max_rank": back})
    return out


def copy_rows(offload: dict, meta: dict) -> list[dict]:
    out = []
    for kind in ("pinned", "pageable"):
        for r in offload["host_link"].get(kind, []):
            if "median_s" in r:
                out.append({**_base(meta, "copy_host"), "direction": r["direction"].lower(),
                            "pinned": kind == "pinned", "bytes": r["bytes"],
                            "time_s": r["median_s"], "time_s_max_rank": r["median_s"]})
    return out


def raw_rows(bench: dict, offload: dict) -> list[dict]:
    """measurements["ops"] of the record: every row the two files have in calibrate's terms."""
    return (gemm_rows(bench) + launch_rows(bench) + attention_rows(bench) + memory_rows(bench)
            + copy_rows(offload, bench["meta"]))


def provenance(bench: dict, offload: dict) -> dict:
    meta = bench["meta"]
    driver = meta["nvidia_smi"].splitlines()[1].split(", ")[1]
    return {"hardware": f"{meta['name']} x1", "device": "cuda", "gpu": meta["name"],
            "sm_count": meta["sm_count"], "driver": driver, "torch_version": meta["torch"],
            "cuda": meta["cuda"], "date": meta["date_utc"],
            "offload_date": offload["meta"]["date_utc"], "nproc": 1,
            "sources": [MICROBENCH, OFFLOAD], "command": "python bench/h100/record.py",
            "scenario": SCENARIO, "overrides": OVERRIDES,
            "host_dispatch": "host_dispatch_s = the launch rows add_1elem and matmul_64x64 "
                             "(per_op_s), read by zerosim/sim/host_floor.py",
            "optimizer": "derived, not measured: zero_real's ShardAdam moves "
                         f"{sum(SHARD_ADAM_BYTES.values())} bytes per element in "
                         f"{len(SHARD_ADAM_BYTES)} eager kernels (SHARD_ADAM_BYTES in "
                         "bench/h100/record.py) at the copy row's bytes per second",
            "lacks": LACKS}


# Whole units (embedding, block, head) timed alone at the 1.3B shape, micro-batches 1, 2 and 4,
# by the 2026-11-24 campaign's `zero-real calibrate` (bench/h100/campaign.py; its raw output,
# a version-1 profile kept as a measurement: its "compute" rows, microbenchmarks of units, not
# the stages' steps): the per-unit host work no op row holds.
UNITS_FILE = "profiles/h100/calibrate_gpt1b3_2026-11-24.json"
UNITS_SCENARIO = "scenarios/megatron_7b5_64gpu.toml"
UNITS_OVERRIDES = ["training.precision=bf16", "training.activation_checkpointing=none",
                   "training.flash_attention=true", "model.layers=24", "model.hidden=2048",
                   "model.heads=16"]


def build_profile(bench: dict, offload: dict, units: list | None = None) -> dict:
    from zerosim.calibration.fit_memory import fit_memory
    from zerosim.calibration.fit_ops import fit_record
    rows = raw_rows(bench, offload)
    record = fit_record(rows, bench["meta"]["name"])["1"]
    record["host_dispatch_s"] = host_dispatch_s(bench)
    record["launch_s"] = DEVICES["H100-80GB"].op_model.kernel_launch_us * 1e-6
    if units:  # whole units timed alone (calibrate's `compute` rows, not the stages' steps)
        from zerosim.calibration.fit_ops import fit_unit_overhead
        from zerosim.scenario.load import load_scenario
        scenario = load_scenario(ROOT / UNITS_SCENARIO, [*UNITS_OVERRIDES,
                                                        "cluster.gpu='H100-80GB'",
                                                        'cluster.profile=""'])
        record["unit_overhead_s"] = fit_unit_overhead(units, scenario, record)
    mechanisms = memory_mechanisms()
    return {"format": PROFILE_FORMAT, "version": PROFILE_VERSION,
            "provenance": provenance(bench, offload),
            "scenario": {"path": SCENARIO, "overrides": OVERRIDES},
            "measurements": {"ops": rows, "memory_mechanisms": mechanisms},
            "fit": {"record": {"1": record}, "optimizer": {"1": optimizer_segments(bench)},
                    "memory": fit_memory(mechanisms)}}


def memory_mechanisms() -> list[dict]:
    """The memory mechanisms (zero_real/calibration/memory_bench.py) of the runs' configuration:
    bf16, layer norm, flash attention, one process, measured on this machine's CPU, a proxy:
    what autograd saves and what the loss and ShardAdam allocate are the same aten ops' outputs
    on a GPU (the committed microbenchmarks measured none of them; provenance "lacks" says so).
    The rows say device "cpu"."""
    import torch

    from zero_real.calibration.memory_bench import measure_memory
    torch.set_num_threads(1)
    return measure_memory(1, torch.bfloat16, torch.device("cpu"), "layernorm", True)


GEMM_OPS = ("aten.mm.default", "aten.addmm.default", "aten.bmm.default")


def _dispatched(fn, inputs, params) -> tuple[tuple[int, int], tuple[int, int]]:
    """(ops, GEMMs) fn dispatches forward and its backward, aten.detach left out (autograd's view
    of saved tensors), the backward's seed (ones_like) too; gradients bound beforehand, as
    zero_real binds them into its flat buffer (AccumulateGrad then adds in place)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[str(func)] += 1
            return func(*args, **(kwargs or {}))

    for p in params:
        p.grad = torch.zeros_like(p)
    with Count() as forward:
        out = fn(*inputs)
    seed = torch.ones_like(out)
    with Count() as backward:
        torch.autograd.backward(out, seed)
    split = [(sum(n for op, n in c.ops.items() if op not in GEMM_OPS and op != "aten.detach"
                  ".default"), sum(c.ops[op] for op in GEMM_OPS)) for c in (forward, backward)]
    return split[0], split[1]


def count_host_ops() -> dict[str, tuple]:
    """zero_real's pieces one by one, tiny and on CPU (the counts do not depend on the sizes)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    from zero_real.parts.model import _rope, build_model, materialize
    from zerosim.scenario.load import load_scenario
    b, s, h, heads, bf = 1, 16, 64, 4, torch.bfloat16
    scenario = load_scenario(ROOT / SCENARIO, [*OVERRIDES, "model.layers=1", f"model.hidden={h}",
                                               f"model.heads={heads}", f"model.max_seq_len={s}",
                                               f"training.seq_len={s}"])
    model = materialize(build_model(scenario.model, flash=True), 0, bf)
    block = model.blocks[0]

    def leaf(*shape):
        return torch.randn(*shape, dtype=bf, requires_grad=True)

    def attention(qkv):  # Block.attention between its two linears
        parts = [t.view(b, s, heads, h // heads).transpose(1, 2) for t in qkv.split([h] * 3, -1)]
        with torch.nn.attention.sdpa_kernel(block.attention_kernels):
            out = F.scaled_dot_product_attention(*parts, is_causal=True)
        return out.transpose(1, 2).reshape(b, s, h)

    lin, lin_bias, norm, rms = (nn.Linear(h, h, bias=False), nn.Linear(h, h), nn.LayerNorm(h),
                                nn.RMSNorm(h))
    targets = torch.randint(0, 100, (b, s))
    cases = {
        "linear": (lin.to(bf), [leaf(b, s, h)], list(lin.parameters())),
        "linear+bias": (lin_bias.to(bf), [leaf(b, s, h)], list(lin_bias.parameters())),
        "layernorm+bias": (norm.to(bf), [leaf(b, s, h)], list(norm.parameters())),
        "rmsnorm": (rms.to(bf), [leaf(b, s, h)], list(rms.parameters())),
        "gelu": (F.gelu, [leaf(b, s, h)], []),
        "swiglu": (lambda a, c: F.silu(a) * c, [leaf(b, s, h), leaf(b, s, h)], []),
        "dropout": (lambda x: F.dropout(x, 0.1, True), [leaf(b, s, h)], []),
        "rotary (one)": (_rope, [leaf(b, heads, s, h // heads)], []),
        "attention": (attention, [leaf(b, s, 3 * h)], []),
        "embedding+pos": (model.embedding, [torch.randint(0, 100, (b, s))],
                          list(model.embedding.parameters())),
        "cross_entropy": (lambda z: F.cross_entropy(z.float().flatten(0, 1), targets.flatten()),
                          [leaf(b, s, 100)], []),
        "block": (block, [leaf(b, s, h)], list(block.parameters())),
    }
    return {name: _dispatched(*case) for name, case in cases.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--count-ops", action="store_true", help="print the host op counts")
    args = ap.parse_args(argv)
    if args.count_ops:
        for name, (forward, backward) in count_host_ops().items():
            print(f"{name:14s} forward {forward}  backward {backward}  (ops, GEMMs)")
        return 0
    bench = read_json_object(ROOT / MICROBENCH, "microbenchmark")
    offload = read_json_object(ROOT / OFFLOAD, "microbenchmark")
    units = read_json_object(ROOT / UNITS_FILE, "measurements")["measurements"]["compute"]
    write_text(ROOT / args.out, json.dumps(build_profile(bench, offload, units), indent=1) + "\n",
               "profile")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
