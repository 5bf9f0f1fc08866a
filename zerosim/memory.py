"""The analytic per-rank memory of DDP and ZeRO-1/2/3, in bytes.

Model states follow the ZeRO paper (Rajbhandari et al. 2020, arXiv:1910.02054), §5.1 and Table 1,
generalised from fp16 + K = 12 to any precision and optimizer:

    stage 0 (DDP)    (bp + bg + K) * Ψ
    stage 1 (P_os)   (bp + bg) * Ψ + K * Ψ/N
    stage 2 (P_os+g) bp * Ψ + (bg + K) * Ψ/N
    stage 3 (P_os+g+p)     (bp + bg + K) * Ψ/N

with bp, bg the bytes of a parameter and a gradient, and K the optimizer's bytes per parameter.
Shards are one contiguous slice of a flat buffer padded to a multiple of N, so Ψ/N is
ceil(Ψ / N) elements: what a real implementation allocates, and exactly Ψ/N when N divides Ψ.

Everything alive at once at the start of backward is counted: model states, all activations
(model.activations), the buffers of the stage in flight and the loss's fp32 transients (without
FSDP2's gradients, which backward makes, but then also the end of backward: every gradient and
the last unit's buffers); or, when larger, what the optimizer step holds (DeepSpeed's fp32
gradient partition, foreach Adam's square roots). That is the peak of the step. Framework
terms (training.framework, reduce_dtype, gradient_as_bucket_view) are the functions above
stage_memory.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from zerosim.contract import MEMORY_POINTS, PASSES, STAGES
from zerosim.model import activations, gathered_elements, max_gather_window, total_params
from zerosim.scenario.checks import within_cap
from zerosim.scenario.config import Scenario, TrainingConfig
from zerosim.scenario.profile_schema import MEMORY_TERMS
from zerosim.units import BYTES_PER_ELEMENT, FP32_BYTES, mib_to_bytes

# Optimizer moments kept per parameter, each fp32: Adam's m and v (Kingma & Ba), SGD's momentum.
MOMENTS = {"adam": 2, "adamw": 2, "sgd_momentum": 1, "sgd": 0}
# Gradient buckets alive at once in stage 2: one filling during backward, one being reduced.
STAGE2_LIVE_BUCKETS = 2
# Layer gradients alive at once in stage 3: one being produced, one being reduce-scattered.
STAGE3_LIVE_LAYER_GRADS = 2
# Times a step sends each gathered parameter element, at most, per rank: ZeRO-3 gathers it for
# forward and again for backward and reduce-scatters its gradient; an all-reduce sends
# 2 (N-1)/N of it, and stages 1-2 gather it once more after the step.
MAX_SENDS_PER_ELEMENT = 3


def optimizer_bytes_per_param(t: TrainingConfig) -> int:
    """K of the ZeRO paper: an fp32 master copy under mixed precision plus fp32 moments.
    Mixed-precision Adam: 4 + 4 + 4 = 12 (§3.1); fp32 Adam: 0 + 4 + 4 = 8."""
    master = FP32_BYTES if t.precision != "fp32" else 0
    return master + FP32_BYTES * MOMENTS[t.optimizer]


def grad_bytes_per_element(t: TrainingConfig, stage: int) -> int:
    """A gradient element: the parameters' dtype, or fp32 where stages 2-3 reduce in fp32."""
    if stage >= 2 and t.reduce_dtype == "fp32":
        return FP32_BYTES
    return BYTES_PER_ELEMENT[t.precision]


def loss_blocks(m, t: TrainingConfig) -> dict[str, list[int]]:
    """The tensors fp32 cross-entropy over the vocabulary allocates beside the activations, per
    phase in order, as torchtitan and Hugging Face compute it (logits.float(), log_softmax,
    nll_loss); not under "zero", whose accounting keeps only the log-probabilities activations()
    counts. Forward: the 16-bit logits and their fp32 copy (under fp32 the logits alone).
    Backward: nll_loss's and log_softmax's fp32 gradients. Read off an H100 FSDP2 trace
    (profiles/h100/allocator_trace_llama_1b_*.json.gz, events 1396-1415): 2, 4, [4 kept], 4, 4
    bytes per token and vocabulary entry."""
    if m.is_bare or t.seq_len is None or t.framework == "zero":
        return {phase: [] for phase in PASSES}
    w = BYTES_PER_ELEMENT[t.precision]  # activations are in the compute dtype
    entries = t.micro_batch * t.seq_len * m.vocab
    forward = [w * entries] + ([FP32_BYTES * entries] if w != FP32_BYTES else [])
    return dict(zip(PASSES, (forward, [FP32_BYTES * entries, FP32_BYTES * entries])))


