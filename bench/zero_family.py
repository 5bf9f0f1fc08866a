"""The ZeRO family beyond the four stages, as zerosim predicts it: hybrid sharding (HSDP, MiCS),
ZeRO++, ZeRO-Offload and ZeRO-Infinity, beside the published end-to-end claims of
docs/research/offload_hybrid_claims.md. A measuring script: it asserts nothing and fits nothing;
every published figure is a test-set number, compared as prediction / published - 1.

    python bench/zero_family.py

It prints, each table under the scenario settings it ran:
1. Llama-2-7B on 64 and 1024 A100-80GB (scenarios/llama2_7b_64gpu.toml, cluster.nodes
   overridden) under ZeRO-3, HSDP (both replica_allreduce values), MiCS and ZeRO++, at the
   preset's inter-node bandwidth and at 100 Gb/s per GPU and 100 Gb/s per node: step time,
   exposed communication, tokens/s/GPU, MFU, memory and the bytes that cross nodes;
2. ZeRO-Offload on one V100-32GB: the DeepSpeed tutorial's 10B run (its log's step, phases and
   memory), with and without the delayed parameter update, and the paper's 1B-13B models
   (Fig. 8, Table 3 shapes);
3. the published claims zerosim can express (ZeRO-Offload scaling, ZeRO-Infinity on one DGX-2,
   ZeRO++ ratios at 384 V100, the HSDP and Azure offload runs of references/), predicted against
   published with the error, and one line for each claim it cannot express.

A combination zerosim refuses prints its one-line InputError in place of its row.
About 5 s on 2 cores (1024-GPU uniform clusters simulate one representative rank).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from zerosim.calibration.references import read_reference
from zerosim.errors import InputError
from zerosim.analytic.host_memory import estimator_lines
from zerosim.analytic.memory import stage_memory
from zerosim.analytic.model import total_params, unit_flops
from zerosim.scenario.load import build_scenario, load_scenario
from zerosim.sim.collectives.ring import Group
from zerosim.sim.engine import simulate
from zerosim.sim.groups import WORLD, subgroups

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "scenarios/llama2_7b_64gpu.toml"
OFFLOAD_10B = ROOT / "scenarios/family_zero_offload_10b_v100.toml"
INFINITY = ROOT / "scenarios/family_zero_infinity_1xdgx2.toml"
ZEROPP = ROOT / "scenarios/family_zeropp_384xv100.toml"
REFERENCES = ROOT / "references"
GB, GiB = 1e9, 2**30


# ---- running and measuring ----------------------------------------------------------------

def run(path: Path, overrides: list[str], events: bool = False):
    """(scenario, result) of the scenario's own zero_stage; an InputError propagates."""
    scenario = load_scenario(path, overrides)
    return scenario, simulate(scenario, scenario.training.zero_stage, keep_events=events)


def hardware_tflops(scenario, step_s: float) -> float:
    """TFLOP/s per GPU counting recomputation (full checkpointing re-runs forward): the
    convention of Megatron's 96 B s l h^2 (...) formula, which the claims doc uses."""
    t = scenario.training
    flops = sum(u.forward + u.backward for u in unit_flops(scenario.model, t))
    return flops * t.gradient_accumulation / step_s / 1e12


def cross_node_bytes(scenario, result) -> float:
    """Bytes per GPU per step that leave its node, by ring accounting: a group that spans nodes
    with m of its ranks on a node sends V / m across per GPU when each rank sends V (a ring
    leaves a node once per pass; the node's m ranks of the group share that edge). Groups inside
    a node (HSDP's shard group of 8, hpZ, qgZ's first all-to-all) send nothing across."""
    c = scenario.cluster
    groups = {WORLD: Group(c.world_size, min(c.gpus_per_node, c.world_size)),
              **subgroups(scenario)}
    total = 0.0
    for key, sent in result.comm_bytes_per_rank.items():
        _, _, rest = key.partition(" (")
        group = groups[rest.rstrip(")") or WORLD]
        if group.nodes > 1:
            total += sent / group.gpus_per_node
    return total


def error(predicted: float, published: float) -> str:
    return f"{100 * (predicted / published - 1):+.1f}%"


def line(cells: list[str], widths: list[int]) -> str:
    """The first cell left-aligned, the others right-aligned, two spaces apart."""
    return "  ".join(c.rjust(w) if i else c.ljust(w)
                     for i, (c, w) in enumerate(zip(cells, widths)))


def table(headers: list[str], rows: list[list[str]]) -> None:
    """Columns as wide as their widest cell; a shorter row (a refusal) is printed as a line."""
    full = [r for r in rows if len(r) == len(headers)]
    widths = [max(len(h), *(len(r[i]) for r in full)) for i, h in enumerate(headers)]
    print(line(headers, widths))
    for row in rows:
        print(line(row, widths) if len(row) == len(headers)
              else f"{row[0]:<{widths[0]}}  {' '.join(row[1:])}")
    print()


