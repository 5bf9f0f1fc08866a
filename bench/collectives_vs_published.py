"""zerosim's simulated all_reduce bus bandwidth against published nccl-tests results.

    python bench/collectives_vs_published.py [--json]

The rows below are a TEST SET: measurements others published (all_reduce_perf, float sum,
busbw in GB/s as nccl-tests prints it, PERFORMANCE.md). Nothing in zerosim is fitted to them;
this script only reports how far the simulation lands. It always exits 0.

Each row is simulated on a scenario built from its GPU preset, its node shape, and the few
overrides the source states (NICs per node, NVLS disabled, an algorithm forced with NCCL_ALGO).
Rows marked weak (*) come from "why is it slow / unstable" threads: the system may have been
misconfigured, so a large error there says less about the model. Only sizes >= 64 MiB are used.
Where a source gives a sweep's peak without its size, the sweep's largest size is used; where it
gives no size at all, 8 GiB (nccl-tests' usual -e 8G) is assumed and the row says so.

For NVLS the 2(n-1)/n busbw factor overstates what crosses the links (algbw = busbw * n/(n+1),
sjeaugey, https://github.com/NVIDIA/nccl-tests/pull/239); both sides use the same nccl-tests
formula, so the comparison is like for like.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from zerosim.units import GiB, MiB

AZURE = "https://github.com/Azure/AI-benchmarking-guide"
AZURE_A100 = (f"{AZURE} Azure_Results/ND_A100_v4_results.md"
              " @3bb66cacc25632d8ece36bc1d5128c5ea886a60b")
AZURE_H200 = (f"{AZURE} Azure_Results/ND_H200_v5_results.md"
              " @7f20e5fa3b2f9a46d8404af1f6fb14b049d6d5cc")
NCCL_ISSUE = "https://github.com/NVIDIA/nccl/issues/"
TESTS_ISSUE = "https://github.com/NVIDIA/nccl-tests/issues/"
# 4 x 200 Gb/s HDR NICs for 8 GPUs: each GPU's share is 25 GB/s * 4 / 8.
A100_4_NICS = {"nics_per_node": 4, "inter_node_bandwidth_GBps": 25.0 * 4 / 8}


@dataclass(frozen=True, kw_only=True)
class Published:
    """One published all_reduce_perf result and the cluster it ran on."""

    label: str
    system: str
    source: str
    """URL, with the file and commit or the issue number."""
    nccl: str | None
    """NCCL version when the source states it."""
    measured: str
    """What the row measured: NVLS on/off, forced algorithm, size, in/out of place."""
    gpu: str
    nodes: int
    gpus_per_node: int
    size_bytes: int
    busbw_GBps: float
    overrides: dict = field(default_factory=dict)
    """[cluster] keys beyond gpu/nodes/gpus_per_node."""
    weak: bool = False
    """From a "why is it slow / unstable" thread: possibly a misconfigured system."""


ROWS = (
    # --- A100 (NVSwitch gen2, no NVLS) ---
    Published(label="azure-a100-8g", system="Azure ND A100 v4", gpu="A100-80GB", nodes=1,
              gpus_per_node=8, size_bytes=8 * GiB, busbw_GBps=231.58, nccl="2.18.5",
              measured="in-place, default algorithm (file says NVLS; A100 has none), 8 GiB",
              source=AZURE_A100),
    Published(label="azure-a100-64m", system="Azure ND A100 v4", gpu="A100-80GB", nodes=1,
              gpus_per_node=8, size_bytes=64 * MiB, busbw_GBps=166.63, nccl="2.18.5",
              measured="in-place, default algorithm, 64 MiB (printed '67M')",
              source=AZURE_A100),
    # A100 40 or 80 GB not stated; NVLink is the same on both.
    Published(label="nccl1048-1node", system="A100 x8, 4x200Gb IB", gpu="A100-80GB", nodes=1,
              gpus_per_node=8, size_bytes=4 * GiB, busbw_GBps=232.54, nccl=None,
              measured="peak of a sweep -b 8 -e 4G, default algorithm; 4 GiB assumed",
              source=f"{NCCL_ISSUE}1048 (= {TESTS_ISSUE}175)"),
    Published(label="nccl1048-2node", system="A100 x8, 4x200Gb IB", gpu="A100-80GB", nodes=2,
              gpus_per_node=8, size_bytes=4 * GiB, busbw_GBps=86.0, nccl=None,
              overrides=A100_4_NICS, weak=True,
              measured="sweep up to 4G, default algorithm; user expected 96 (4 NICs x 24)",
              source=f"{NCCL_ISSUE}1048 (= {TESTS_ISSUE}175)"),
    Published(label="tests100-2node", system="HGX A100 x8, 4x200Gb IB", gpu="A100-80GB", nodes=2,
              gpus_per_node=8, size_bytes=8 * GiB, busbw_GBps=91.0, nccl=None,
              overrides=A100_4_NICS, weak=True,
              measured="peak of a sweep -b 1G -e 8G, default algorithm; 8 GiB assumed",
              source=f"{TESTS_ISSUE}100"),
    # --- H100 / H800 (NVSwitch gen3: NVLS available) ---
    Published(label="nccl2140-nvls-off", system="8x H100 SXM", gpu="H100-80GB", nodes=1,
              gpus_per_node=8, size_bytes=8 * GiB, busbw_GBps=370.0, nccl="2.30.4",
              overrides={"nvlink_sharp": False},
              measured="NVLS off (algbw 211); size not stated, 8 GiB assumed",
              source=f"{NCCL_ISSUE}2140"),
    Published(label="nccl2140-nvls-on", system="8x H100 SXM", gpu="H100-80GB", nodes=1,
              gpus_per_node=8, size_bytes=8 * GiB, busbw_GBps=480.0, nccl="2.30.4",
              measured="NVLS on (algbw 275); size not stated, 8 GiB assumed",
              source=f"{NCCL_ISSUE}2140"),
    Published(label="nccl1455-ring", system="8x H100 SXM", gpu="H100-80GB", nodes=1,
              gpus_per_node=8, size_bytes=4 * GiB, busbw_GBps=367.5, nccl=None,
              overrides={"collective_algorithm": "ring"},
              measured="NCCL_ALGO=RING, -b 2G -e 4G, '365-370' (midpoint)",
              source=f"{NCCL_ISSUE}1455"),
    Published(label="nccl1455-nvls", system="8x H100 SXM", gpu="H100-80GB", nodes=1,
              gpus_per_node=8, size_bytes=4 * GiB, busbw_GBps=480.0, nccl=None,
              overrides={"collective_algorithm": "nvls"},
              measured="NCCL_ALGO=NVLS, -b 2G -e 4G, 8 GPUs",
              source=f"{NCCL_ISSUE}1455"),
    # #1221: 8 x 400 Gb RoCE per node (the H100 preset's NICs); -b 4G -e 8G; figures rounded.
    Published(label="nccl1221-1x8-off", system="H100, 8x400Gb RoCE", gpu="H100-80GB", nodes=1,
              gpus_per_node=8, size_bytes=8 * GiB, busbw_GBps=330.0, nccl="2.19.3",
              overrides={"nvlink_sharp": False},
              measured="NCCL_NVLS_ENABLE=0, 4-8 GiB, '330GB'", source=f"{NCCL_ISSUE}1221"),
    Published(label="nccl1221-1x8-on", system="H100, 8x400Gb RoCE", gpu="H100-80GB", nodes=1,
              gpus_per_node=8, size_bytes=8 * GiB, busbw_GBps=430.0, nccl="2.19.3",
              measured="NCCL_NVLS_ENABLE=1, 4-8 GiB, '430GB'", source=f"{NCCL_ISSUE}1221"),
    Published(label="nccl1221-2x8-off", system="H100, 8x400Gb RoCE", gpu="H100-80GB", nodes=2,
              gpus_per_node=8, size_bytes=8 * GiB, busbw_GBps=330.0, nccl="2.19.3",
              overrides={"nvlink_sharp": False},
              measured="NCCL_NVLS_ENABLE=0, 4-8 GiB, '330GB'", source=f"{NCCL_ISSUE}1221"),
    Published(label="nccl1221-2x8-on", system="H100, 8x400Gb RoCE", gpu="H100-80GB", nodes=2,
              gpus_per_node=8, size_bytes=8 * GiB, busbw_GBps=430.0, nccl="2.19.3",
              measured="NCCL_NVLS_ENABLE=1, 4-8 GiB, '430GB'", source=f"{NCCL_ISSUE}1221"),
    Published(label="nccl1221-4x8", system="H100, 8x400Gb RoCE", gpu="H100-80GB", nodes=4,
              gpus_per_node=8, size_bytes=8 * GiB, busbw_GBps=320.0, nccl="2.19.3",
              measured="NVLS on or off made no difference, 4-8 GiB, '320GB'",
              source=f"{NCCL_ISSUE}1221"),
    # H800: NVLink cut to 400 GB/s bidirectional = 200 one way (stated in the issue).
    Published(label="nccl1374-h800", system="8x H800", gpu="H100-80GB", nodes=1,
              gpus_per_node=8, size_bytes=8 * GiB, busbw_GBps=215.0, nccl=None,
              overrides={"intra_node_bandwidth_GBps": 200.0},
              measured="default algorithm (NVLS); size not stated, 8 GiB assumed",
              source=f"{NCCL_ISSUE}1374"),
    # --- H200 ---
    Published(label="azure-h200-8g", system="Azure ND H200 v5", gpu="H200-141GB", nodes=1,
              gpus_per_node=8, size_bytes=8 * GiB, busbw_GBps=479.98, nccl="2.20.5",
              measured="in-place, NVLS (default), 8 GiB",
              source=AZURE_H200),
    Published(label="azure-h200-64m", system="Azure ND H200 v5", gpu="H200-141GB", nodes=1,
              gpus_per_node=8, size_bytes=64 * MiB, busbw_GBps=368.11, nccl="2.20.5",
              measured="in-place, NVLS (default), 64 MiB (printed '67M')",
              source=AZURE_H200),
    Published(label="tests272-h200", system="8x H200 SXM", gpu="H200-141GB", nodes=1,
              gpus_per_node=8, size_bytes=4 * GiB, busbw_GBps=475.0, nccl="2.20.3",
              measured="peak of a sweep -b 64k -e 4G, default algorithm (NVLS); 4 GiB assumed",
              source=f"{TESTS_ISSUE}272"),
    # NIC speed not stated (8 HCAs per node); the preset's 400 Gb/s is assumed.
    Published(label="tests283-248node", system="H200, 8 NICs/node", gpu="H200-141GB", nodes=248,
              gpus_per_node=8, size_bytes=512 * MiB, busbw_GBps=350.0, nccl=None, weak=True,
              measured="default algorithm, 512 MiB, '~350 typical, <300 at times'",
              source=f"{TESTS_ISSUE}283"),
)


def scenario_for(row: Published):
    """The scenario zerosim simulates the row on: a placeholder model (a lone collective needs
    none) on the row's cluster."""
    from zerosim.scenario.load import build_scenario

    cluster = {"gpu": row.gpu, "nodes": row.nodes, "gpus_per_node": row.gpus_per_node,
               **row.overrides}
    tables = {"model": {"params": 1e9, "layers": 1}, "training": {"seq_len": 1024},
              "variation": {}, "cluster": cluster}
    return build_scenario(tables, base_dir=Path("."))