def loss_transient_bytes(m, t: TrainingConfig) -> int:
    """The most loss_blocks holds at once, every layer's activations alive: (w + 4) tokens V
    bytes in forward, 8 tokens V in backward (w = 2 or 4: backward's is the larger)."""
    return max((sum(blocks) for blocks in loss_blocks(m, t).values()), default=0)


def persistent_buffer_bytes(t: TrainingConfig, stage: int, psi: int) -> int:
    """Buffers alive all step beyond the model states: DDP's gradient buckets, a second copy of
    every gradient unless gradient_as_bucket_view (torch.nn.parallel.DistributedDataParallel)."""
    if t.framework == "ddp" and stage == 0 and not t.gradient_as_bucket_view:
        return BYTES_PER_ELEMENT[t.precision] * psi
    return 0


def step_transient_bytes(t: TrainingConfig, stage: int, elements: int) -> int:
    """What the optimizer step holds beyond the states, over the `elements` it updates:
    - DeepSpeed under mixed precision converts the rank's reduced gradient partition to fp32
      (stage_1_and_2.py and stage3.py: the fp32 partition's .grad), 4 bytes per element, for the
      step's duration (on the host under offload);
    - foreach_adam takes the square root of every second moment into new tensors
      (torch/optim/adam.py, _multi_tensor_adam: _foreach_sqrt), 4 bytes per element: on an H100
      4,000,002,048 bytes for 10^9 elements, none fused (profiles/h100/microbench_2026-11-24.json)."""
    if t.optimizer_offload != "none":
        return 0
    if t.framework == "deepspeed" and stage >= 1 and t.precision != "fp32":
        return FP32_BYTES * elements
    if foreach_adam(t):
        return FP32_BYTES * elements
    return 0


def foreach_adam(t: TrainingConfig) -> bool:
    """torch.optim's Adam/AdamW, foreach (CUDA's default), as FSDP2 and DDP runs step it."""
    return t.framework in ("fsdp2", "ddp") and t.optimizer in ("adam", "adamw")


def fp32_shards_are_the_master(t: TrainingConfig, stage: int) -> bool:
    """FSDP2 (fully_shard, MixedPrecisionPolicy) keeps each parameter shard in fp32 and casts
    it only into the all-gather's input; the optimizer steps those shards, and their gradients
    are fp32 whatever reduce_dtype (_fully_shard/_fsdp_param.py, _fsdp_collectives.py): 4 + 4
    + 4 x moments bytes per shard element, 16 for Adam, not 2 + 2 + 12. On an H100 (profiles/
    h100/fsdp2_memory_2026-11-24.json, Llama-2-7B, 8-way): 12.67 GiB after the step, 16 x
    842,301,952 bytes = 12.55 GiB."""
    return (t.framework == "fsdp2" and stage >= 2 and t.precision != "fp32"
            and t.optimizer_offload == "none")  # offload: the (DeepSpeed) accounting below


def grads_made_in_backward(t: TrainingConfig, stage: int) -> bool:
    """FSDP2 makes each sharded gradient as its unit's reduce-scatter completes; zero_grad
    (set_to_none, torch's default since 2.0) frees them before the next forward. The others keep
    a persistent gradient buffer. On an H100 (profiles/h100/fsdp2_memory_*.json) forward's end
    held the fp32 shard, the moments and the activations: no gradient."""
    return t.framework == "fsdp2" and stage >= 2


def keeps_gathered_parameters(t: TrainingConfig, stage: int) -> bool:
    """FSDP2's stage 2, reshard_after_forward=False (SHARD_GRAD_OP): each unit gathered before
    its forward stays, 16-bit, to the end of its backward (which gathers nothing)."""
    return t.framework == "fsdp2" and stage == 2