def refused(name: str, exc: InputError) -> list[str]:
    return [name, f"REFUSED: {exc}"]


# ---- 1. hybrid sharding and ZeRO++ on Llama-2-7B ------------------------------------------

SCHEMES = {
    "ZeRO-3 (deepspeed)": ['training.framework="deepspeed"'],
    "ZeRO-3 FULL_SHARD (fsdp2)": ['training.framework="fsdp2"'],
    "HSDP g=8 every_micro_step (fsdp2)": ['training.framework="fsdp2"', "parallelism.shard_group=8",
                                          'parallelism.replica_allreduce="every_micro_step"'],
    "HSDP g=8 once_per_step (fsdp2)": ['training.framework="fsdp2"', "parallelism.shard_group=8",
                                       'parallelism.replica_allreduce="once_per_step"'],
    "MiCS g=8 once_per_step (deepspeed)": ['training.framework="deepspeed"',
                                           "parallelism.shard_group=8",
                                           'parallelism.replica_allreduce="once_per_step"'],
    "ZeRO++ hpZ8+qwZ+qgZ (deepspeed)": ['training.framework="deepspeed"',
                                        "parallelism.hpz_partition=8",
                                        "training.quantized_weights=true",
                                        "training.quantized_gradients=true"],
}
BANDWIDTHS = {  # label: overrides of the inter-node link
    "preset: 200 Gb/s per GPU = 25 GB/s (DGX A100, 8 NICs)": [],
    "100 Gb/s per GPU = 12.5 GB/s (8 NICs)": ["cluster.inter_node_bandwidth_GBps=12.5"],
    "100 Gb/s per node = 1.5625 GB/s per GPU (1 NIC)": [
        "cluster.inter_node_bandwidth_GBps=1.5625", "cluster.nics_per_node=1"],
}
HEADERS_1 = ["scheme", "step s", "exposed s", "tok/s/GPU", "MFU", "peak GiB", "device GiB",
             "fits", "x-node GB/GPU", "x-node/node, M"]


def llama_row(name: str, overrides: list[str]) -> list[str]:
    try:
        scenario, r = run(LLAMA, overrides)
    except InputError as exc:
        return refused(name, exc)
    n = min(scenario.cluster.gpus_per_node, scenario.world_size)
    across = cross_node_bytes(scenario, r)
    m_bytes = 2 * total_params(scenario.model)  # the ZeRO++ blog's M: the 16-bit model
    fits = r.device_bytes <= scenario.cluster.hardware.memory_bytes
    return [name, f"{r.step_time_s:.3f}", f"{r.exposed_comm_s:.3f}",
            f"{r.tokens_per_s_per_gpu:.0f}", f"{100 * r.mfu:.1f}%", f"{r.peak_bytes / GiB:.1f}",
            f"{r.device_bytes / GiB:.1f}", "yes" if fits else "NO", f"{across / GB:.2f}",
            f"{across * n / m_bytes:.2f}"]


def section_hybrid() -> None:
    print("=" * 100)
    print("1. Hybrid sharding and ZeRO++: Llama-2-7B, A100-80GB, 8 GPUs per node")
    print(f"   scenario {LLAMA.relative_to(ROOT)} (micro-batch 1 x seq 4096, bf16 AdamW, flash "
          "attention, no checkpointing, zero_stage 3); it names no framework (zerosim's 'zero'):")
    print("   ZeRO-3, MiCS and ZeRO++ rows run framework 'deepspeed', HSDP rows 'fsdp2' (PyTorch's "
          "HSDP; once_per_step = the all-reduce deferred to the last micro-step);")
    print("   compare HSDP with the fsdp2 FULL_SHARD row and MiCS with the deepspeed ZeRO-3 row "
          "(the frameworks' compute and memory differ).")
    print("   x-node GB/GPU: ring accounting (cross_node_bytes); x-node/node, M: the node's bytes "
          "to other nodes in units of M = 2 Psi (the ZeRO++ blog: ZeRO-3 3M, ZeRO++ 0.75M).")
    print()
    for nodes in (8, 128):
        for label, link in BANDWIDTHS.items():
            print(f"-- {nodes * 8} GPUs (cluster.nodes={nodes}), inter-node {label}, "
                  "gradient_accumulation 1")
            table(HEADERS_1, [llama_row(name, [f"cluster.nodes={nodes}", *link, *keys])
                              for name, keys in SCHEMES.items()])
    print("-- gradient_accumulation 4 (where replica_allreduce differs), inter-node 100 Gb/s per "
          "node (1 NIC)")
    link = BANDWIDTHS["100 Gb/s per node = 1.5625 GB/s per GPU (1 NIC)"]
    rows = [llama_row(f"{nodes * 8} GPUs {name}", [f"cluster.nodes={nodes}", *link,
                                                   "training.gradient_accumulation=4", *keys])
            for nodes in (8, 128) for name, keys in SCHEMES.items()]
    table(HEADERS_1, rows)


