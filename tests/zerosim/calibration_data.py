"""Synthetic calibration measurements whose true parameters are known: what the fit must recover
and the engine must reproduce (tests/zerosim/test_calibrate.py, test_fit_ops.py,
test_validate.py).

Every row is made by a law written out here from the design (issue 31, "Raw measurements" and
"The record"), never by the module under test: collectives by the α-β ring, the op rows by the
op model's laws (the GEMM's waves and roofline, each memory-bound op's overhead + minimum bytes /
rate, attention's overhead + causal FLOPs / rate), the optimizer's α-β line, and the memory
mechanisms' fixed + per-count bytes. A world of n ranks shares the box: its rates are those of a
world of 2 times 2 / n (WORLD_SCALE), each rank at 4 / n threads.
"""

import dataclasses
import itertools
import math

from zerosim.scenario.load import load_scenario
from tests.conftest import SCENARIOS

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
SIZES = [2.0 ** k for k in range(10, 29)]  # 1 KiB .. 256 MiB
ALPHA, BETA = 40e-6, 1 / 2.5e9  # 40 us, 2.5 GB/s
OPT = (1e-3, 2e-9)  # overhead, seconds per element

# ---- the op rows (measurements["ops"]) ----------------------------------------------------------


def law_gemm(m, n, k, tile, units, tflops, launch_s, element_bytes, bandwidth_bytes_per_s):
    """The design's GEMM law: tiles = ceil(m/tm) ceil(n/tn), waves = ceil(tiles / U); launch +
    max(waves 2 tm tn k U / R, element bytes (mk + kn + mn) / bandwidth)."""
    waves = math.ceil(math.ceil(m / tile[0]) * math.ceil(n / tile[1]) / units)
    compute = waves * 2 * tile[0] * tile[1] * k * units / (tflops * 1e12)
    return launch_s + max(compute, element_bytes * (m * k + k * n + m * n) / bandwidth_bytes_per_s)


# The minimum bytes of each memory-bound op per (tokens x width) element, forward and backward, in
# 16-bit elements (2 bytes): norm x in, y out (+ dy in); residual two in, one out (its gradient
# the same three); GELU and dropout as the norm; SwiGLU over the ffn width a, b in, y out (+ dy
# in, da, db out); the embedding's rows out (+ their gradient in, scattered); cross-entropy the
# logits in (+ their gradient out); a copy in and out.
ELEMENTS = {"norm": (2, 3), "residual": (3, 3), "gelu": (2, 3), "dropout": (2, 3),
            "swiglu": (3, 5), "embedding": (1, 2), "cross_entropy": (1, 2), "copy": (2, None)}


def bytes_by_hand(op, backward, tokens, width, head_dim=0):
    if op == "rotary":  # x in, y out over queries' and keys' width; cos and sin of head_dim
        return 2 * (2 * tokens * width + 4 * tokens * head_dim)
    return 2 * ELEMENTS[op][backward] * tokens * width


# Each op's (overhead s, bytes/s) forward and backward: distinct, so a mix-up shows.
RATES = {op: ((1e-6 * (i + 1), 1e9 * (i + 2)), (2e-6 * (i + 1), 0.5e9 * (i + 3)))
         for i, op in enumerate([*ELEMENTS, "rotary"])}
RATES["copy"] = ((5e-6, 2e9), (None, None))  # the bandwidth: some of the GEMMs memory-bound
CPU_GEMM = {"tile": (64, 32), "units": 8, "tflops": 0.05, "launch_s": 4e-6}
CPU_GRID = list(itertools.product((16, 72, 200, 520, 1000), (24, 100, 264, 1024), (16, 256, 1024)))
LINEAR_EXTRA = (3e-6, 8e-6)
LAUNCH = {"per_op_s": 4e-6, "autograd_node_s": 9e-6}
ATTENTION = {"overhead_s": (30e-6, 60e-6), "tflops": (0.02, 0.015)}
# The math kernel: overhead + seconds per score element (b heads s^2) + causal FLOPs at one rate.
MATH = {"overhead_s": (200e-6, 400e-6), "score_s": (3e-9, 7e-9), "tflops": (0.02, 0.01)}
FLASH_BACKWARD = 2.5  # the backward's FLOPs over the forward's (design: op_costs' convention)


