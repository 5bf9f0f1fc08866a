"""Constants for a model of ZeRO-Offload: host link, CPU Adam, GPU INT8 block quantization.

host_link: pinned H2D and D2H (non_blocking, side stream) 8 MiB-1 GiB, 2 GiB while time allows;
pageable 64 MiB and 1 GiB; bidirectional (two streams) 256 MiB and 1 GiB; the GPU's PCIe link.
cpu_adam: elements/s of torch.optim.Adam step() on 2**26 fp32 CPU elements per implementation
(fused, foreach, for-loop) and thread count (16..1), AdamW fused; host copy_ GB/s.
gpu_quantize: ZeRO++ qwZ-style symmetric INT8 quantization of 2**28 bf16 elements in groups of
2048 (scale = absmax/127) and back, eager ops, no torch.compile; a bf16 device copy beside it.
Medians after warm-ups (CUDA events, device synchronised around each repeat; perf_counter on
CPU); GB/s = 1e9 B/s of the byte rule stored beside it. Microbenchmarks, used as model
constants, not end-to-end training figures. Standalone: torch and the standard library only.

    python bench/h100/offload_microbench.py --out profiles/h100/offload_microbench_<date>.json

--out defaults to $OUT/offload_microbench.json. --quick: small sizes (a CPU test); without CUDA
the GPU sections are recorded as skipped, as are cases after --budget-s (default 140 s); a
failure is recorded as {"error": ...} and the rest runs on. The JSON is rewritten after each
section; progress goes to stderr, a summary table to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

MIB, GIB = 1 << 20, 1 << 30
GROUP, WARMUP = 2048, 2  # the qwZ quantization group (elements); warm-up calls per timing
ADAM_BYTES = 28  # fp32 Adam: read param, grad, exp_avg, exp_avg_sq (16 B); write three (12 B)
FULL = {"pinned": (8 * MIB, 64 * MIB, 256 * MIB, GIB), "optional": (2 * GIB,), "link_reps": 5,
        "pageable": (64 * MIB, GIB), "bidir": (256 * MIB, GIB), "adam_numel": 1 << 26,
        "adam_steps": 3, "copy_numel": 1 << 27, "quant_numel": 1 << 28, "quant_reps": 10}
QUICK = {**FULL, "pinned": (MIB, 4 * MIB), "optional": (8 * MIB,), "pageable": (4 * MIB,),
         "bidir": (4 * MIB,), "adam_numel": 1 << 20, "copy_numel": 1 << 22, "quant_numel": 1 << 20}
ADAM_IMPLS = {"fused": {"fused": True}, "foreach": {"foreach": True},
              "for_loop": {"foreach": False}}


class Run:
    def __init__(self, cfg: dict, cuda: bool, budget_s: float):
        self.cfg, self.cuda, self.budget_s = cfg, cuda, budget_s
        self.start, self.rows = time.perf_counter(), []

    def over(self, fraction: float = 1.0) -> bool:
        return time.perf_counter() - self.start > fraction * self.budget_s

    def note(self, section: str, what: str, rec: dict, fmt) -> None:
        fig = rec.get("error") or rec.get("skipped") or fmt(rec)
        self.rows.append((section, what, fig))
        print(f"[offload_microbench {time.perf_counter() - self.start:6.1f} s] {section} {what}:"
              f" {fig}", file=sys.stderr, flush=True)


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def guard(fn) -> dict:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - one failure must not lose the others
        return {"error": f"{type(exc).__name__}: {exc}"[:600]}


def timed(fn, cuda: bool, reps: int, warmup: int = WARMUP, nbytes: int | None = None) -> dict:
    """Median and min seconds of fn() over `reps` after `warmup` calls (and GB/s of nbytes).
    CUDA: events on the current stream, the device synchronised around each repeat."""
    dev, wall = [], []
    for i in range(warmup + reps):
        if cuda:
            start, end = (torch.cuda.Event(enable_timing=True) for _ in "se")
            torch.cuda.synchronize()
            start.record()
        t0 = time.perf_counter()
        fn()
        if cuda:
            end.record()
            end.synchronize()
        wall.append(time.perf_counter() - t0)
        dev.append(start.elapsed_time(end) / 1e3 if cuda else wall[-1])
    dev, wall = dev[warmup:], wall[warmup:]
    r = {"median_s": statistics.median(dev), "min_s": min(dev), "reps": reps}
    r.update({"wall_median_s": statistics.median(wall)} if cuda else {})
    if nbytes:
        r.update(bytes=nbytes, GBps=nbytes / r["median_s"] / 1e9, GBps_best=nbytes / min(dev) / 1e9)
    return r


def pci_link() -> dict:
    """The GPU's PCIe link from sysfs, by torch's PCI ids (absent from some torch versions)."""
    p = torch.cuda.get_device_properties(0)
    ids = [getattr(p, k, None) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if None in ids:
        return {"pci_addr": None, "note": "torch gives no PCI ids"}
    addr = f"{ids[0]:04x}:{ids[1]:02x}:{ids[2]:02x}.0"
    keys = [f"{a}_link_{b}" for a in ("current", "max") for b in ("speed", "width")] + ["numa_node"]
    return {"pci_addr": addr, **{k: _read(f"/sys/bus/pci/devices/{addr}/{k}") for k in keys}}


def _bidir_case(run: Run, bufs: tuple, n: int) -> dict:
    """H2D and D2H on two streams released by one event; times from that event."""
    host_a, dev_a, host_b, dev_b = bufs
    s_in, s_out, times = torch.cuda.Stream(), torch.cuda.Stream(), []
    for i in range(WARMUP + run.cfg["link_reps"]):
        e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        torch.cuda.synchronize()
        e0.record(s_in)
        s_out.wait_event(e0)
        with torch.cuda.stream(s_in):
            dev_a[:n].copy_(host_a[:n], non_blocking=True)
        with torch.cuda.stream(s_out):
            host_b[:n].copy_(dev_b[:n], non_blocking=True)
        e1.record(s_in)
        e2.record(s_out)
        torch.cuda.synchronize()
        if i >= WARMUP:
            times.append((e0.elapsed_time(e1) / 1e3, e0.elapsed_time(e2) / 1e3))
    t_in, t_out = (statistics.median(t) for t in zip(*times))
    t_all = statistics.median(max(t) for t in times)
    return {"bytes_each_way": n, "reps": len(times), "h2d_s": t_in, "d2h_s": t_out,
            "total_s": t_all, "h2d_GBps": n / t_in / 1e9, "d2h_GBps": n / t_out / 1e9,
            "sum_GBps": 2 * n / t_all / 1e9}


def host_link_section(run: Run) -> dict:
    if not run.cuda:
        return {"skipped": "no CUDA device"}
    c, out = run.cfg, {"pinned": [], "pageable": [], "bidirectional": [], "note": "GB = 1e9 B"}
    top = max(c["pinned"] + c["optional"] + c["bidir"])
    host = torch.empty(top, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(top, dtype=torch.uint8, device="cuda")
    pageable = torch.ones(max(c["pageable"]), dtype=torch.uint8)  # pages touched
    plan = [("pinned", n, host, n in c["optional"]) for n in c["pinned"] + c["optional"]]
    with torch.cuda.stream(torch.cuda.Stream()):
        for kind, n, buf, optional in plan + [("pageable", n, pageable, 0) for n in c["pageable"]]:
            for d, (dst, src) in (("H2D", (dev, buf)), ("D2H", (buf, dev))):
                rec = ({"skipped": "time budget"} if optional and run.over(0.25) else
                       guard(lambda: timed(lambda: dst[:n].copy_(src[:n], non_blocking=True),
                                           True, c["link_reps"], nbytes=n)))
                out[kind].append({"direction": d, "bytes": n, **rec})
                run.note("host_link", f"{kind} {d} {n / MIB:g} MiB", rec,
                         lambda r: f"{r['GBps']:.2f} GB/s")
            if kind == "pinned" and n == max(c["pinned"]):  # the link just after a load
                out["pcie_after_load"] = guard(pci_link)
    del pageable
    bb = max(c["bidir"])
    bufs = (host, dev, torch.empty(bb, dtype=torch.uint8, pin_memory=True),
            torch.empty(bb, dtype=torch.uint8, device="cuda"))
    for n in c["bidir"]:
        rec = guard(lambda: _bidir_case(run, bufs, n))
        out["bidirectional"].append({"bytes": n, **rec})
        run.note("host_link", f"bidir {n / MIB:g} MiB, h2d + d2h -> sum", rec, lambda r: (
            f"{r['h2d_GBps']:.2f} + {r['d2h_GBps']:.2f} -> {r['sum_GBps']:.2f} GB/s"))
    return out


def _adam_case(run: Run, param: torch.nn.Parameter, name: str, impl: str, threads: int) -> dict:
    torch.set_num_threads(threads)
    opt = getattr(torch.optim, name)([param], lr=1e-3, **ADAM_IMPLS[impl])
    r = timed(opt.step, False, run.cfg["adam_steps"], warmup=1)  # warm-up allocates the state
    n = param.numel()
    return {**r, "elements_per_s": n / r["median_s"],
            "elements_per_s_per_thread": n / r["median_s"] / threads,
            "GBps_min_traffic": ADAM_BYTES * n / r["median_s"] / 1e9}


def cpu_adam_section(run: Run) -> dict:
    """Most threads first, so that a spent time budget loses the least useful cases."""
    n, avail, default = run.cfg["adam_numel"], len(os.sched_getaffinity(0)), torch.get_num_threads()
    threads = sorted({min(t, avail) for t in (1, 2, 4, 8, 16)}, reverse=True)
    out = {"numel": n, "dtype": "float32", "threads": threads, "lr": 1e-3,
           "min_traffic_rule": f"{ADAM_BYTES} B/element (read p, g, m, v; write p, m, v)",
           "host_copy": [], "host_copy_bytes_rule": "2 * 4 * numel", "runs": []}
    cases = [("Adam", impl, t) for t in threads for impl in ADAM_IMPLS]
    cases.insert(len(ADAM_IMPLS), ("AdamW", "fused", threads[0]))
    try:
        for t in dict.fromkeys((threads[0], 1)):  # host memory bandwidth, read + write
            torch.set_num_threads(t)
            src, dst = torch.ones(run.cfg["copy_numel"]), torch.zeros(run.cfg["copy_numel"])
            rec = guard(lambda: timed(lambda: dst.copy_(src), False, 5, 1, nbytes=8 * src.numel()))
            out["host_copy"].append({"numel": src.numel(), "threads": t, **rec})
            run.note("cpu_adam", f"host fp32 copy_, {t} threads", rec,
                     lambda r: f"{r['GBps']:.1f} GB/s")
        torch.set_num_threads(threads[0])
        param = torch.nn.Parameter(torch.randn(n))
        param.grad = torch.randn(n).mul_(1e-3)
        for name, impl, t in cases:
            rec = ({"skipped": "time budget"} if run.over() else
                   guard(lambda: _adam_case(run, param, name, impl, t)))
            out["runs"].append({"optimizer": name, "impl": impl, "threads": t, **rec})
            run.note("cpu_adam", f"{name} {impl}, {t} threads", rec, lambda r: (
                f"{r['elements_per_s'] / 1e6:.0f} M elem/s "
                f"({r['elements_per_s_per_thread'] / 1e6:.0f} per thread)"))
    finally:
        torch.set_num_threads(default)
    return out


def quantize(x: torch.Tensor, group: int = GROUP) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric INT8 per group: scale = absmax/127 (fp32), q = clamp(round(x/scale))."""
    g = x.view(-1, group)
    scale = g.abs().amax(dim=1, keepdim=True).float().div_(127.0).clamp_min_(1e-12)
    return g.float().div_(scale).round_().clamp_(-127, 127).to(torch.int8), scale


def dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.float().mul_(scale).to(torch.bfloat16).view(-1)


def gpu_quantize_section(run: Run, device: str = "cuda") -> dict:
    if not run.cuda and device == "cuda":
        return {"skipped": "no CUDA device"}
    n, reps, cuda = run.cfg["quant_numel"], run.cfg["quant_reps"], device == "cuda"
    x = torch.randn(n, device=device, dtype=torch.bfloat16)
    q, scale = quantize(x)
    err = ((dequantize(q, scale).float() - x.float()).view(-1, GROUP).abs() / scale).max()
    sb, dst = scale.numel() * scale.element_size(), torch.empty_like(x)
    cases = {"quantize": (lambda: quantize(x), 3 * n + sb, "read 2n + write n + scales 4n/2048"),
             "dequantize": (lambda: dequantize(q, scale), 3 * n + sb,
                            "read n + scales 4n/2048 + write 2n"),
             "bf16_copy": (lambda: dst.copy_(x), 4 * n, "read 2n + write 2n (HBM reference)")}
    out = {"numel": n, "group": GROUP, "compiled": False, "max_abs_err_over_scale": err.item(),
           "ops": "quantize(), dequantize() in this file, eager; fp32 scales, one per group"}
    for name, (fn, nbytes, rule) in cases.items():
        out[name] = {"bytes_rule": rule, **guard(lambda: timed(fn, cuda, reps, nbytes=nbytes))}
        run.note("gpu_quantize", f"{name} {n / MIB:g} Mi elements", out[name],
                 lambda r: f"{r['median_s'] * 1e3:.3f} ms, {r['GBps']:.0f} GB/s")
    return out


