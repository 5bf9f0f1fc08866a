"""One frozen dataclass per scenario table: [model], [cluster], [training], and the root Scenario.

Field docstrings give units; units also live in the key names. Values are checked on construction,
and an impossible value raises InputError with the arithmetic that rules it out. Reading TOML,
presets, overrides and companion files (Hugging Face, DeepSpeed) lives in load.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zerosim.contract import ALL_REDUCE, REDUCE_SCATTER, STAGES
from zerosim.errors import InputError
from zerosim.frameworks import FRAMEWORKS, REGISTRY
from zerosim.scenario.checks import one_of as _one_of, positive as _positive, within_cap
from zerosim.scenario.cluster import ALGORITHMS, PROTOCOLS, ClusterConfig
from zerosim.scenario.axes import check_axes
from zerosim.scenario.family import check_scenario, check_training
from zerosim.scenario.parallelism_table import ParallelismConfig
from zerosim.scenario.model_table import MLPS, NORMS, POSITIONS, SHAPE_KEYS, ModelConfig
from zerosim.scenario.variation import VariationConfig
from zerosim.units import BYTES_PER_ELEMENT, mib_to_bytes

PRECISIONS = tuple(BYTES_PER_ELEMENT)
OPTIMIZERS = ("adam", "adamw", "sgd", "sgd_momentum")
CHECKPOINTING = ("none", "selective", "selective_op", "full")
OFFLOAD = ("none", "cpu", "nvme")
GRADIENT_REDUCTIONS = (REDUCE_SCATTER, ALL_REDUCE)
REDUCE_DTYPES = ("param", "fp32")
AUTOCAST = ("none", "fp16", "bf16")
# Which flash attention kernel ran (zerosim/hardware/ has each one's measured rates).
FLASH_KERNELS = ("fa2", "fa1", "triton")
# How the norms were written (zerosim/sim/op_costs.py: a fused kernel or RMSNorm composed in fp32).
NORM_KERNELS = ("fused", "composite_fp32")
SOFTMAX_KERNELS = ("fused", "eager")



@dataclass(frozen=True, kw_only=True)
class TrainingConfig:
    """[training]: what one rank does per step, in the vocabulary of DeepSpeed's zero_optimization."""

    zero_stage: int = 0
    """0 = DDP, 1 = optimizer states sharded, 2 = + gradients, 3 = + parameters (DeepSpeed's numbers)."""
    precision: str = "bf16"
    """Parameter and gradient dtype. "bf16"/"fp16" are mixed precision with an fp32 master copy."""
    autocast: str = "none"
    """torch.autocast (AMP) over fp32 parameters (precision = "fp32"): "fp16" or "bf16" is the
    dtype its matmuls and activations run in, with fp32 parameters, gradients and moments and no
    master copy, and the 16-bit copies of the weights it casts held (compute_dtype, and
    analytic/model.activations). "none": no autocast."""
    optimizer: str = "adam"
    """"adam"/"adamw" (2 fp32 moments), "sgd_momentum" (1), "sgd" (none)."""
    micro_batch: int = 1
    """Sequences per rank per micro-step, b."""
    gradient_accumulation: int = 1
    """Micro-steps per optimizer step, each of micro_batch sequences. DDP and ZeRO-1 reduce
    gradients once, in the last micro-step (DDP's no_sync); ZeRO-2 reduce-scatters and ZeRO-3
    gathers and reduce-scatters in every micro-step (DeepSpeed's and FSDP's behaviour)."""
    seq_len: int | None = None
    """Tokens per sequence, s. Default: model.max_seq_len."""
    activation_checkpointing: str = "none"
    """"none", "selective" (recompute attention's s^2 part: Korthikanti et al.; nothing to save
    under flash attention), "selective_op" (torchtitan's per-op policy: keep every other matmul's
    output and the attention output, recompute the rest) or "full" (keep only layer inputs)."""
    flash_attention: bool = False
    """Fused attention that never stores the s x s score matrix (keeps only softmax statistics)."""
    softmax_kernel: str = "fused"
    """Without flash attention, how the s x s softmax ran: "fused" (one kernel reading the 16-bit
    scores and writing the probabilities, as Megatron's scaled masked softmax: the default
    pricing) or "eager" (Megatron's forward_torch_softmax fallback and plain PyTorch: the scores
    cast to fp32, scaled, masked and soft-maxed in fp32 and cast back, five kernels each way, and
    the fp32 probabilities saved for backward)."""
    flash_kernel: str = "fa2"
    """Which flash kernel ran, for the per-op model's time (the memory is the same; the flat model
    and a profile do not look at it): "fa2" (FlashAttention-2, PyTorch's SDPA flash backend),
    "fa1" (the first FlashAttention) or "triton" (FlashAttention written in Triton, e.g.
    llm-foundry's attn_impl = "triton"). Needs flash_attention = true."""
    norm_kernel: str = "fused"
    """How the norms ran, for the per-op model's time: "fused" (one kernel: F.rms_norm,
    F.layer_norm, apex or Triton fused norms) or "composite_fp32" (RMSNorm written in eager ops in
    fp32, as Meta's Llama reference, torchtitan's norm_type = "rmsnorm" and Hugging Face's
    LlamaRMSNorm do: 8 kernels forward, 16 backward). Its fp32 intermediates' memory is not
    modelled. composite_fp32 needs model.norm = "rmsnorm"."""
    reduce_bucket_MiB: float = 25.0
    """Gradient bucket, MiB (2**20 bytes). Default: PyTorch DDP's bucket_cap_mb = 25."""
    allgather_bucket_MiB: float = 25.0
    """Chunk of the post-step parameter all-gather of stages 1-2, MiB (in place: no extra memory)."""
    prefetch_layers: int = 1
    """ZeRO-3: layers gathered ahead of the one computing (0 = no prefetch)."""
    optimizer_offload: str = "none"
    """"cpu" keeps optimizer states (and the gradient shard they consume) in host memory and
    steps them there (ZeRO-Offload); "nvme" keeps them on the node's NVMe drives, read and
    written around the CPU step (ZeRO-Infinity). Timing: sim/offload.py."""
    param_offload: str = "none"
    """Stage 3: "cpu" or "nvme" keeps each rank's parameter shard in host memory (or on NVMe),
    copied to the GPU before every all-gather (DeepSpeed's offload_param)."""
    delayed_update: bool = False
    """ZeRO-Offload's delayed parameter update (Ren et al. 2021 §5.2): the CPU step of the
    previous step's gradients runs beside this step's forward and backward. No DeepSpeed key."""
    quantized_weights: bool = False
    """Stage 3, ZeRO++ qwZ: parameter all-gathers carry INT8 with one scale per block."""
    quantized_gradients: bool = False
    """Stage 3, ZeRO++ qgZ: gradients reduced by INT4 all-to-alls inside and then across nodes
    instead of a reduce-scatter."""
    overlap_comm: bool = True
    """Collectives run beside compute on their own streams (DeepSpeed's overlap_comm). false:
    every collective completes before compute goes on, as zero_real's synchronous ones do."""
    gradient_reduction: str = "reduce_scatter"
    """Stages 1-2: "reduce_scatter" gradients to their owners (the ZeRO paper's 2Ψ per step with
    the parameter all-gather), or "all_reduce" them first as DeepSpeed does by default (3Ψ)."""
    framework: str = FRAMEWORKS[0]
    """Whose memory to model where they differ. "zero": the ZeRO paper's accounting, which
    zero_real implements (nothing beyond states, activations and the stage's buffers). The
    others add what their code holds, including the loss computed in fp32 over the vocabulary:
    "deepspeed" (each reduced gradient partition converted to fp32 for the optimizer step),
    "fsdp2" (stages 2-3), "ddp" (stage 0: buckets copy the gradients unless
    gradient_as_bucket_view)."""
    reduce_dtype: str = "param"
    """Stages 2-3: gradients reduce-scattered and kept sharded in the parameters' dtype ("param")
    or in "fp32" (FSDP2's MixedPrecisionPolicy(reduce_dtype=float32), torchtitan's default):
    twice the bytes of a 16-bit gradient, on the wire and in the shard."""
    gradient_as_bucket_view: bool = False
    """DDP: gradients live in the bucket buffers themselves (PyTorch's default False keeps a
    second copy of every gradient in its buckets)."""
    prefetch_bucket_elements: int | None = None
    """ZeRO-3 fetched module by module (a framework that does, DeepSpeed): parameter elements
    prefetched ahead of the module computing (ds_config stage3_prefetch_bucket_size). None:
    the framework's default (DeepSpeed's 5e7)."""
    max_live_parameters: int | None = None
    """Module-by-module ZeRO-3: gathered parameter elements allowed at once before a fetch
    releases what it can (stage3_max_live_parameters). None: the framework's default (1e9)."""
    max_reuse_distance: int | None = None
    """Module-by-module ZeRO-3: a parameter the trace uses again within this many elements is
    kept gathered after a visit (stage3_max_reuse_distance). None: the framework's default
    (1e9)."""
    param_persistence_threshold: int | None = None
    """Module-by-module ZeRO-3: parameters of at most this many elements are never partitioned,
    kept whole on every rank and never gathered (stage3_param_persistence_threshold). None: the
    framework's default (1e5)."""
    module_hook_us: float | None = None
    """Module-by-module ZeRO-3: the host microseconds the framework's hooks take per module
    visit (fetch, prefetch, release; bench/deepspeed_hooks.py measures them on a box). None:
    the framework's measured figure (DeepSpeed's: a figure per visit and one per parameter the
    module owns). Not used where ZeRO-3 is modelled unit by unit (offload, ZeRO++, hybrid
    sharding, tensor parallelism, layers of other than two norms)."""

    def __post_init__(self) -> None:
        if self.zero_stage not in STAGES:
            raise InputError(
                f"training.zero_stage = {self.zero_stage} is not a ZeRO stage; allowed: 0 (DDP), "
                f"1 (optimizer states), 2 (+ gradients), 3 (+ parameters)")
        _one_of("training.precision", self.precision, PRECISIONS)
        _one_of("training.optimizer", self.optimizer, OPTIMIZERS)
        _one_of("training.autocast", self.autocast, AUTOCAST)
        if self.autocast != "none" and self.precision != "fp32":
            raise InputError(f"training.autocast = {self.autocast!r} casts fp32 parameters, but "
                             f"training.precision = {self.precision!r} (AMP keeps parameters "
                             f"in fp32: set precision = 'fp32')")
        _one_of("training.activation_checkpointing", self.activation_checkpointing, CHECKPOINTING)
        _one_of("training.optimizer_offload", self.optimizer_offload, OFFLOAD)
        _one_of("training.param_offload", self.param_offload, OFFLOAD)
        _one_of("training.framework", self.framework, FRAMEWORKS)  # before its class is asked
        check_training(self)
        _positive("training.micro_batch", self.micro_batch)
        _positive("training.gradient_accumulation", self.gradient_accumulation)
        if self.seq_len is not None:
            _positive("training.seq_len", self.seq_len)
        for key in ("reduce_bucket_MiB", "allgather_bucket_MiB"):
            value = getattr(self, key)
            _positive(f"training.{key}", value)
            if mib_to_bytes(value) < 1:
                raise InputError(f"training.{key} = {value} is less than one byte "
                                 f"({value} * 2**20 = {value * 2**20:.3g} bytes)")
            within_cap(f"training.{key} in bytes", value * 2**20, f"{value:g} * 2**20")
        _positive("training.prefetch_layers", self.prefetch_layers, allow_zero=True)
        _fetch_knobs(self)
        _one_of("training.gradient_reduction", self.gradient_reduction, GRADIENT_REDUCTIONS)
        _one_of("training.reduce_dtype", self.reduce_dtype, REDUCE_DTYPES)
        _one_of("training.flash_kernel", self.flash_kernel, FLASH_KERNELS)
        _one_of("training.norm_kernel", self.norm_kernel, NORM_KERNELS)
        _one_of("training.softmax_kernel", self.softmax_kernel, SOFTMAX_KERNELS)
        if self.softmax_kernel != "fused" and self.flash_attention:
            raise InputError(f"training.softmax_kernel = {self.softmax_kernel!r} names how the "
                             f"s x s softmax ran, but training.flash_attention = true computes "
                             f"it inside the kernel")
        if self.flash_kernel != "fa2" and not self.flash_attention:
            raise InputError(f"training.flash_kernel = {self.flash_kernel!r} names a flash "
                             f"kernel, but training.flash_attention = false (set flash_kernel = "
                             f"'fa2' too, or flash_attention = true)")
        if self.zero_stage not in REGISTRY[self.framework].stages:
            raise InputError(f"training.framework = {self.framework!r} runs ZeRO stage(s) "
                             f"{', '.join(map(str, REGISTRY[self.framework].stages))}, not "
                             f"training.zero_stage = {self.zero_stage}")

    @property
    def compute_dtype(self) -> str:
        """The dtype activations and matmuls run in: autocast's, else the parameters'."""
        return self.precision if self.autocast == "none" else self.autocast

    @property
    def tokens_per_rank(self) -> int:
        """Tokens one rank trains on per optimizer step (all its micro-steps)."""
        return self.micro_batch * (self.seq_len or 0) * self.gradient_accumulation