# ---- 2. ZeRO-Offload on one V100 ----------------------------------------------------------

TUTORIAL = {  # DS docs/_tutorials/zero-offload.md log, iterations 8-10 (claims doc §2)
    "step s": (25.7, 26.8), "forward s": (6.08, 6.38), "backward s": (11.77, 12.64),
    "optimizer s": (7.6, 8.0), "samples/s": (0.386, 0.388), "TFLOP/s (derived)": (32.6, 33.9)}


def phase_spans(result) -> dict[str, float]:
    """Seconds from the first to the last event of each phase (forward, backward, step) on the
    critical rank, and each host operation's summed duration (d2h, h2d, cpu_adam, nvme_*)."""
    spans, ops = {}, defaultdict(float)
    events = max(result.ranks, key=lambda ctx: ctx.state.end_s).state.events
    for e in events:
        lo, hi = spans.get(e["phase"], (e["start_s"], e["end_s"]))
        spans[e["phase"]] = (min(lo, e["start_s"]), max(hi, e["end_s"]))
        if e["queue"] != "compute" and e["op"] in ("d2h", "h2d", "cpu_adam", "nvme_read",
                                                      "nvme_write"):
            ops[e["op"]] += e["end_s"] - e["start_s"]
    out = {f"{phase} span s": hi - lo for phase, (lo, hi) in spans.items()}
    out["after backward s"] = result.step_time_s - spans.get("backward", (0.0, 0.0))[1]
    return {**out, **{f"{op} s": s for op, s in ops.items()}}


def tutorial_rows(label: str, scenario, r) -> list[list[str]]:
    spans = phase_spans(r)
    t = scenario.training
    predicted = {"step s": r.step_time_s, "forward s": spans.get("forward span s", 0.0),
                 "backward s": spans.get("backward span s", 0.0),
                 "optimizer s": spans["after backward s"],
                 "samples/s": t.micro_batch * t.gradient_accumulation / r.step_time_s,
                 "TFLOP/s (derived)": hardware_tflops(scenario, r.step_time_s)}
    rows = []
    for key, (lo, hi) in TUTORIAL.items():
        mid = (lo + hi) / 2
        rows.append([f"{label}: {key}", f"{lo:g}-{hi:g}", f"{predicted[key]:.3g}",
                     error(predicted[key], mid)])
    extra = ", ".join(f"{k} {v:.2f}" for k, v in spans.items() if k.endswith(("d2h s", "h2d s",
                                                                              "adam s")))
    rows.append([f"{label}: host operations", "-", f"{r.host_time_s:.3g}",
                 f"({extra}; compute {r.compute_s:.2f} s, exposed {r.exposed_comm_s:.2f} s)"])
    return rows


def section_tutorial() -> None:
    print("=" * 100)
    print("2a. ZeRO-Offload tutorial run: 10B GPT-2 on ONE V100-32GB, ZeRO-2 + optimizer_offload "
          "cpu, deepspeed")
    print(f"   scenario {OFFLOAD_10B.relative_to(ROOT)}: 50 layers, hidden 4096, 32 heads, "
          "seq 1024, vocab 50257 (assumed unpadded), fp16, micro-batch 10,")
    print("   full checkpointing, grad-accum 1, overlap_comm true (the tutorial's config), reduce "
          "bucket 5e7 elements; host: 48 cores (DGX-2,")
    print("   preset default 48 / 1 GPU), PCIe Gen3 at 0.76 = 11.97 GB/s.")
    print("   published: DS tutorial log 2020-09-10 (claims doc §2); error vs the range's "
          "midpoint; 'optimizer' = DS's optimizer timer")
    print("   vs zerosim's time after backward ends (CPU Adam + H2D).")
    print("   forward/backward = spans of those phases on the critical rank (backward includes "
          "the recompute and any copy it waits for).")
    print("   '24 cores' is a sensitivity, not the prediction: the log's htop shows 48 LOGICAL "
          "CPUs, which would be 24 cores with 2 threads each (DGX-2: 48 cores, 96 threads).")
    print()
    rows = []
    variants = (("DPU off", []), ("DPU on", ["training.delayed_update=true"]),
                ("24 cores", ["cluster.cpu_cores_per_gpu=24"]))
    for label, extra in variants:
        try:
            scenario, r = run(OFFLOAD_10B, extra, events=True)
        except InputError as exc:
            rows.append(refused(label, exc))
            continue
        rows += tutorial_rows(label, scenario, r)
    table(["metric", "published", "predicted", "error vs mid"], rows)
    scenario, r = run(OFFLOAD_10B, [])
    mem = stage_memory(scenario, 2)
    print(f"   memory: GPU peak (buffers) {r.peak_bytes / 2**20:,.0f} MiB, allocator reserved "
          f"{r.peak_reserved_bytes / 2**20:,.0f} MiB, device (nvidia-smi) "
          f"{r.device_bytes / 2**20:,.0f} MiB vs the log's 32,290 MiB used of 32,480: "
          f"{error(r.device_bytes / 2**20, 32290)}")
    print(f"   host: {mem.host_bytes / GB:.1f} GB for the offloaded states (18 B per parameter, "
          f"DeepSpeed's stages 1-2); the htop screenshot shows 296 GB used of 1.47 TB "
          f"(whole box, not comparable). The run kept activation checkpoints in host memory "
          f"(cpu_checkpointing): here they stay on the GPU (50 x 10 x 1024 x 4096 x 2 B = 4.2 GB).")
    for line in estimator_lines(scenario, mem.host_bytes):
        print(f"   {line}")
    print()


