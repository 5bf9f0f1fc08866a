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
    latency_s: float | None
    """Per hop (the α of the α-β model); None: the collective library's own table."""


@dataclass(frozen=True)
class Fabric:
    """What NCCL's model needs beyond the two tiers."""

    generation: str | None
    nics_per_node: int
    nic_bytes_per_s: float
    """One NIC, one direction, as it reaches the spine (oversubscription applied off-rail)."""
    pcie_gen: int
    nvlink_sharp: bool
    host_cpu: str


@dataclass(frozen=True)
class Hardware:
    memory_bytes: float
    """Device memory per GPU."""
    compute_flops_per_s: float
    """What compute achieves as one fraction of peak: the dense 16-bit peak x
    cluster.compute_efficiency (or its default) x the power limit's share (power_scale)."""
    hbm_bytes_per_s: float
    intra: Tier
    inter: Tier
    """Per GPU: its share of the node's NICs (divided by the oversubscription off-rail)."""
    fabric: Fabric

    @classmethod
    def of(cls, cluster) -> "Hardware":
        """From a ClusterConfig."""
        peak = cluster.peak_tflops * TERA
        # Off-rail every transfer between nodes crosses the oversubscribed spine.
        spine = 1.0 if cluster.rail_optimized else cluster.oversubscription
        per_gpu = cluster.inter_node_bandwidth_GBps * GB / spine
        fabric = Fabric(generation=cluster.generation, nics_per_node=cluster.nics,
                        nic_bytes_per_s=per_gpu * cluster.gpus_per_node / cluster.nics,
                        pcie_gen=cluster.pcie_gen, nvlink_sharp=cluster.nvlink_sharp,
                        host_cpu=cluster.host_cpu)
        return cls(memory_bytes=cluster.hbm_GiB * GiB,
                   compute_flops_per_s=peak * cluster.efficiency * cluster.power_scale,
                   hbm_bytes_per_s=cluster.hbm_bandwidth_GBps * GB,
                   intra=Tier(cluster.intra_node_bandwidth_GBps * GB,
                              _seconds(cluster.intra_node_latency_us)),
                   inter=Tier(per_gpu, _seconds(cluster.inter_node_latency_us)),
                   fabric=fabric)


def _seconds(us: float | None) -> float | None:
    return None if us is None else us * US