def kept_parameter_bytes(m, t: TrainingConfig, stage: int) -> int:
    """What keeps_gathered_parameters holds once forward is done: every unit, 16-bit; else 0."""
    return BYTES_PER_ELEMENT[t.precision] * gathered_elements(m) if keeps_gathered_parameters(
        t, stage) else 0


def made_in_backward(t: TrainingConfig, stage: int) -> bool:
    """grads_made_in_backward, and no earlier micro-step made them (accumulation keeps them)."""
    return grads_made_in_backward(t, stage) and t.gradient_accumulation == 1


def shard_elements(numel: int, world_size: int) -> int:
    """Elements per rank of a flat buffer padded to a multiple of world_size."""
    return -(-numel // world_size)


@dataclass(frozen=True)
class StageMemory:
    """Per-rank bytes of one stage; `host_bytes` is CPU memory, everything else GPU memory."""

    stage: int
    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    model_states_bytes: int
    activations_bytes: int
    buffers_bytes: int
    host_bytes: int
    step_bytes: int
    """Held during the optimizer step beyond the model states and persistent buffers
    (step_transient_bytes: DeepSpeed's fp32 gradient partition, foreach Adam's square roots);
    peak = max(states + activations + buffers, states + persistent buffers + this), FSDP2's
    gradients made in backward aside (stage_memory)."""
    peak_bytes: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _bucket_bytes(bucket_MiB: float, total_bytes: int, count: int) -> int:
    """`count` buckets of bucket_MiB, never more than the whole buffer they are cut from."""
    return min(count * mib_to_bytes(bucket_MiB), total_bytes)


def _stage_buffers(m, t: TrainingConfig, stage: int, psi: int, bp: int,
                   bg: int) -> tuple[int, int]:
    """(kept, buffers): the stage's buffers in flight at the start of backward, and the part of
    them that is FSDP2's stage-2 parameters kept from forward (0 elsewhere)."""
    kept = kept_parameter_bytes(m, t, stage)  # FSDP2's stage 2: every unit's, gathered
    if kept:
        return kept, kept + bg * max_gather_window(m, STAGE3_LIVE_LAYER_GRADS)
    if stage == 2:
        # Non-owned gradients are freed, so buckets are separate buffers (stages 0-1 reduce in
        # place on the persistent flat gradient buffer: their buckets are slices of it).
        return 0, _bucket_bytes(t.reduce_bucket_MiB, bg * psi, STAGE2_LIVE_BUCKETS)
    if stage == 3:
        # Whole layers gathered for compute (the current one plus prefetch), and full layer
        # gradients awaiting their reduce-scatter (ZeRO paper §5.3, "P_p").
        gathered = bp * max_gather_window(m, 1 + t.prefetch_layers)
        return 0, gathered + bg * max_gather_window(m, STAGE3_LIVE_LAYER_GRADS)
    return 0, 0


def stage_memory(scenario: Scenario, stage: int) -> StageMemory:
    """Per-rank memory of `stage` for the scenario's model, cluster size and training settings."""
    m, t = scenario.model, scenario.training
    n = scenario.world_size
    psi = total_params(m)
    bp = BYTES_PER_ELEMENT[t.precision]
    bg = grad_bytes_per_element(t, stage)
    k = optimizer_bytes_per_param(t)
    shard = shard_elements(psi, n)

    params = bp * (shard if stage >= 3 else psi)
    grads = bg * (shard if stage >= 2 else psi)
    optimizer_numel = shard if stage >= 1 else psi
    optimizer = k * optimizer_numel
    if fp32_shards_are_the_master(t, stage):
        params, grads = FP32_BYTES * shard, FP32_BYTES * shard
        optimizer = FP32_BYTES * MOMENTS[t.optimizer] * shard
    host = 0
    if t.optimizer_offload == "cpu":
        # ZeRO-Offload (Ren et al. 2021, arXiv:2101.06840) §4.1: parameters stay on the GPU; the
        # optimizer states and the gradient partition they update live in CPU memory. As DeepSpeed
        # implements it (runtime/zero/stage_1_and_2.py), the CPU always holds an fp32 master copy
        # (the GPU keeps its own working parameters, even in fp32) and the gradient partition in
        # fp32: 4 + 4 * moments + 4 bytes per element, 16 for Adam, the 16 bytes per parameter of
        # DeepSpeed's estimate_zero2_model_states_mem_needs.
        host = (FP32_BYTES + FP32_BYTES * MOMENTS[t.optimizer] + FP32_BYTES) * optimizer_numel
        optimizer = 0
        if stage >= 2:
            grads = 0  # each reduced gradient partition is copied out as its bucket completes

    kept, buffers = _stage_buffers(m, t, stage, psi, bp, bg)
    persistent = persistent_buffer_bytes(t, stage, psi)
    buffers += persistent + loss_transient_bytes(m, t)
    acts = activations(m, t).peak_bytes
    states = params + grads + optimizer
    step = step_transient_bytes(t, stage, optimizer_numel)
    # Gradients made in backward do not exist at its start (in the first micro-step: later ones
    # add into them); backward then trades activations for gradients unit by unit, so its peak
    # lies at one end: every activation and no gradient, or every gradient with the last
    # unit's buffers still alive.
    made = grads if made_in_backward(t, stage) else 0
    peak = max(states - made + acts + buffers, states + buffers - kept if made else 0,
               states + persistent + step)
    return StageMemory(stage=stage, params_bytes=params, grads_bytes=grads,
                       optimizer_bytes=optimizer, model_states_bytes=states,
                       activations_bytes=acts, buffers_bytes=buffers, host_bytes=host,
                       step_bytes=step, peak_bytes=peak)


def fits(scenario: Scenario, peak_bytes: int) -> bool:
    """Whether a rank's peak fits its GPU's memory (cluster.hbm_GiB)."""
    return peak_bytes <= scenario.cluster.hardware.memory_bytes


def memory_table(scenario: Scenario) -> list[StageMemory]:
    """All four stages for one scenario (the scenario's own zero_stage does not restrict it);
    commands have refused a scenario beyond 2**53 when they loaded it (check_scale)."""
    return [stage_memory(scenario, stage) for stage in STAGES]


def check_scale(scenario: Scenario) -> Scenario:
    """The scenario, if every number zerosim reports of it stays at most 2**53 (exact in JSON and
    as a float): Ψ, every stage's bytes with what its calibration profile adds, and the bytes a
    rank sends per step. Inputs are capped one by one (scenario.checks); this caps what they make
    together. Searches over hypothetical models (plan) call stage_memory without it."""
    m, t = scenario.model, scenario.training
    gathered = gathered_elements(m)
    bytes_per_element = BYTES_PER_ELEMENT[t.precision]
    within_cap("the bytes a rank sends per step", MAX_SENDS_PER_ELEMENT * gathered *
               bytes_per_element, f"up to {MAX_SENDS_PER_ELEMENT} x {gathered:,} gathered "
               f"elements x {bytes_per_element} bytes")
    tokens = t.micro_batch * (t.seq_len or 0)
    for stage in STAGES:
        row = stage_memory(scenario, stage)
        extra = (scenario.profile.memory_terms(scenario.world_size, stage, tokens)
                 if scenario.profile is not None and not m.is_bare else None) or {}
        added = sum(abs(extra.get(term, 0)) for term in MEMORY_TERMS)
        for key, value in row.as_dict().items():
            extra_bytes = added if key == "peak_bytes" else 0
            within_cap(f"stage {stage} {key}", value + extra_bytes,
                       f"{value:.4g} + {extra_bytes:.4g} measured (profile)" if extra_bytes else "")
    return scenario


def steady_points(scenario: Scenario, stage: int) -> dict[str, int]:
    """GPU bytes at the quiet moments of a step, when no collective or gathered buffer is alive:
    after forward (model states + every layer's stored activations; no gradient where backward
    makes them), after backward and after the optimizer step (model states alone). The engine's
    memory timeline must pass through these."""
    row = stage_memory(scenario, stage)
    acts = activations(scenario.model, scenario.training)
    stored = acts.peak_bytes - acts.recompute_bytes
    states = row.model_states_bytes + persistent_buffer_bytes(
        scenario.training, stage, total_params(scenario.model))
    made = row.grads_bytes if made_in_backward(scenario.training, stage) else 0
    kept = kept_parameter_bytes(scenario.model, scenario.training, stage)  # FSDP2's stage 2
    after_forward, after_backward, after_step = MEMORY_POINTS[1:]
    return {after_forward: states - made + stored + kept, after_backward: states,
            after_step: states}