PIECES = "more than 50,000 pieces"  # engine's refusal of a step too finely cut to simulate


def accumulated(path: Path, overrides: list[str], ga: int):
    """(scenario at gradient_accumulation = ga, step seconds, a result, how): simulated, or,
    when zerosim refuses that many pieces, extrapolated linearly from 1 and 2 micro-steps
    (every micro-step after the first repeats the same work: stage 2 copies each micro-step's
    partition down; the step's own work comes once)."""
    at = [*overrides, f"training.gradient_accumulation={ga}"]
    try:
        scenario, r = run(path, at)
        return scenario, r.step_time_s, r, "simulated"
    except InputError as exc:
        if PIECES not in str(exc):
            raise
    _, one = run(path, [*overrides, "training.gradient_accumulation=1"])
    _, two = run(path, [*overrides, "training.gradient_accumulation=2"])
    step = one.step_time_s + (ga - 1) * (two.step_time_s - one.step_time_s)
    return load_scenario(path, at), step, two, "extrapolated from GA 1, 2"


# ZeRO-Offload Table 3 shapes (layers, hidden, micro-batch) and Fig. 8 TFLOP/s (one V100, global
# batch 512, DPU off; bar-read), claims doc §1.
ZO_FIG8 = {"1B": (20, 2048, 32, 35.9), "2B": (40, 2048, 32, 35.8), "4B": (64, 2304, 32, 36.8),
           "6B": (53, 3072, 16, 37.1), "8B": (72, 3072, 16, 41.6), "10B": (50, 4096, 10, 41.0),
           "11B": (55, 4096, 8, 35.8), "12B": (60, 4096, 4, 33.9), "13B": (65, 4096, 4, 34.4)}
# Fig. 9: DPU off -> on, micro-batch 8, one V100 (bar-read).
ZO_FIG9 = {"2B": (27.0, 31.1), "6B": (29.3, 36.3), "8B": (34.6, 37.6), "10B": (34.8, 38.8)}
GLOBAL_BATCH = 512


def shape(name: str, micro_batch: int) -> list[str]:
    layers, hidden, _, _ = ZO_FIG8[name]
    return [f"model.layers={layers}", f"model.hidden={hidden}", f"model.heads={hidden // 128}",
            f"training.micro_batch={micro_batch}"]


