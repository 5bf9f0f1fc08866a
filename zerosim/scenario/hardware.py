"""The cluster's numbers in SI units, converted once from the scenario's unit-named keys
(`peak_tflops`, `hbm_GiB`, `intra_node_bandwidth_GBps`, `..._latency_us`): what the engine, the
cost model and the memory verdict read, so that no one converts again."""

from __future__ import annotations

from dataclasses import dataclass

from zerosim.units import GB, GiB, TERA, US


@dataclass(frozen=True)
class Tier:
    """One tier of links (inside a node, between nodes): per GPU, one direction."""

    bandwidth_bytes_per_s: float
    latency_s: float
    """Per ring step (the α of the α-β model)."""


@dataclass(frozen=True)
class Hardware:
    memory_bytes: float
    """Device memory per GPU."""
    compute_flops_per_s: float
    """What layer compute achieves without a profile: the dense 16-bit peak x
    cluster.compute_efficiency."""
    hbm_bytes_per_s: float
    intra: Tier
    inter: Tier

    @classmethod
    def of(cls, cluster) -> "Hardware":
        """From a ClusterConfig."""
        peak = cluster.peak_tflops * TERA
        return cls(memory_bytes=cluster.hbm_GiB * GiB,
                   compute_flops_per_s=peak * cluster.compute_efficiency,
                   hbm_bytes_per_s=cluster.hbm_bandwidth_GBps * GB,
                   intra=Tier(cluster.intra_node_bandwidth_GBps * GB,
                              cluster.intra_node_latency_us * US),
                   inter=Tier(cluster.inter_node_bandwidth_GBps * GB,
                              cluster.inter_node_latency_us * US))