FETCH_KNOBS = ("prefetch_bucket_elements", "max_live_parameters", "max_reuse_distance",
               "param_persistence_threshold", "module_hook_us")
"""[training] keys of module-by-module ZeRO-3 (Framework.fetch_defaults)."""


def _fetch_knobs(t: TrainingConfig) -> None:
    """The fetch knobs are whole numbers (0 allowed: no prefetch, nothing persists), the hooks'
    microseconds any number >= 0, and they mean something only to a framework that fetches
    module by module."""
    given = [key for key in FETCH_KNOBS if getattr(t, key) is not None]
    for key in given:
        value = getattr(t, key)
        if key == "module_hook_us":
            _positive("training.module_hook_us", value, allow_zero=True)
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"training.{key} must be a whole number of elements, got {value!r}")
        _positive(f"training.{key}", value, allow_zero=True)
    if given and REGISTRY[t.framework].fetch_defaults is None:
        able = " or ".join(repr(name) for name, f in REGISTRY.items() if f.fetch_defaults)
        raise InputError(f"training.{given[0]} sets how ZeRO-3 fetches module by module, which "
                         f"training.framework = {t.framework!r} does not (use {able})")


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """A whole scenario file: its tables plus where it came from."""

    model: ModelConfig
    cluster: ClusterConfig
    training: TrainingConfig
    parallelism: ParallelismConfig = field(default_factory=ParallelismConfig)
    variation: VariationConfig = field(default_factory=VariationConfig)
    source: str = ""
    """Path of the scenario file (for reports)."""
    profile: Any = field(default=None, compare=False, repr=False)
    """The calibration profile cluster.profile names, loaded (zerosim.scenario.profile.Profile), or None."""
    default_notes: tuple[str, ...] = field(default=(), compare=False, repr=False)
    """What the defaults that decide the answer were, and which key sets each
    (scenario/defaults.py)."""

    def __post_init__(self) -> None:
        m, t = self.model, self.training
        for key in ("slow_ranks", "degraded_links"):
            for rank in getattr(self.variation, key):
                if not 0 <= rank < self.world_size:
                    raise InputError(
                        f"variation.{key} names rank {rank}, but ranks are 0..{self.world_size - 1} "
                        f"({self.cluster.nodes} nodes x {self.cluster.gpus_per_node} GPUs)")
        if t.seq_len is not None:
            accumulation = (f" x gradient_accumulation {t.gradient_accumulation}"
                            if t.gradient_accumulation > 1 else "")
            within_cap("tokens per step", t.tokens_per_rank * self.world_size,
                       f"micro_batch {t.micro_batch} x seq_len {t.seq_len}{accumulation} x "
                       f"{self.world_size} ranks")
        if t.norm_kernel != "fused" and (m.is_bare or m.norm != "rmsnorm"):
            raise InputError(f"training.norm_kernel = {t.norm_kernel!r} is RMSNorm written in fp32 "
                             f"eager ops, but " + ("a bare-Ψ model has no norms" if m.is_bare
                                                   else f"model.norm = {m.norm!r}"))
        check_scenario(self)
        check_axes(self)
        if m.is_bare:
            return  # no shape: the sequence does not enter the memory of model states
        if t.seq_len is None:
            raise InputError("training.seq_len is not set and model.max_seq_len gives no default; "
                             "set training.seq_len")
        if m.position == "learned" and t.seq_len > m.max_seq_len:
            raise InputError(
                f"training.seq_len = {t.seq_len} exceeds model.max_seq_len = {m.max_seq_len} "
                f"(learned position embeddings have {m.max_seq_len} rows)")

    @property
    def world_size(self) -> int:
        return self.cluster.world_size


__all__ = ["ALGORITHMS", "PROTOCOLS", "ClusterConfig", "ModelConfig", "ParallelismConfig",
           "Scenario", "TrainingConfig", "TABLES"]

TABLES = {"model": ModelConfig, "cluster": ClusterConfig, "training": TrainingConfig,
          "parallelism": ParallelismConfig, "variation": VariationConfig}
