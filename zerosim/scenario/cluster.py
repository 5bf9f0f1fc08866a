"""[cluster]: the nodes, their GPUs, the links inside and between nodes, and the collective
library that drives them. Checked on construction; an impossible value is one InputError."""

from __future__ import annotations

from dataclasses import dataclass, fields

from zerosim.contract import COLLECTIVE_IMPLS
from zerosim.errors import InputError
from zerosim.hardware import DEFAULT_GPU, DEVICES, Gpu
from zerosim.scenario.checks import one_of, positive, within_cap
from zerosim.scenario.hardware import Hardware
from zerosim.scenario.host import CPU_ADAM_MELEMENTS_PER_S_PER_CORE, Host, host_of
from zerosim.scenario.presets import GPU_PRESETS

_DEFAULT = GPU_PRESETS[DEFAULT_GPU]

LIBRARIES = ("nccl", "gloo")
# What each library can run; "auto" is its own choice (NCCL's tuner; gloo's ring).
ALGORITHMS_OF = {"nccl": ("auto", "ring", "tree", "nvls", "nvls_tree", "pat", "hierarchical"),
                 "gloo": ("auto", "ring", "hierarchical")}
ALGORITHMS = ALGORITHMS_OF["nccl"]
# NCCL's protocols, spelled as NCCL_PROTO spells them (src/graph/tuning.cc, ncclProtoStr).
PROTOCOLS = ("auto", "LL", "LL128", "Simple")
PCIE_GENS = (3, 4, 5, 6)
# What one flat fraction of peak assumes when nothing better is known (a bare Ψ has no shapes to
# time op by op). A round guess, not a measurement: set cluster.compute_efficiency to replace it.
DEFAULT_COMPUTE_EFFICIENCY = 0.5
COMPUTE_MODELS = ("flat", "op")
HOST_CPUS = ("intel", "amd")