def base(processes=1, threads=2, dtype="float32", device="cpu"):
    return {"processes": processes, "threads": threads, "dtype": dtype, "device": device}


def memory_rows(row, scale=1.0):
    """Every op at four sizes; `scale` divides every rate (a world whose ranks share bandwidth)."""
    rows = []
    for op, ((o_f, r_f), (o_b, r_b)) in RATES.items():
        for tokens, width in ((64, 32), (256, 64), (1024, 128), (4096, 256)):
            head_dim = 16 if op == "rotary" else 0
            fwd = o_f + bytes_by_hand(op, 0, tokens, width, head_dim) / (r_f / scale)
            bwd = None if op == "copy" else (
                o_b + bytes_by_hand(op, 1, tokens, width, head_dim) / (r_b / scale))
            rows.append({**row, "kind": "memory_op", "op": op, "tokens": tokens, "width": width,
                         "head_dim": head_dim, "forward_s": fwd, "backward_s": bwd})
    return rows


def gemm_rows(row, gemm, grid, element_bytes, bandwidth, **extra):
    return [{**row, **extra, "kind": "gemm", "m": m, "n": n, "k": k,
             "time_s": law_gemm(m, n, k, gemm["tile"], gemm["units"], gemm["tflops"],
                                gemm["launch_s"], element_bytes, bandwidth)}
            for m, n, k in grid]


def attention_rows(row, tflops_by_seq=None, head_dims=(16, 32), kernel="flash"):
    """Flash: the overhead and each length's rate on the causal FLOPs, batch 2, 4 heads."""
    rows = []
    for seq, head_dim in itertools.product((16, 32, 64, 128, 256), head_dims):
        fwd_rate, bwd_rate = (tflops_by_seq or {}).get(seq, ATTENTION["tflops"])
        flops = 4 * 2 * seq * seq * 4 * head_dim / 2  # batch 2, 4 heads, causal half
        rows.append({**row, "kind": "attention", "kernel": kernel, "batch": 2, "heads": 4,
                     "kv_heads": 4, "seq": seq, "head_dim": head_dim,
                     "forward_s": ATTENTION["overhead_s"][0] + flops / (fwd_rate * 1e12),
                     "backward_s": ATTENTION["overhead_s"][1]
                     + FLASH_BACKWARD * flops / (bwd_rate * 1e12)})
    return rows


def math_attention_rows(row, scale=1.0):
    """The math kernel's law (MATH; `scale` divides its rates): two head sizes and two batches
    at each length tell the FLOPs from the scores."""
    rows = []
    for seq, head_dim, batch in itertools.product((16, 64, 256), (16, 32), (1, 3)):
        scores = batch * 4 * seq * seq
        flops = 4 * batch * seq * seq * 4 * head_dim / 2
        rows.append({**row, "kind": "attention", "kernel": "math", "batch": batch, "heads": 4,
                     "kv_heads": 4, "seq": seq, "head_dim": head_dim, **{
                         f"{name}_s": MATH["overhead_s"][p] + scale * MATH["score_s"][p] * scores
                         + (FLASH_BACKWARD if p else 1) * flops
                         / (MATH["tflops"][p] / scale * 1e12)
                         for p, name in enumerate(("forward", "backward"))}})
    return rows


