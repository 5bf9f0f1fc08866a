"""Kernel-level constants for a per-operation compute model of transformer training.

Standalone (torch and the standard library only, not zerosim) so that it runs on a bare GPU
machine: bf16 GEMMs of transformer linears (forward, input-gradient, weight-gradient) and
square MAMF-style sizes, causal SDPA forward and forward+backward per backend, memory-bound
ops (achieved bytes/s under a stated byte convention), AdamW steps (time, ns/element, the
extra memory a step allocates), kernel-launch overhead, and a description of the device.
Each measurement: warm-up, then median and min over 10-20 timed iterations (CUDA events on
a GPU, perf_counter on CPU). One failure is recorded as an "error" and never loses the rest;
the JSON is rewritten after every section, so a timeout still leaves data.

    python bench/h100/microbench.py --out FILE.json [--smoke] [--sections gemm,attention]

--smoke: tiny sizes and few iterations; runs on CPU in seconds (to test this script).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial

import torch
import torch.nn.functional as F

BF16 = 2  # bytes per bf16 element


def linears(h: int, qkv: int, ffn: int) -> dict:
    """(K, N) of a layer's linears: K inputs, N outputs; up and gate fused as one GEMM."""
    return {"qkv": (h, qkv), "out": (h, h), "up_gate": (h, 2 * ffn), "down": (ffn, h)}


# Published configs (HF config.json of each): Llama-2-7B hidden 4096, ffn 11008, MHA;
# Llama-3-8B hidden 4096, ffn 14336, 8 kv heads of 128; Llama-2-13B hidden 5120, ffn 13824,
# MHA; Llama-2/3-70B hidden 8192, ffn 28672, 8 kv heads of 128 (qkv = 8192 + 2*8*128).
MODELS = {
    "llama2-7b": linears(4096, 3 * 4096, 11008),
    "llama3-8b": linears(4096, 4096 + 2 * 8 * 128, 14336),
    "llama2-13b": linears(5120, 3 * 5120, 13824),
    "llama-70b": linears(8192, 8192 + 2 * 8 * 128, 28672),
}
FULL = {"tokens": (2048, 8192, 16384), "models": MODELS,
        "squares": (1024, 2048, 4096, 8192, 16384), "attn_seqs": (512, 1024, 2048, 4096, 8192),
        "attn_tokens": 16384, "heads": 32, "kv_heads": 8, "head_dim": 128, "mb_tokens": 16384,
        "hidden": 4096, "ffn": 14336, "vocab": 128256, "copy_bytes": 1 << 30, "opt_tensors": 8,
        "opt_numel": 125_000_000, "launch_ops": 2000, "warmup": 3, "min_iters": 10,
        "max_iters": 20, "target_s": 0.2}
SMOKE = {"tokens": (32, 64), "models": {"tiny": linears(64, 192, 128)}, "squares": (64, 128),
         "attn_seqs": (16, 32), "attn_tokens": 64, "heads": 4, "kv_heads": 2, "head_dim": 16,
         "mb_tokens": 64, "hidden": 64, "ffn": 128, "vocab": 1000, "copy_bytes": 1 << 20,
         "opt_tensors": 2, "opt_numel": 1000, "launch_ops": 200, "warmup": 1, "min_iters": 2,
         "max_iters": 3, "target_s": 0.01}


@dataclass
class Ctx:
    dev: torch.device
    cfg: dict
    cuda: bool
    results: dict = field(default_factory=dict)


def _sync(ctx: Ctx) -> None:
    if ctx.cuda:
        torch.cuda.synchronize(ctx.dev)


def _free(ctx: Ctx) -> None:
    if ctx.cuda:
        torch.cuda.empty_cache()


def _stamp(ctx: Ctx):
    """A CUDA event recorded on the stream (device time), or perf_counter on CPU."""
    if not ctx.cuda:
        return time.perf_counter()
    ev = torch.cuda.Event(enable_timing=True)
    ev.record()
    return ev