@dataclass(frozen=True, kw_only=True)
class ClusterConfig:
    """[cluster]: nodes of identical GPUs; links in two tiers (inside a node, between nodes)."""

    nodes: int = 1
    """Number of nodes."""
    gpus_per_node: int = 8
    """GPUs (ranks) per node; on a CPU box, processes per box."""
    gpu: str = DEFAULT_GPU
    """A GPU of the catalogue (zerosim.hardware) filling the numbers below (scenario.presets);
    any of them may be overridden."""
    hbm_GiB: float = float(_DEFAULT["hbm_GiB"])
    """Device memory per GPU, GiB (2**30 bytes)."""
    peak_tflops: float = float(_DEFAULT["peak_tflops"])
    """Dense 16-bit peak per GPU, TFLOP/s (1e12)."""
    hbm_bandwidth_GBps: float = float(_DEFAULT["hbm_bandwidth_GBps"])
    """Device memory bandwidth, GB/s (1e9)."""
    intra_node_bandwidth_GBps: float = float(_DEFAULT["intra_node_bandwidth_GBps"])
    """Per-GPU, one-direction bandwidth of the intra-node link (NVLink-like), GB/s: the data
    sheet's figure. NCCL reaches its own fraction of it (nccl_tables.NVLINK_PER_LINK_GBPS)."""
    intra_node_latency_us: float | None = None
    """Latency of one hop over the intra-node link, microseconds. Unset (GPU presets): NCCL's
    per-hop table by algorithm and protocol; set, it replaces that table's figure for all."""
    inter_node_bandwidth_GBps: float = float(_DEFAULT["inter_node_bandwidth_GBps"])
    """Per-GPU share of the node's NICs, one direction, GB/s: NIC rate x nics_per_node /
    gpus_per_node (a 400 Gb/s NIC is 50 GB/s)."""
    inter_node_latency_us: float | None = None
    """Latency of one hop between nodes, microseconds; unset: NCCL's table, as above."""
    nics_per_node: int | None = None
    """NICs per node that carry collectives. Unset: the preset node's (one per GPU on DGX A100
    and H100, one per two on DGX-2)."""
    rail_optimized: bool = True
    """The fabric connects NIC i of every node through the same leaf switch (a rail), so NCCL's
    rings and trees, which pair NIC i with NIC i, never cross the spine. false: every transfer
    between nodes crosses it and pays `oversubscription`."""
    oversubscription: float = 1.0
    """Leaf-to-spine oversubscription (1 = a full fat tree; 2 = half the bandwidth up)."""
    nvlink_sharp: bool = bool(_DEFAULT["nvlink_sharp"])
    """NVLink SHARP (NVLS): the NVSwitch reduces in the switch (H100/H200 NVSwitch gen3)."""
    pcie_gen: int = int(_DEFAULT["pcie_gen"])
    """PCIe generation between a GPU and its NIC (x16): NCCL caps a channel at its rate."""
    host_cpu: str = str(_DEFAULT["host_cpu"])
    """"intel" or "amd": NCCL's tuner charges AMD hosts more network overhead per ring step and
    caps LL lower across nodes (DGX A100 has AMD EPYC; DGX-2 and DGX H100 Intel Xeon)."""
    collective_library: str = str(_DEFAULT["collective_library"])
    """"nccl" (GPUs: NCCL's algorithms, protocols and tuner) or "gloo" (one ring, α-β per step)."""
    cuda_context_MiB: float | None = None
    """Device memory of the CUDA context, MiB, counted in device_bytes (what nvidia-smi shows).
    Unset: the GPU's measured figure (its record's cuda_context_MiB)."""
    compute_model: str | None = None
    """"op": a model given by shape on a GPU preset is timed op by op (sim/op_costs.py: GEMMs,
    attention and memory-bound ops from data sheets and microbenchmarks; a bare Ψ, a CPU preset
    or a GPU without a spec keep the flat model). "flat": FLOPs / (peak x compute_efficiency).
    Unset: "op", or "flat" when compute_efficiency is set (the explicit override). With a
    calibration profile, layers are timed from its measurements instead; under "op" NCCL's
    kernels take their SMs from compute while they run. On references/ "op" is 14.1% off and
    "flat" 16.9% (bench/references_compute_models.py)."""
    power_limit_W: float | None = None
    """Board power limit below the part's default (nvidia-smi -pl): compute-bound work runs at
    the GEMM throughput measured at that limit over the one at the default, interpolated
    between measured limits (the GPU record's gemm_tflops_by_power_W; H100: 500-700 W). Unset:
    the default limit."""
    compute_efficiency: float | None = None
    """Fraction of peak_tflops that compute achieves under the flat model (unset:
    DEFAULT_COMPUTE_EFFICIENCY). With a calibration profile, layers are timed from its
    measurements instead (this still times a bare-Ψ model, which its per-layer fits cannot)."""
    profile: str | None = None
    """Calibration profile JSON written by `zero-real calibrate` (relative to the scenario file):
    its measured collective, compute, optimizer and memory figures replace the preset's."""
    collective_impl: str = "native"
    """Which measured implementation of the profile prices collectives: "native" (the
    library's own, e.g. NCCL or gloo) or "ring" (zero_real's ring from send/recv)."""
    collective_algorithm: str = "auto"
    """As NCCL_ALGO: "auto" (NCCL's tuner: the least predicted time per call; gloo: ring),
    "ring", "tree", "nvls", "nvls_tree", "pat", or "hierarchical" (rings inside nodes and
    between them, pipelined; not an NCCL algorithm)."""
    collective_protocol: str = "auto"
    """As NCCL_PROTO: "auto" (the tuner's choice), "LL", "LL128" or "Simple"."""
    host_link_GBps: float | None = None
    """A GPU's link to host memory, one direction, GB/s, as pinned copies reach it (offload).
    Unset: PCIe x16 of pcie_gen x the measured fraction (scenario/host.py)."""
    gpus_per_host_link: int = 1
    """GPUs behind one host link, sharing it when they copy at once (e.g. 2 per PCIe switch)."""
    cpu_cores_per_gpu: float | None = None
    """CPU cores stepping each GPU's offloaded optimizer. Unset: the preset node's cores over
    gpus_per_node (scenario/host.py)."""
    cpu_adam_Melements_per_s_per_core: float = CPU_ADAM_MELEMENTS_PER_S_PER_CORE
    """CPU Adam's rate per core, millions of elements per second (ZeRO-Offload Table 4)."""
    nvme_read_GBps: float | None = None
    """The node's NVMe read bandwidth, GB/s, shared by its GPUs (offload to nvme needs it)."""
    nvme_write_GBps: float | None = None
    """The node's NVMe write bandwidth, GB/s."""

    def __post_init__(self) -> None:
        for key in ("nodes", "gpus_per_node"):
            if getattr(self, key) < 1:
                raise InputError(
                    f"cluster.{key} = {getattr(self, key)} must be >= 1: cluster.nodes "
                    f"({self.nodes}) * cluster.gpus_per_node ({self.gpus_per_node}) = "
                    f"{self.nodes * self.gpus_per_node} GPUs")
            positive(f"cluster.{key}", getattr(self, key))  # the upper bound
        within_cap("the world size", self.world_size, f"cluster.nodes ({self.nodes}) * "
                   f"cluster.gpus_per_node ({self.gpus_per_node})")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type.startswith("float") and value is not None:
                positive(f"cluster.{f.name}", value,
                         allow_zero=f.name.endswith(("latency_us", "context_MiB")))
        within_cap("GPU memory in bytes", self.hbm_GiB * 2**30, f"{self.hbm_GiB:g} GiB * 2**30")
        if self.cuda_context_MiB is not None:
            within_cap("the CUDA context in bytes", self.cuda_context_MiB * 2**20,
                       f"{self.cuda_context_MiB:g} MiB * 2**20")
        if self.compute_efficiency is not None and self.compute_efficiency > 1:
            raise InputError(f"cluster.compute_efficiency = {self.compute_efficiency} is a fraction "
                             f"of peak and must be <= 1")
        if self.oversubscription < 1:
            raise InputError(f"cluster.oversubscription = {self.oversubscription} must be >= 1 "
                             f"(1 = full bandwidth to the spine)")
        if self.nics_per_node is not None:
            positive("cluster.nics_per_node", self.nics_per_node)
        positive("cluster.gpus_per_host_link", self.gpus_per_host_link)
        one_of("cluster.pcie_gen", self.pcie_gen, PCIE_GENS)
        one_of("cluster.host_cpu", self.host_cpu, HOST_CPUS)
        one_of("cluster.collective_impl", self.collective_impl, COLLECTIVE_IMPLS)
        if self.compute_model is not None:
            one_of("cluster.compute_model", self.compute_model, COMPUTE_MODELS)
        if self.compute_model == "op" and self.compute_efficiency is not None:
            raise InputError(f"cluster.compute_efficiency = {self.compute_efficiency} is the flat "
                             f"model's; cluster.compute_model = 'op' times each op instead")
        self._check_library()
        self._check_power_limit()
        self._check_preset()

    @classmethod
    def preset(cls, gpu: str, **keys) -> "ClusterConfig":
        """The cluster of the preset `gpu` (its figures, as a scenario's `gpu = ...` fills
        them), with `keys` overriding any of them."""
        one_of("cluster.gpu", gpu, tuple(GPU_PRESETS))
        figures = {k: v for k, v in GPU_PRESETS[gpu].items() if v is not None}
        return cls(**{**figures, **keys, "gpu": gpu})

    def _check_preset(self) -> None:
        """A cluster built in Python with another preset's name but the default GPU's figures
        (ClusterConfig(gpu=...) fills nothing: the dataclass's defaults are the default GPU's)
        would be silently wrong: refused, naming the way that fills them."""
        if self.gpu == DEFAULT_GPU or self.gpu not in GPU_PRESETS:
            return
        named = GPU_PRESETS[self.gpu]
        keys = [k for k, v in named.items()
                if k in _DEFAULT and v is not None and v != _DEFAULT[k]]
        if keys and all(getattr(self, k) == _DEFAULT[k] for k in keys):
            raise InputError(f"cluster.gpu = {self.gpu!r} with {DEFAULT_GPU}'s figures "
                             f"({', '.join(keys[:3])}, ...): build it with "
                             f"ClusterConfig.preset({self.gpu!r}, ...) or zerosim.load(cluster="
                             f"{{'gpu': {self.gpu!r}, ...}}), which fill {self.gpu}'s")

    def _check_power_limit(self) -> None:
        if self.power_limit_W is None:
            return
        if self.profile is not None:
            raise InputError(f"cluster.power_limit_W = {self.power_limit_W:g} with cluster.profile: "
                             f"the profile's compute was measured at its GPU's own power limit; "
                             f"drop one of them")
        curve = self.device.gemm_tflops_by_power_W if self.device is not None else ()
        if not curve:
            measured = ", ".join(name for name, gpu in DEVICES.items()
                                 if gpu.gemm_tflops_by_power_W)
            raise InputError(f"cluster.power_limit_W = {self.power_limit_W:g}: no GEMM "
                             f"throughput under a power limit is known for gpu = '{self.gpu}' "
                             f"(known for: {measured})")
        low, high = curve[0][0], curve[-1][0]
        if not low <= self.power_limit_W <= high:
            raise InputError(f"cluster.power_limit_W = {self.power_limit_W:g} is outside the "
                             f"measured {low:g}-{high:g} W for {self.gpu}")

    @property
    def timing(self) -> str:
        """The compute model in use: compute_model, else "op" unless compute_efficiency is set."""
        if self.compute_model is not None:
            return self.compute_model
        return "flat" if self.compute_efficiency is not None else "op"

    @property
    def power_scale(self) -> float:
        """Compute-bound throughput at power_limit_W over that at the default limit (1 unset)."""
        if self.power_limit_W is None:
            return 1.0
        curve = self.device.gemm_tflops_by_power_W
        for (w0, r0), (w1, r1) in zip(curve, curve[1:]):
            if self.power_limit_W <= w1:
                rate = r0 + (r1 - r0) * (self.power_limit_W - w0) / (w1 - w0)
                return rate / curve[-1][1]
        return 1.0

    def _check_library(self) -> None:
        library = self.collective_library
        one_of("cluster.collective_library", library, LIBRARIES)
        one_of("cluster.collective_algorithm", self.collective_algorithm, ALGORITHMS_OF[library])
        one_of("cluster.collective_protocol", self.collective_protocol, PROTOCOLS)
        if library == "nccl" and self.generation is None:
            raise InputError(f"cluster.collective_library = 'nccl' needs a GPU preset, but "
                             f"cluster.gpu = {self.gpu!r} (use 'gloo')")
        if library == "gloo":
            if self.collective_protocol != "auto":
                raise InputError(f"cluster.collective_protocol = {self.collective_protocol!r}: "
                                 f"gloo has no protocols (NCCL's LL, LL128 and Simple)")
            unset = [k for k in ("intra_node_latency_us", "inter_node_latency_us")
                     if getattr(self, k) is None]
            if unset:
                raise InputError(f"cluster.collective_library = 'gloo' prices every ring step "
                                 f"with a latency: set {' and '.join('cluster.' + k for k in unset)}")
        if self.nvlink_sharp and self.generation in (None, "volta", "ampere"):
            raise InputError(f"cluster.nvlink_sharp = true needs NVSwitch gen3 (Hopper or later), "
                             f"but cluster.gpu = {self.gpu!r}")

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def device(self) -> Gpu | None:
        """The catalogue's record of cluster.gpu (None: a name it does not hold)."""
        return DEVICES.get(self.gpu)

    @property
    def generation(self) -> str | None:
        """The GPU generation that picks NCCL's tables ("volta" .. "hopper"); None for CPUs."""
        return None if self.device is None else self.device.generation

    @property
    def efficiency(self) -> float:
        """compute_efficiency, or the default when it is unset."""
        return (DEFAULT_COMPUTE_EFFICIENCY if self.compute_efficiency is None
                else self.compute_efficiency)

    @property
    def cuda_context_bytes(self) -> int:
        mib = self.cuda_context_MiB
        if mib is None:
            mib = 0.0 if self.device is None else self.device.cuda_context_MiB
        return round(mib * 2**20)

    @property
    def nics(self) -> int:
        """NICs per node that carry collectives."""
        if self.nics_per_node is not None:
            return self.nics_per_node
        per_nic = 1 if self.device is None else self.device.node.gpus_per_nic
        return max(1, self.gpus_per_node // per_nic)

    @property
    def notes(self) -> list[str]:
        """What the scenario sets that changes nothing here, said rather than dropped."""
        if self.oversubscription > 1 and self.rail_optimized and self.nodes > 1:
            return [f"cluster.oversubscription = {self.oversubscription:g} does not slow a "
                    f"rail-optimized fabric: NCCL's rings and trees keep to their rail (set "
                    f"cluster.rail_optimized = false to cross the spine)"]
        return []

    @property
    def host(self) -> Host:
        """The host side per GPU in SI units (offload)."""
        return host_of(self)

    @property
    def hardware(self) -> Hardware:
        """These numbers in SI units."""
        return Hardware.of(self)