def compare(row: Published) -> dict:
    """The row with zerosim's busbw and choice beside it; an error message if it fails."""
    out = asdict(row)
    try:
        from zerosim.sim.collective_bench import simulate_collective

        result = simulate_collective(scenario_for(row), "all_reduce", size_bytes=row.size_bytes)
    except Exception as exc:  # noqa: BLE001 - report, never judge: one row must not hide the rest
        return out | {"sim_busbw_GBps": None, "error_pct": None, "algorithm": None,
                      "protocol": None, "failure": f"{type(exc).__name__}: {exc}"}
    sim = result["busbw_GBps"]
    return out | {"sim_busbw_GBps": sim, "algorithm": result.get("algorithm"),
                  "protocol": result.get("protocol"), "failure": None,
                  "error_pct": 100 * (sim - row.busbw_GBps) / row.busbw_GBps}


def summarize(results: list[dict]) -> dict:
    """Mean |error| and rows within 10%, over all simulated rows and over the non-weak ones."""
    def stats(rows: list[dict]) -> dict:
        errors = [abs(r["error_pct"]) for r in rows if r["error_pct"] is not None]
        return {"rows": len(rows), "simulated": len(errors),
                "mean_abs_error_pct": statistics.mean(errors) if errors else None,
                "within_10pct": sum(e <= 10 for e in errors)}
    return {"all": stats(results), "strong_only": stats([r for r in results if not r["weak"]])}