def time_fn(fn, ctx: Ctx) -> dict:
    """Median and min seconds of fn() after warm-up; iteration count sized to ~target_s."""
    c = ctx.cfg
    t0 = time.perf_counter()
    for _ in range(c["warmup"]):
        fn()
    _sync(ctx)
    est = (time.perf_counter() - t0) / c["warmup"]
    n = int(min(c["max_iters"], max(c["min_iters"], c["target_s"] / max(est, 1e-9))))
    stamps = []
    for _ in range(n):
        stamps.append(_stamp(ctx))
        fn()
        stamps.append(_stamp(ctx))
    _sync(ctx)
    pairs = zip(stamps[::2], stamps[1::2])
    times = [a.elapsed_time(b) / 1e3 if ctx.cuda else b - a for a, b in pairs]
    return {"median_s": statistics.median(times), "min_s": min(times), "iters": n}


def measure(ctx: Ctx, section: str, label: dict, run) -> None:
    """run() -> dict; any exception becomes an 'error' record instead of losing the rest."""
    try:
        rec = run()
    except Exception as exc:  # noqa: BLE001 - one failure must not lose the others
        rec = {"error": f"{type(exc).__name__}: {exc}"[:600]}
    _free(ctx)  # after the except block: the traceback no longer pins tensors
    ctx.results[section].append({**label, **rec})
    figs = [f"{k}={rec[k]:.4g}" for k in ("median_s", "tflops", "GBps", "per_op_s",
                                             "ns_per_element") if isinstance(rec.get(k), float)]
    tail = rec.get("error") or rec.get("skipped") or " ".join(figs)
    print(f"[{section}] " + " ".join(f"{k}={v}" for k, v in label.items()) + f" | {tail}",
          flush=True)


def _rates(r: dict, flops: int) -> dict:
    return {"flops": flops, "tflops": flops / r["median_s"] / 1e12,
            "tflops_best": flops / r["min_s"] / 1e12}


def _bf(ctx: Ctx, *shape: int, grad: bool = False) -> torch.Tensor:
    return torch.randn(*shape, device=ctx.dev, dtype=torch.bfloat16, requires_grad=grad)


def _gemm_case(ctx: Ctx, a_spec: tuple, b_spec: tuple) -> dict:
    """a @ b, each operand (shape, transposed): a transposed view as autograd passes it."""
    a, b = ((_bf(ctx, *s).t() if tr else _bf(ctx, *s)) for s, tr in (a_spec, b_spec))
    (m, k), n = a.shape, b.shape[1]
    r = time_fn(lambda: torch.matmul(a, b), ctx)
    return {"M": m, "N": n, "K": k, "a_t": a_spec[1], "b_t": b_spec[1], **r,
            **_rates(r, 2 * m * n * k)}


def gemm_section(ctx: Ctx) -> None:
    """The three GEMMs of y = x @ w.t() (nn.Linear: w is (N, K)), then square sizes."""
    c = ctx.cfg
    for model, layers in c["models"].items():
        for layer, (k, n) in layers.items():
            for t in c["tokens"]:
                passes = {"fwd": (((t, k), False), ((n, k), True)),      # x @ w.t()
                          "dgrad": (((t, n), False), ((n, k), False)),   # dy @ w
                          "wgrad": (((t, n), True), ((t, k), False))}    # dy.t() @ x
                for p, (a, b) in passes.items():
                    label = {"model": model, "layer": layer, "T": t, "pass": p}
                    measure(ctx, "gemm", label, partial(_gemm_case, ctx, a, b))
    for s in c["squares"]:
        label = {"model": "square", "layer": f"{s}^3", "T": s, "pass": "fwd"}
        measure(ctx, "gemm", label, partial(_gemm_case, ctx, ((s, s), False), ((s, s), False)))


def _sdpa_backend(name: str):
    if name == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION,
                        "cudnn": SDPBackend.CUDNN_ATTENTION}[name])