def fig8_row(name: str) -> list[str]:
    layers, hidden, mb, published = ZO_FIG8[name]
    ga = GLOBAL_BATCH // mb
    try:
        scenario, step, r, how = accumulated(OFFLOAD_10B, shape(name, mb), ga)
    except InputError as exc:
        return refused(name, exc)
    tflops = hardware_tflops(scenario, step)
    fits = r.device_bytes <= scenario.cluster.hardware.memory_bytes
    return [name, str(layers), str(hidden), str(hidden // 128), str(mb), str(ga),
            f"{total_params(scenario.model) / 1e9:.2f}", f"{tflops:.1f}", f"{published:g}",
            error(tflops, published), f"{r.device_bytes / GiB:.1f}", "yes" if fits else "NO", how]


def fig9_row(name: str) -> list[str]:
    off, on = ZO_FIG9[name]
    got, how = [], ""
    for ga, dpu in ((64, "false"), (64, "true"), (1, "false"), (1, "true")):
        try:
            scenario, step, _, method = accumulated(
                OFFLOAD_10B, [*shape(name, 8), f"training.delayed_update={dpu}"], ga)
        except InputError as exc:
            return refused(name, exc)
        got.append(hardware_tflops(scenario, step))
        how = method if ga == 64 else how
    return [name, f"{got[0]:.1f}", f"{off:g}", error(got[0], off), f"{got[1]:.1f}", f"{on:g}",
            error(got[1], on), f"{got[1] / got[0]:.2f}x", f"{on / off:.2f}x",
            f"{got[3] / got[2]:.2f}x", how]


def check_extrapolation() -> str:
    """The 1B row simulated whole against the same extrapolated from 1 and 2 micro-steps."""
    over = shape("1B", 32)
    _, whole = run(OFFLOAD_10B, [*over, "training.gradient_accumulation=16"])
    _, one = run(OFFLOAD_10B, [*over, "training.gradient_accumulation=1"])
    _, two = run(OFFLOAD_10B, [*over, "training.gradient_accumulation=2"])
    line = one.step_time_s + 15 * (two.step_time_s - one.step_time_s)
    return (f"   check of the extrapolation on 1B (GA 16): simulated {whole.step_time_s:.3f} s, "
            f"extrapolated {line:.3f} s ({error(line, whole.step_time_s)})")


def section_paper_offload() -> None:
    print("=" * 100)
    print("2b. ZeRO-Offload paper, one V100-32GB + the DGX-2's 48 cores: Fig. 8 (global batch 512, "
          "DPU off) with Table 3 shapes")
    print(f"   scenario {OFFLOAD_10B.relative_to(ROOT)} with model.layers/hidden and micro_batch "
          "per Table 3; gradient_accumulation = 512 // micro-batch (10B: 51 x 10 = 510).")
    print("   ASSUMED (not in the sources): seq 1024, vocab 50257, heads = hidden / 128, GPT-2 "
          "layout, full checkpointing on the GPU, fp16, TFLOP/s counting the recompute")
    print("   (Megatron's formula; the paper's own FLOP count is not stated). Published = bars "
          "read from the facsimile (+-0.5).")
    print()
    table(["model", "layers", "hidden", "heads*", "mb", "GA", "Psi e9", "pred TF/s", "pub TF/s",
           "error", "device GiB", "fits", "how"], [fig8_row(name) for name in ZO_FIG8])
    print(check_extrapolation())
    print()
    print("2c. Fig. 9, delayed parameter update off/on, micro-batch 8; ASSUMED global batch 512 "
          "(GA 64; the figure's batch is not stated), same assumptions as 2b;")
    print("   'GA 1 on/off': the same ratio with one micro-step per optimizer step (the other end "
          "of the unknown batch)")
    print()
    table(["model", "pred off", "pub off", "error", "pred on", "pub on", "error", "pred on/off",
           "pub on/off", "GA 1 on/off", "how (GA 64)"], [fig9_row(name) for name in ZO_FIG9])


# ---- 3. published claims ------------------------------------------------------------------

# ZeRO-Offload Fig. 11 (10B, TFLOP/s per GPU, bar-read), claims doc §1.
ZO_FIG11 = {1: 34.8, 2: 31.5, 4: 29.6, 8: 29.6, 16: 30.7, 32: 33.5, 64: 33.0, 128: 31.1}
ZERO2_FIG11 = {32: 29.6, 64: 33.9, 128: 39.3}


def dgx2(gpus: int) -> list[str]:
    """`gpus` V100 on DGX-2s (16 per node); the host link as ZeRO-Infinity measured it: 12 GB/s
    one GPU alone, 48 GB/s per node with all 16 copying (3.0 each), i.e. shared by max(1, n/4)."""
    n = min(gpus, 16)
    return [f"cluster.nodes={max(1, gpus // 16)}", f"cluster.gpus_per_node={n}",
            f"cluster.gpus_per_host_link={max(1, n // 4)}"]


def claim_row(claim: str, path: Path, overrides: list[str], published: float | None,
              extra: str = "") -> list[str]:
    """TFLOP/s (counting recompute) against a published figure (None: published as OOM)."""
    try:
        scenario, r = run(path, overrides)
    except InputError as exc:
        return refused(claim, exc)
    tflops = hardware_tflops(scenario, r.step_time_s)
    fits = r.device_bytes <= scenario.cluster.hardware.memory_bytes
    pub, err = ("OOM", "-") if published is None else (f"{published:g}",
                                                        error(tflops, published))
    return [claim, f"{tflops:.1f}", pub, err, f"{r.step_time_s:.2f}",
            f"{r.exposed_comm_s:.2f}", f"{r.host_time_s:.2f}", f"{r.device_bytes / GiB:.1f}",
            "yes" if fits else "NO", extra]


HEADERS_3 = ["claim", "pred TF/s", "pub TF/s", "error", "step s", "exposed s", "host s",
             "device GiB", "fits", "note"]


def scaling_rows() -> list[list[str]]:
    rows = [claim_row(f"ZeRO-Offload 10B, {g} GPUs", OFFLOAD_10B, dgx2(g), pub,
                      f"host link {12 / max(1, min(g, 16) // 4):.0f} GB/s/GPU, "
                      f"{48 / min(g, 16):g} cores/GPU")
            for g, pub in ZO_FIG11.items()]
    rows += [claim_row(f"ZeRO-2 (no offload) 10B, {g} GPUs", OFFLOAD_10B,
                       [*dgx2(g), 'training.optimizer_offload="none"'], pub)
             for g, pub in ZERO2_FIG11.items()]
    rows.append(claim_row("ZeRO-2 (no offload) 10B, 16 GPUs", OFFLOAD_10B,
                          [*dgx2(16), 'training.optimizer_offload="none"'], None))
    return rows


# ZeRO-Infinity Table 1 rows 1-3 and Fig. 5c: (layers, hidden, micro-batch, param place,
# optimizer place, TFLOP/s per GPU), one DGX-2. Heads: hidden / 128 (assumed).
ZI_FIG5C = {"10B": (50, 4096, 8, "none", "none", 45), "50B": (62, 8192, 26, "cpu", "nvme", 44),
            "100B": (125, 8192, 24, "cpu", "nvme", 41),
            "0.5T": (124, 18432, 8, "nvme", "nvme", 33), "1T": (128, 25600, 7, "nvme", "nvme", 27)}


def infinity_rows() -> list[list[str]]:
    rows = []
    for name, (layers, hidden, mb, params, optimizer, published) in ZI_FIG5C.items():
        over = [f"model.layers={layers}", f"model.hidden={hidden}", f"model.heads={hidden // 128}",
                f"training.micro_batch={mb}", f'training.optimizer_offload="{optimizer}"',
                f'training.param_offload="{params}"']
        rows.append(claim_row(f"ZeRO-Infinity {name}, 16 GPUs", INFINITY, over, published,
                              f"params {params}, optimizer {optimizer}, mb {mb}"))
    rows.append(claim_row("ZeRO-Offload 10B, 16 GPUs (Fig. 5c)", INFINITY,
                          ["training.zero_stage=2", 'training.optimizer_offload="cpu"'], 35,
                          "ZeRO-2 + optimizer cpu, mb 8"))
    return rows


# ZeRO++ blog Figs. 6-8 (384 V100, TFLOP/s per GPU, ZeRO-3 -> ZeRO++), claims doc §5; shapes
# assumed (scenarios/family_zeropp_384xv100.toml): (layers, hidden) with 12 l h^2 ~ the size.
ZPP_SHAPES = {"18B": (40, 6144), "49B": (61, 8192), "91B": (50, 12288), "138B": (76, 12288)}
ZPP_CLAIMS = [  # (figure, Gb/s per node, tokens per GPU, model, ZeRO-3, ZeRO++)
    ("Fig. 6", 400, 1, "18B", 25, 35), ("Fig. 6", 400, 1, "49B", 23, 36),
    ("Fig. 6", 400, 1, "91B", 23, 36), ("Fig. 6", 400, 1, "138B", 23, 36),
    ("Fig. 6", 400, 2, "18B", 40, 53), ("Fig. 6", 400, 2, "49B", 36, 51),
    ("Fig. 6", 400, 2, "91B", 36, 51), ("Fig. 6", 400, 2, "138B", 36, 50),
    ("Fig. 7", 100, 1, "18B", 14, 31), ("Fig. 7", 100, 1, "49B", 11, 22),
    ("Fig. 7", 100, 1, "91B", 11, 22), ("Fig. 7", 100, 1, "138B", 11, 22),
    ("Fig. 7", 100, 2, "18B", 26, 46), ("Fig. 7", 100, 2, "49B", 20, 38),
    ("Fig. 7", 100, 2, "91B", 20, 38), ("Fig. 7", 100, 2, "138B", 20, 38),
    ("Fig. 8", 200, 2, "18B", 37, 50), ("Fig. 8", 800, 2, "18B", 47, 54),
    ("Fig. 8", 200, 2, "138B", 32, 48), ("Fig. 8", 800, 2, "138B", 48, 55)]
ZPP_KEYS = ["parallelism.hpz_partition=16", "training.quantized_weights=true",
            "training.quantized_gradients=true"]


def zeropp_row(figure: str, gbps: int, ktokens: int, model: str, zero3: float,
               zeropp: float) -> list[str]:
    layers, hidden = ZPP_SHAPES[model]
    nics = gbps // 100
    over = [f"model.layers={layers}", f"model.hidden={hidden}", f"model.heads={hidden // 128}",
            f"training.micro_batch={ktokens}", f"cluster.nics_per_node={nics}",
            f"cluster.inter_node_bandwidth_GBps={gbps / 8 / 16:g}"]
    name = f"{figure} {model} {gbps} Gb/s {ktokens}K tok"
    got = []
    for keys in ([], ZPP_KEYS):
        try:
            scenario, r = run(ZEROPP, [*over, *keys])
        except InputError as exc:
            return refused(name, exc)
        got.append(hardware_tflops(scenario, r.step_time_s))
    ratio, published = got[1] / got[0], zeropp / zero3
    return [name, f"{got[0]:.1f}", f"{zero3:g}", error(got[0], zero3), f"{got[1]:.1f}",
            f"{zeropp:g}", error(got[1], zeropp), f"{ratio:.2f}", f"{published:.2f}",
            error(ratio, published)]


def reference_run(name: str, overrides: dict | None):
    """(scenario, result, measured) of references/<name>.toml with `overrides` ({table: {key:
    value}}) over its scenario's keys; built here (not through calibration.references' report)
    so that the file's own [measured] is all this takes from it."""
    ref = read_reference(REFERENCES / f"{name}.toml")
    tables = {"variation": {}, **{t: dict(ref.scenario.get(t, {}))
                                  for t in ("model", "cluster", "training", "parallelism")}}
    for table_name, keys in (overrides or {}).items():
        tables[table_name].update(keys)
    scenario = build_scenario(tables, base_dir=REFERENCES, source=str(ref.path))
    return scenario, simulate(scenario, scenario.training.zero_stage, keep_events=False), \
        ref.measured


def reference_rows() -> list[list[str]]:
    """references/ runs of the family: the PyTorch blog's HSDP run (shard_group 8, set here
    whether or not the file sets it), the same run fully sharded, 13B on the 7B file's
    settings, and the Azure 1T run with its optimizer on the CPU."""
    llama13b = {"layers": 40, "hidden": 5120, "heads": 40, "ffn": 13824, "name": "Llama 2 13B"}
    hsdp = "pytorch_blog_fsdp_llama2_7b_128xa100_hsdp"
    cases = [("HSDP Llama-2-7B 128 A100 (shard_group 8)", hsdp,
              {"parallelism": {"shard_group": 8}}, None),
             ("same as FULL_SHARD (shard_group 0)", hsdp, {"parallelism": {"shard_group": 0}},
              None),
             ("HSDP Llama-2-13B 128 A100, mb 1 (fms-fsdp)", hsdp,
              {"parallelism": {"shard_group": 8}, "training": {"micro_batch": 1},
               "model": llama13b}, 1700.0),
             ("Azure GPT 1T 1024 A100, ZeRO-3 + CPU optimizer",
              "deepspeed_azure_gpt_1t_1024xa100", None, None)]
    rows = []
    for claim, name, overrides, published in cases:
        try:
            scenario, r, measured = reference_run(name, overrides)
        except InputError as exc:
            rows.append(refused(claim, exc))
            continue
        if "tokens_per_s_per_gpu" in measured:
            metric, got = "tokens/s/GPU", r.tokens_per_s_per_gpu
            pub = published or measured["tokens_per_s_per_gpu"]
        else:
            metric, got = "TFLOP/s/GPU", hardware_tflops(scenario, r.step_time_s)
            pub = measured["tflops_per_gpu"]
        rows.append([claim, metric, f"{got:.4g}", f"{pub:.4g}", error(got, pub),
                     f"{r.host_time_s:.2f}", f"references/{name}.toml"])
    return rows


NOT_EXPRESSIBLE = [
    ("ZeRO-Infinity Fig. 5a/5b, 512 V100: 0.5T-20T (46/49/44/43/34 TF/s), 1T weak scaling",
     "Table 1 rows 4-5 use model parallelism 4-8 (tensor slicing): zerosim has no tensor "
     "parallelism; Fig. 5b's placements at 4-16 nodes are not given"),
    ("ZeRO-3 Offload post: 512 V100 1T 49 TF/s, 400B 50.2, 2T 40.7; one V100 10B-40B (Fig. 3)",
     "model shapes, batch, sequence and offload devices are not stated in the post"),
    ("ZeRO-Offload Fig. 10 (one DGX-2, 1B-70B, vs Megatron/ZeRO-2/PyTorch)",
     "'largest micro-batch that fits' is not given per bar, and the hatched bars need model "
     "parallelism"),
    ("ZeRO-Offload Fig. 7 (largest model: 13B on 1 GPU, 30B on 4, 70B on 16 with MP)",
     "a search over shapes rather than a run; the 'fits' column of 2b is the nearest check"),
    ("ZeRO-Offload Fig. 14 (step breakdown by micro-batch)",
     "the model size is unconfirmed (the translation says both 0.1B and 1B)"),
    ("ZeRO-Infinity Fig. 6b-6e ablations (tiling, prefetch/overlap, CPU activation checkpoints)",
     "they toggle DeepSpeed mechanisms zerosim does not have as keys (memory-centric tiling, "
     "prefetch/overlap off, activation checkpoints in host memory)"),
    ("MiCS (up to 2.89x; 100B on 512 GPUs at 99.4% weak scaling; >54.5% of peak)",
     "abstract only: instance types, model shapes, batch sizes and the DeepSpeed baseline's "
     "numbers were not found"),
    ("DeepSpeed on Azure GPT 2T (1024 A100, 157 TF/s)",
     "its activation checkpoints (85.9 GB per GPU on the GPU) must have lived in host memory, "
     "which zerosim cannot keep there (references/deepspeed_azure_gpt_2t_1024xa100.toml)"),
]


def section_claims() -> None:
    print("=" * 100)
    print("3. Published claims (docs/research/offload_hybrid_claims.md); error = predicted / "
          "published - 1; TFLOP/s count the recompute (Megatron's formula) throughout")
    print()
    print("3a. ZeRO-Offload Fig. 11, 10B GPT-2, 1-128 V100 on DGX-2s (claims doc §1, bar-read)")
    print(f"   scenario {OFFLOAD_10B.relative_to(ROOT)}, 16 GPUs per node beyond one; ASSUMED: "
          "micro-batch 10 (Table 3) and GA 1 at every size (Fig. 11's batch is not given;")
    print("   prose: a larger batch at 32 GPUs), 800 Gb/s per node (the V100 preset: "
          "ZeRO-Infinity's DGX-2 cluster; ZO does not state it),")
    print("   host link min(12, 48 / GPUs) GB/s per GPU")
    print("   (ZeRO-Infinity Fig. 2(b): 12 alone, 3.0 each with 16), 48 cores shared by the node's "
          "GPUs.")
    print()
    table(HEADERS_3, scaling_rows())
    print("3b. ZeRO-Infinity Fig. 5c, one DGX-2 (16 V100), Table 1 rows 1-3 (claims doc §3; "
          "printed on the bars)")
    print(f"   scenario {INFINITY.relative_to(ROOT)}: seq 1024; ASSUMED vocab 50257, heads = "
          "hidden / 128, GA 1, full checkpointing on the GPU (ZI can keep them on the host),")
    print("   NVMe write = read = 25.6 GB/s per node. DS issue #1776's reproduction (dac9056): 10B "
          "~63, 50B and 100B ~35 TF/s per GPU.")
    print()
    table(HEADERS_3, infinity_rows())
    print("3c. ZeRO++ vs ZeRO-3, 384 V100 (24 x 16), ZeRO++ blog Figs. 6-8 (claims doc §5)")
    print(f"   scenario {ZEROPP.relative_to(ROOT)}: model shapes, seq, precision and batch are "
          "NOT in the sources: ASSUMED shapes (layers x hidden) "
          + ", ".join(f"{k} {l}x{h}" for k, (l, h) in ZPP_SHAPES.items()) + ",")
    print("   heads hidden/128, seq 1024 (1K tokens = mb 1, 2K = mb 2), fp16, full checkpointing, "
          "GA 1; x Gb/s per node = x/100 NICs, x/8/16 GB/s per GPU.")
    print("   ZeRO++ = hpz_partition 16 + quantized_weights + quantized_gradients. The ratio "
          "ZeRO++ / ZeRO-3 is the claim; the absolute TF/s depend on the assumed shapes.")
    print()
    table(["claim", "Z3 pred", "Z3 pub", "error", "Z++ pred", "Z++ pub", "error", "ratio pred",
           "ratio pub", "ratio error"], [zeropp_row(*claim) for claim in ZPP_CLAIMS])
    print("3d. Runs of references/ in the family (each file states its own assumptions; its "
          "[scenario] simulated with the overrides named)")
    print("   HSDP 7B: the blog's 3700 (fms-fsdp README: 3760); 13B: fms-fsdp README, HSDP, no "
          "AC, batch 1, 1700 tokens/s/GPU, on the 7B file's settings (seq 4096, 400 Gb/s per "
          "node assumed there).")
    print()
    table(["claim", "metric", "predicted", "published", "error", "host s", "scenario"],
          reference_rows())
    print("3e. Claims zerosim cannot express")
    for claim, why in NOT_EXPRESSIBLE:
        print(f" - {claim}: {why}")


def main() -> None:
    section_hybrid()
    section_tutorial()
    section_paper_offload()
    section_claims()


if __name__ == "__main__":
    main()