def cpu_rows(processes=1, threads=2, scale=1.0, kernel="flash"):
    """A whole world's rows: the copy's forward rate is the box's bandwidth."""
    row = base(processes, threads)
    bandwidth = RATES["copy"][0][1] / scale
    gemm = {**CPU_GEMM, "tflops": CPU_GEMM["tflops"] / scale}
    # fp32 rows, their bytes counted at 2 per element as the copy's (the op model's convention)
    rows = memory_rows(row, scale) + gemm_rows(row, gemm, CPU_GRID, 2, bandwidth)
    rows.append({**row, "kind": "launch", **LAUNCH})

    def g(m, n, k):
        return law_gemm(m, n, k, gemm["tile"], gemm["units"], gemm["tflops"], gemm["launch_s"],
                        2, bandwidth)

    for tokens, n_in, n_out in ((64, 64, 256), (256, 128, 128), (512, 256, 64)):
        rows.append({**row, "kind": "linear", "tokens": tokens, "n_in": n_in, "n_out": n_out,
                     "bias": True, "forward_s": g(tokens, n_out, n_in) + LINEAR_EXTRA[0],
                     "backward_s": g(tokens, n_in, n_out) + g(n_in, n_out, tokens)
                     + LINEAR_EXTRA[1]})
    return rows + (attention_rows(row) if kernel == "flash" else math_attention_rows(row, scale))


# ---- a calibration of the tiny scenario on worlds of 2 and 4 ranks -----------------------------

WORLD_SCALE = {2: 1.0, 4: 2.0}  # a world of 4 ranks: every rate half a world of 2's
UNIT_EXTRA = {"embedding": (11e-6, 13e-6), "block": (300e-6, 170e-6), "head": (40e-6, 20e-6)}
"""What a whole unit timed alone takes beyond its ops (the framework's per-unit host work)."""


def record_by_hand(n: int) -> dict:
    """The record a world of n ranks was measured from, written out from the constants above:
    what the fit must give back (residuals aside), and what the op model then prices."""
    scale = WORLD_SCALE[n]
    lengths = (16, 64, 256)
    return {
        "name": "x86_64, 4 CPUs", "device": "cpu", "dtype": "float32", "threads": 4 // n,
        "gemm": {"tflops": CPU_GEMM["tflops"] / scale, "tile": list(CPU_GEMM["tile"]),
                 "units": CPU_GEMM["units"], "launch_s": CPU_GEMM["launch_s"]},
        "launch_s": LAUNCH["per_op_s"], "autograd_node_s": LAUNCH["autograd_node_s"],
        "backward_call_s": 0.0, "bandwidth_GBps": RATES["copy"][0][1] / scale / 1e9,
        "linear_overhead_s": list(LINEAR_EXTRA),
        "attention": {"kernel": "math", "overhead_s": list(MATH["overhead_s"]),
                      "score_s": [scale * s for s in MATH["score_s"]],
                      "by_seq": [[s, MATH["tflops"][0] / scale, MATH["tflops"][1] / scale]
                                 for s in lengths]},
        "memory_ops": {op: {name: {"overhead_s": o, "bytes_per_s": r / scale}
                            for name, (o, r) in zip(("forward", "backward"), passes)
                            if o is not None}
                       for op, passes in RATES.items()},
        "unit_overhead_s": {unit: list(extra) for unit, extra in UNIT_EXTRA.items()},
    }


def unit_rows(scenario, n: int, micro_batches) -> list[dict]:
    """Whole units timed alone (measurements["compute"]): the op model at the hand record's
    constants without its unit overheads, of the tiny GPT as zero_real runs it (no dropout),
    plus UNIT_EXTRA."""
    from zerosim.hardware import DEVICES
    from zerosim.hardware.measured import record_gpu
    from zerosim.sim.op_costs import OpCosts, unit_seconds

    record = {k: v for k, v in record_by_hand(n).items() if k != "unit_overhead_s"}
    costs = OpCosts(record_gpu(record, DEVICES[scenario.cluster.gpu]), record["bandwidth_GBps"])
    model = dataclasses.replace(scenario.model, dropout=False)
    rows = []
    for b in micro_batches:
        t = dataclasses.replace(scenario.training, micro_batch=b)
        forward, backward = unit_seconds(costs, model, t)
        for unit, i in (("embedding", 0), ("block", 1), ("head", -1)):
            rows.append({"processes": n, "unit": unit, "micro_batch": b, "seq_len": t.seq_len,
                         "forward_s": forward[i] + UNIT_EXTRA[unit][0],
                         "backward_s": backward[i] + UNIT_EXTRA[unit][1]})
    return rows