def _size(size_bytes: int) -> str:
    return f"{size_bytes / GiB:g} GiB" if size_bytes >= GiB else f"{size_bytes / MiB:g} MiB"


def _choice(r: dict) -> str:
    return "-" if r["algorithm"] is None else f"{r['algorithm']}/{r['protocol'] or '?'}"


def print_table(results: list[dict], summary: dict) -> None:
    head = (f"{'row':19} {'system':25} {'GPUs':>9} {'size':>8} {'algo/proto':>16} "
            f"{'meas GB/s':>9} {'sim GB/s':>9} {'error':>8}")
    print(head)
    print("-" * len(head))
    for r in results:
        gpus = f"{r['nodes']}x{r['gpus_per_node']}"
        sim = "-" if r["sim_busbw_GBps"] is None else f"{r['sim_busbw_GBps']:.1f}"
        err = "-" if r["error_pct"] is None else f"{r['error_pct']:+.1f}%"
        label = r["label"] + ("*" if r["weak"] else "")
        print(f"{label:19} {r['system']:25} {gpus:>9} {_size(r['size_bytes']):>8} "
              f"{_choice(r):>16} {r['busbw_GBps']:9.1f} {sim:>9} {err:>8}")
    failures: dict[str, list[str]] = {}
    for r in results:
        if r["failure"]:
            failures.setdefault(r["failure"], []).append(r["label"])
    for message, labels in failures.items():
        print(f"simulation failed ({', '.join(labels)}): {message}")
    print("* weak row: from a 'why is it slow / unstable' thread (possibly misconfigured)")
    for name, s in summary.items():
        mean = "-" if s["mean_abs_error_pct"] is None else f"{s['mean_abs_error_pct']:.1f}%"
        print(f"{name}: mean |error| {mean} over {s['simulated']} of {s['rows']} rows; "
              f"{s['within_10pct']} within 10%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the same as JSON")
    args = parser.parse_args()
    results = [compare(row) for row in ROWS]
    summary = summarize(results)
    if args.json:
        print(json.dumps({"rows": results, "summary": summary}, indent=2))
    else:
        print_table(results, summary)


if __name__ == "__main__":
    main()