def _aten_ops(fn) -> list | str:
    """The attention aten ops one call dispatches to (names which backend ran)."""
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        return sorted({e.name for e in prof.events() if "attention" in e.name
                       and e.name != "aten::scaled_dot_product_attention"})
    except Exception as exc:  # noqa: BLE001 - the name is optional
        return f"unknown ({type(exc).__name__})"


def _attn_case(ctx: Ctx, b: int, s: int, kvh: int, backend: str, grad: bool) -> dict:
    h, d = ctx.cfg["heads"], ctx.cfg["head_dim"]
    if backend != "default" and not ctx.cuda:
        return {"skipped": "forcing an SDPA backend needs CUDA"}
    q = _bf(ctx, b, h, s, d, grad=grad)
    k, v = (_bf(ctx, b, kvh, s, d, grad=grad) for _ in range(2))
    kw = {"is_causal": True, **({"enable_gqa": True} if kvh != h else {})}
    dout = torch.randn_like(q)

    def fwd():
        return F.scaled_dot_product_attention(q, k, v, **kw)

    fn = (lambda: torch.autograd.grad(fwd(), (q, k, v), dout)) if grad else fwd
    with _sdpa_backend(backend):
        r = time_fn(fn, ctx)
        ops = _aten_ops(fn) if backend == "default" else None
    # Causal FLOPs as FlashAttention-2 (arXiv 2307.08691 sec. 4.1): fwd 4*b*h*s^2*d / 2,
    # bwd 2.5 x fwd.
    fwd_flops = 4 * b * h * s * s * d // 2
    return {**r, **_rates(r, int(fwd_flops * (3.5 if grad else 1))), "aten_ops": ops}