def meta(run: Run, args: argparse.Namespace) -> dict:
    cpuinfo = (_read("/proc/cpuinfo") or "").splitlines()
    nodes = sorted(Path("/sys/devices/system/node").glob("node[0-9]*"))
    m = {"quick": args.quick, "budget_s": args.budget_s, "cfg": run.cfg,
         "torch": torch.__version__, "cuda_runtime": torch.version.cuda,
         "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
         "cpu_model": next((ln.split(":", 1)[1].strip() for ln in cpuinfo
                            if ln.startswith("model name")), None),
         "cpu_count": os.cpu_count(), "cpus_available": len(os.sched_getaffinity(0)),
         "cpu_capability": torch.backends.cpu.get_cpu_capability(),
         "torch_threads_default": torch.get_num_threads(),
         "numa_nodes": {p.name: _read(p / "cpulist") for p in nodes} or None,
         "gpu": {"skipped": "no CUDA device"}}
    if run.cuda:
        p = torch.cuda.get_device_properties(0)
        driver = (_read("/proc/driver/nvidia/version") or "").split("\n")[0]
        m["gpu"] = {"name": p.name, "total_memory": p.total_memory, "capability":
                    f"{p.major}.{p.minor}", "sm_count": p.multi_processor_count,
                    "cuda_driver_api": guard(lambda: {"v": torch._C._cuda_getDriverVersion()}),
                    "driver": driver or None, "pcie": guard(pci_link)}
    return m