# Each measured memory mechanism's (fixed bytes, {count: bytes per count}, what it ran), as
# zero_real/calibration/memory_bench.py measures them on fp32: cross-entropy's two fp32
# gradients of the logits and the loss's; LayerNorm's mean and rstd per token; math SDPA's
# copies and scores at 4 bytes; no fp32 copy of an fp32 gradient; Adam's two temporaries.
MECHANISMS = {
    "loss_backward": (4.0, {"logit": 8.0}, {}),
    "norm_saved": (0.0, {"token": 8.0, "token_hidden": 0.0}, {"norm": "layernorm"}),
    "attention_saved": (0.0, {"qkv_element": 4.0, "score": 4.0, "row": 0.0}, {"kernel": "math"}),
    "optimizer_grad": (0.0, {"element": 0.0}, {}),
    "optimizer_step": (0.0, {"element": 8.0}, {}),
}
MECHANISM_POINTS = {  # the counts each was measured at (memory_bench.py's shapes)
    "loss_backward": [{"logit": t * v} for t, v in ((64, 256), (256, 256), (256, 1024))],
    "norm_saved": [{"token": t, "token_hidden": t * h} for t, h in ((64, 32), (64, 128),
                                                                    (512, 64))],
    "attention_saved": [{"qkv_element": b * s * 3 * a * d, "score": b * a * s * s,
                         "row": b * a * s}
                        for b, a, s, d in ((2, 4, 16, 16), (2, 4, 64, 16), (2, 2, 32, 32),
                                           (2, 8, 128, 8))],
    "optimizer_grad": [{"element": e} for e in (1 << 12, 1 << 15, 1 << 18)],
    "optimizer_step": [{"element": e} for e in (1 << 12, 1 << 15, 1 << 18)],
}


def mechanism_rows(n: int) -> list[dict]:
    rows = []
    for name, (fixed, per, ran) in MECHANISMS.items():
        for counts in MECHANISM_POINTS[name]:
            held = fixed + sum(per[c] * counts[c] for c in counts)
            rows.append({"processes": n, "threads": 4 // n, "dtype": "float32", "device": "cpu",
                         "mechanism": name, "counts": counts, "bytes": int(held), **ran})
    return rows


def synthetic_raw(scenario, processes=(2, 4), micro_batches=(1, 2, 4)):
    """A version-2 calibration's raw measurements of `scenario` (the tiny GPT) on worlds of
    `processes` ranks: collectives, op rows, whole units, the optimizer, memory mechanisms."""
    from zerosim.contract import PROFILE_FORMAT, PROFILE_VERSION

    m = {"collectives": [], "ops": [], "compute": [], "optimizer": [], "memory_mechanisms": []}
    for n in processes:
        for op, factor in (("all_reduce", 2.0), ("reduce_scatter", 1.0), ("all_gather", 1.0)):
            for s in SIZES:
                m["collectives"].append({"impl": "native", "op": op, "ranks": n, "size_bytes": s,
                                         "time_s": factor * (n - 1) * (ALPHA + BETA * s / n)})
        m["ops"] += cpu_rows(n, 4 // n, WORLD_SCALE[n], kernel="math")
        m["compute"] += unit_rows(scenario, n, micro_batches)
        for e in (2 ** 10, 2 ** 14, 2 ** 18):
            m["optimizer"].append({"processes": n, "elements": e, "time_s": OPT[0] + OPT[1] * e})
        m["memory_mechanisms"] += mechanism_rows(n)
    return {"format": PROFILE_FORMAT, "version": PROFILE_VERSION,
            "provenance": {"host": "synthetic", "hardware": "x86_64, 4 CPUs"}, "measurements": m}


def with_profile(path, *overrides):
    return load_scenario(TINY, [f'cluster.profile="{path}"', *overrides])