def attention_section(ctx: Ctx) -> None:
    c = ctx.cfg
    for s in c["attn_seqs"]:
        b = max(1, c["attn_tokens"] // s)
        for kvh in (c["heads"], c["kv_heads"]):
            for backend in ("default", "flash", "cudnn"):
                for grad in (False, True):
                    label = {"s": s, "b": b, "heads": c["heads"], "kv_heads": kvh,
                             "head_dim": c["head_dim"], "backend": backend,
                             "pass": "fwd_bwd" if grad else "fwd"}
                    measure(ctx, "attention", label,
                            partial(_attn_case, ctx, b, s, kvh, backend, grad))


def _rope(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def _mb_case(ctx: Ctx, shapes: list, factory, grad: bool, nbytes: int, formula: str) -> dict:
    op = factory()
    xs = [_bf(ctx, *s, grad=grad) for s in shapes]
    fn = lambda: op(*xs)
    if grad:
        dout = torch.randn_like(fn().detach())
        fn = lambda: torch.autograd.grad(op(*xs), xs, dout)
    r = time_fn(fn, ctx)
    return {"bytes": nbytes, "bytes_formula": formula, **r,
            "GBps": nbytes / r["median_s"] / 1e9, "GBps_best": nbytes / r["min_s"] / 1e9}


def memory_section(ctx: Ctx) -> None:
    """Effective bandwidth: the minimum bytes an op must move (formula stored) / time."""
    c, e = ctx.cfg, BF16
    t, h, f, v, d = c["mb_tokens"], c["hidden"], c["ffn"], c["vocab"], c["head_dim"]
    n = t // 4  # cross-entropy tokens

    def rope_op():
        cos, sin = (_bf(ctx, t, 1, d) for _ in range(2))
        return lambda x: _rope(x, cos, sin)

    def ce_op():
        tgt = torch.randint(0, v, (n,), device=ctx.dev)
        return lambda z: F.cross_entropy(z, tgt)

    cases = [  # op, input shapes, op factory, bytes fwd, bytes fwd+bwd (None: fwd only), rule
        ("rms_norm", [(t, h), (h,)], lambda: lambda x, w: F.rms_norm(x, (h,), w, 1e-5),
         2 * t * h * e, 5 * t * h * e, ("fwd 2*T*H*2 (x in, y out); fwd_bwd 5*T*H*2 "
                                        "(+ x, dy in, dx out); weight vectors ignored")),
        ("swiglu", [(t, f)] * 2, lambda: lambda a, b: F.silu(a) * b, 3 * t * f * e, 8 * t * f * e,
         "fwd 3*T*F*2 (a, b in, y out); fwd_bwd 8*T*F*2 (+ a, b, dy in; da, db out)"),
        ("residual_add", [(t, h)] * 2, lambda: torch.add, 3 * t * h * e, None,
         "3*T*H*2 (x, y in, z out)"),
        ("rotary", [(t, h // d, d)], rope_op, 2 * t * h * e + 2 * t * d * e,
         4 * t * h * e + 4 * t * d * e, ("fwd 2*T*H*2 + 2*T*d*2 (x in, y out, cos, sin in); "
                                         "fwd_bwd twice that (+ dy in, dx out, cos, sin in)")),
        ("cross_entropy", [(n, v)], ce_op, n * v * e, 3 * n * v * e,
         "fwd N*V*2 (logits in); fwd_bwd 3*N*V*2 (+ logits in, dlogits out); N = T/4, mean"),
        ("copy", [(c["copy_bytes"] // e,)], lambda: torch.clone, 2 * c["copy_bytes"], None,
         "2*bytes (read + write), clone"),
    ]
    for op, shapes, factory, b_fwd, b_both, formula in cases:
        for grad, nbytes in ((False, b_fwd), (True, b_both)):
            if nbytes is not None:
                label = {"op": op, "pass": "fwd_bwd" if grad else "fwd", "shapes": shapes}
                measure(ctx, "memory_bound", label,
                        partial(_mb_case, ctx, shapes, factory, grad, nbytes, formula))


def _adam_case(ctx: Ctx, variant: str) -> dict:
    c = ctx.cfg
    ps = [torch.randn(c["opt_numel"], device=ctx.dev, requires_grad=True)
          for _ in range(c["opt_tensors"])]
    for p in ps:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(ps, lr=1e-4, **{variant: True})
    before = torch.cuda.memory_allocated(ctx.dev) if ctx.cuda else 0
    opt.step()  # the first step allocates exp_avg and exp_avg_sq
    _sync(ctx)
    state = torch.cuda.memory_allocated(ctx.dev) - before if ctx.cuda else None
    r = time_fn(opt.step, ctx)
    peak = None
    if ctx.cuda:
        torch.cuda.reset_peak_memory_stats(ctx.dev)
        base = torch.cuda.memory_allocated(ctx.dev)
        opt.step()
        _sync(ctx)
        peak = torch.cuda.max_memory_allocated(ctx.dev) - base
    numel = c["opt_tensors"] * c["opt_numel"]
    return {"numel": numel, **r, "ns_per_element": r["median_s"] / numel * 1e9,
            "state_bytes": state, "peak_extra_bytes": peak}


def optimizer_section(ctx: Ctx) -> None:
    c = ctx.cfg
    for variant in ("foreach", "fused"):
        label = {"optimizer": "AdamW", "variant": variant, "dtype": "float32",
                 "tensors": c["opt_tensors"], "numel_each": c["opt_numel"]}
        measure(ctx, "optimizer", label, partial(_adam_case, ctx, variant))


def _launch_case(ctx: Ctx, fn, n: int) -> dict:
    total, enqueue = [], []
    for i in range(6):  # run 0 is warm-up
        _sync(ctx)
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        _sync(ctx)
        if i:
            total.append(time.perf_counter() - t0)
            enqueue.append(t1 - t0)
    return {"per_op_s": statistics.median(total) / n, "per_op_min_s": min(total) / n,
            "enqueue_per_op_s": statistics.median(enqueue) / n, "runs": len(total)}


def launch_section(ctx: Ctx) -> None:
    n = ctx.cfg["launch_ops"]
    x = torch.zeros(1, device=ctx.dev)
    a = _bf(ctx, 64, 64)
    for op, fn in (("add_1elem", lambda: x.add_(1)), ("matmul_64x64", lambda: a @ a)):
        measure(ctx, "launch", {"op": op, "ops": n}, partial(_launch_case, ctx, fn, n))


def _nvidia_smi() -> str | None:
    q = ("name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,"
         "power.draw,power.limit,temperature.gpu,persistence_mode")
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv"],
                             capture_output=True, text=True, timeout=20, check=True)
        return out.stdout.strip()
    except Exception as exc:  # noqa: BLE001 - optional
        return f"unavailable ({type(exc).__name__})"


def meta_info(ctx: Ctx, smoke: bool) -> dict:
    m = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": str(ctx.dev),
         "python": platform.python_version(), "smoke": smoke, "cfg": {
             k: v for k, v in ctx.cfg.items() if k != "models"}, "models": ctx.cfg["models"],
         "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
         "cpu_threads": torch.get_num_threads(), "host_cpus": os.cpu_count()}
    if ctx.cuda:
        p = torch.cuda.get_device_properties(ctx.dev)
        be = torch.backends.cuda
        m.update(name=p.name, sm_count=p.multi_processor_count, total_memory=p.total_memory,
                 capability=f"{p.major}.{p.minor}", l2_bytes=getattr(p, "L2_cache_size", None),
                 cudnn=torch.backends.cudnn.version(), nvidia_smi=_nvidia_smi(),
                 allow_tf32=be.matmul.allow_tf32,
                 bf16_reduced_reduction=be.matmul.allow_bf16_reduced_precision_reduction,
                 sdp_enabled={"flash": be.flash_sdp_enabled(),
                              "mem_efficient": be.mem_efficient_sdp_enabled(),
                              "math": be.math_sdp_enabled(),
                              "cudnn": getattr(be, "cudnn_sdp_enabled", lambda: None)()})
    return m


SECTIONS = {"launch": launch_section, "gemm": gemm_section, "attention": attention_section,
            "memory_bound": memory_section, "optimizer": optimizer_section}


def _write(path: str, results: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(results, fh, indent=1, default=str)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (CPU test)")
    ap.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated subset")
    args = ap.parse_args(argv)
    names = [s for s in args.sections.split(",") if s]
    if bad := [s for s in names if s not in SECTIONS]:
        ap.error(f"unknown sections {bad}; choose from {list(SECTIONS)}")
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cpu" and not args.smoke:
        print("warning: no CUDA device; full sizes on CPU will be very slow", file=sys.stderr)
    ctx = Ctx(dev, SMOKE if args.smoke else FULL, dev.type == "cuda")
    torch.manual_seed(0)
    start = time.perf_counter()
    try:
        meta = meta_info(ctx, args.smoke)
    except Exception as exc:  # noqa: BLE001 - the measurements matter more
        meta = {"error": f"{type(exc).__name__}: {exc}", "torch": torch.__version__}
    ctx.results.update(meta=meta, elapsed_s={})
    _write(args.out, ctx.results)
    for name in names:
        t0 = time.perf_counter()
        ctx.results[name] = []
        try:
            SECTIONS[name](ctx)
        except Exception as exc:  # noqa: BLE001 - keep the other sections
            ctx.results[f"{name}_error"] = f"{type(exc).__name__}: {exc}"[:600]
        _free(ctx)
        ctx.results["elapsed_s"][name] = round(time.perf_counter() - t0, 2)
        print(f"== {name}: {ctx.results['elapsed_s'][name]:.1f} s", flush=True)
        _write(args.out, ctx.results)
    if ctx.cuda:
        ctx.results["meta"]["nvidia_smi_end"] = _nvidia_smi()
    ctx.results["elapsed_s"]["total"] = round(time.perf_counter() - start, 2)
    _write(args.out, ctx.results)
    print(f"== total: {ctx.results['elapsed_s']['total']:.1f} s -> {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