SECTIONS = {"host_link": host_link_section, "gpu_quantize": gpu_quantize_section,
            "cpu_adam": cpu_adam_section}


def main(argv: list[str] | None = None) -> int:
    env_out = os.environ.get("OUT")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(env_out, "offload_microbench.json")
                    if env_out else None, help="JSON file (default $OUT/offload_microbench.json)")
    ap.add_argument("--quick", action="store_true", help="small sizes (a CPU test)")
    ap.add_argument("--budget-s", type=float, default=140.0, help="skip cases after this")
    ap.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated subset")
    args = ap.parse_args(argv)
    if not args.out:
        ap.error("--out is required when $OUT is not set")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    run = Run(QUICK if args.quick else FULL, torch.cuda.is_available(), args.budget_s)
    torch.manual_seed(0)
    results = {"meta": guard(lambda: meta(run, args)), "elapsed_s": {}}
    for name in args.sections.split(","):
        t0 = time.perf_counter()
        results[name] = guard(lambda: SECTIONS[name](run))
        if run.cuda:
            torch.cuda.empty_cache()
        results["elapsed_s"][name] = round(time.perf_counter() - t0, 2)
        results["elapsed_s"]["total"] = round(time.perf_counter() - run.start, 2)
        run.note(name, "(section)", results[name], lambda r: f"{results['elapsed_s'][name]} s")
        Path(f"{args.out}.tmp").write_text(json.dumps(results, indent=1, default=str))
        os.replace(f"{args.out}.tmp", args.out)  # rewritten after each section
    for section, what, fig in [("section", "measurement", "figure")] + run.rows:
        print(f"{section:<13} {what:<40} {fig}")
    print(f"{'total':<13} {'':<40} {results['elapsed_s']['total']:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
