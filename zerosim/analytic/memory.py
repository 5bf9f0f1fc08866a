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
(model.activations: their peak, at forward's end or at the first recomputed layer), the buffers
of the stage in flight and the loss's fp32 transients (without FSDP2's gradients, which
backward makes, but then also the end of backward: every gradient and the last unit's
buffers); or, when larger, what the optimizer step holds (DeepSpeed's fp32
gradient partition, foreach Adam's square roots). That is the peak of the step. Framework
terms (training.framework: reduce_dtype, gradient_as_bucket_view) are asked of the framework's
class (zerosim/frameworks/).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from zerosim.contract import MEMORY_POINTS, PASSES, STAGE2_LIVE_BUCKETS, STAGES
from zerosim.frameworks import framework_of
from zerosim.analytic.fetch import fetch_memory, fetches_by_module
from zerosim.analytic.model import (activations, gather_units, gathered_elements,
                                    grad_bytes_per_element, max_gather_window,
                                    param_counts, root_elements, sharded_unit_elements,
                                    total_params, unit_activation_bytes)
from zerosim.scenario.checks import within_cap
from zerosim.scenario.config import Scenario, TrainingConfig
from zerosim.analytic.host_memory import offload_bytes
from zerosim.analytic.mechanisms import mechanism_terms
from zerosim.parallel.mesh import Mesh, mesh_of
from zerosim.parallel.pipeline import layout_of, stage_orders
from zerosim.parallel.tensor import rank_model
from zerosim.units import BYTES_PER_ELEMENT, FP32_BYTES, mib_to_bytes

# Optimizer moments kept per parameter, each fp32: Adam's m and v (Kingma & Ba), SGD's momentum.
MOMENTS = {"adam": 2, "adamw": 2, "sgd_momentum": 1, "sgd": 0}
# Layer gradients alive at once in stage 3: one being produced, one being reduce-scattered.
STAGE3_LIVE_LAYER_GRADS = 2
# What a rank sends of each gathered parameter element, at most, per micro-step: ZeRO-3 gathers
# it for forward and again for backward (parameter bytes), and reduces its gradient (gradient
# bytes): a reduce-scatter's (N-1)/N or an all-reduce's 2 (N-1)/N, plus hybrid sharding's replica
# all-reduce, 2 (N-1)/N of a 1/g shard with g >= 2 (g = 1 gathers and scatters nothing). Once per
# step, stages 1-2 gather it after the step. Gradient accumulation repeats the micro-step's.
MAX_GATHERS_PER_MICRO_STEP, MAX_REDUCES_PER_MICRO_STEP, GATHERS_PER_STEP = 2, 3, 1


def optimizer_bytes_per_param(t: TrainingConfig) -> int:
    """K of the ZeRO paper: an fp32 master copy under mixed precision plus fp32 moments.
    Mixed-precision Adam: 4 + 4 + 4 = 12 (§3.1); fp32 Adam: 0 + 4 + 4 = 8."""
    master = FP32_BYTES if t.precision != "fp32" else 0
    return master + FP32_BYTES * MOMENTS[t.optimizer]


def kept_parameter_bytes(m, t: TrainingConfig, mesh: Mesh) -> int:
    """What stays of the gathered parameters once forward is done, until each unit's backward:
    under Framework.keeps_gathered_parameters every unit, 16-bit; under keeps_root_gathered the
    root unit (model.root_elements); under ZeRO++'s hpZ each unit's
    secondary partition over h ranks of the node (ceil(unit / h) elements, DeepSpeed's
    _partition_param_sec); else 0."""
    if framework_of(t).keeps_gathered_parameters(t, mesh.stage):
        return BYTES_PER_ELEMENT[t.precision] * gathered_elements(m)
    if framework_of(t).keeps_root_gathered(t, mesh.stage) and not m.is_bare:
        return BYTES_PER_ELEMENT[t.precision] * root_elements(m)
    if mesh.hpz:  # stage 3 only
        return BYTES_PER_ELEMENT[t.precision] * sharded_unit_elements(m, mesh.hpz)
    return 0


def persistent_bytes(scenario: Scenario, stage: int) -> int:
    """What stays allocated all step beyond the model states: the framework's persistent buffers
    (Framework.persistent_buffer_bytes) and, where ZeRO-3 fetches module by module (DeepSpeed:
    analytic/fetch.fetches_by_module), its small parameters kept whole on every rank beside
    their shards (fetch_memory)."""
    m, t = rank_model(scenario), scenario.training
    fw = framework_of(t)
    buffers = fw.persistent_buffer_bytes(t, stage, total_params(m))
    if not fetches_by_module(scenario, stage):
        return buffers
    kept = fetch_memory(m, t, fw, grad_bytes_per_element(t, 3))[1]
    return buffers + BYTES_PER_ELEMENT[t.precision] * kept


def made_in_backward(t: TrainingConfig, stage: int) -> bool:
    """Framework.grads_made_in_backward, and no earlier micro-step made them (accumulation keeps them)."""
    return framework_of(t).grads_made_in_backward(t, stage) and t.gradient_accumulation == 1


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
    nvme_bytes: int = 0
    """Bytes on the node's NVMe drives for this rank (ZeRO-Infinity)."""

    def as_dict(self) -> dict[str, int]:
        """Every figure; nvme_bytes only where some is on NVMe (so that records made before it
        existed still match)."""
        out = asdict(self)
        if not self.nvme_bytes:
            del out["nvme_bytes"]
        return out


def stage2_bucket_bytes(m, t: TrainingConfig, bg: int) -> int:
    """ZeRO-2's buckets, as much as they add to the activations' peak: a bucket holds the
    gradients made into it so far, never more (sim/stages/replicated.ZeRO2), and backward frees
    each unit's activations as it goes. At each unit's backward in turn (the head, the layers
    from the last, the embedding) what is alive is the activations left (with the unit's
    recomputation under checkpointing) and min(STAGE2_LIVE_BUCKETS buckets, the gradients made
    so far); the term is how far the most of those exceeds Activations.peak_bytes. A small
    model, whose one bucket would hold its whole gradient, adds only what its first units make
    while every activation is alive. Closed form over the layers (the planner asks of 2**36 of
    them): the layer term rises while the buckets fill and falls after, so its ends and the
    turn are enough."""
    cap = STAGE2_LIVE_BUCKETS * mib_to_bytes(t.reduce_bucket_MiB)
    if m.is_bare:  # no activations: every gradient may be in the buckets
        return min(cap, bg * total_params(m))
    c, acts = param_counts(m), activations(m, t)  # gradient_units' ends, in closed form
    head_g, layer_g, first_g = bg * (c.final_norm + c.lm_head), bg * c.per_layer, bg * c.embedding
    stored, layers = acts.stored_per_layer_bytes, m.layers
    rest = acts.embedding_bytes + acts.recompute_bytes  # beside a layer's backward

    def layer(j: int) -> int:  # the j-th layer from the last, in its backward
        return (layers - j + 1) * stored + rest + min(cap, head_g + j * layer_g)

    turn = (cap - head_g) // layer_g if layer_g else 0
    alive = [layers * stored + acts.outside_layers_bytes + min(cap, head_g),
             acts.embedding_bytes + min(cap, head_g + layers * layer_g + first_g)]
    alive += [layer(j) for j in {1, layers, turn, turn + 1} if 1 <= j <= layers]
    return max(0, max(alive) - acts.peak_bytes)


def _stage_buffers(m, t: TrainingConfig, mesh: Mesh, psi: int, bp: int,
                   bg: int, by_module: bool = False) -> tuple[int, int]:
    """(kept, buffers): the stage's buffers in flight at the start of backward, and the part of
    them that is FSDP2's stage-2 parameters kept from forward (0 elsewhere)."""
    stage = mesh.stage
    kept = kept_parameter_bytes(m, t, mesh)  # FSDP2's stage 2: every unit's, gathered
    if kept and stage == 2:
        return kept, kept + bg * max_gather_window(m, STAGE3_LIVE_LAYER_GRADS)
    if stage == 2:
        # Non-owned gradients are freed, so buckets are separate buffers (stages 0-1 reduce in
        # place on the persistent flat gradient buffer: their buckets are slices of it).
        # a framework's whole buckets are persistent buffers (Framework.bucket_buffers)
        return 0, 0 if framework_of(t).bucket_buffers(t, 2) else stage2_bucket_bytes(m, t, bg)
    if by_module:
        # Module by module (DeepSpeed): what its plan holds gathered at once, and the flush's
        # copy of a full gradient bucket (reduce_scatter_coalesced's torch.cat: docs/research/
        # deepspeed_zero3_fetch.md sec. 6); the bucket itself is a persistent buffer.
        live, _, flush = fetch_memory(m, t, framework_of(t), bg)
        return kept, kept + bp * live + bg * flush
    if stage == 3 and framework_of(t).keeps_root_gathered(t, stage) and not m.is_bare:
        # FSDP1: the root (kept) beside blocks gathered as below, and the head's gradient held
        # until the embedding's backward completes the root's one flat gradient
        c = param_counts(m)
        blocks = bp * c.per_layer * min(1 + t.prefetch_layers, c.layers)
        head = bg * (c.final_norm + c.lm_head)
        return kept, kept + blocks + head + bg * max_gather_window(m, STAGE3_LIVE_LAYER_GRADS)
    if stage == 3:
        # Whole layers gathered for compute (the current one plus prefetch), and full layer
        # gradients awaiting their reduce-scatter (ZeRO paper §5.3, "P_p").
        gathered = bp * max_gather_window(m, 1 + t.prefetch_layers)
        return kept, kept + gathered + bg * max_gather_window(m, STAGE3_LIVE_LAYER_GRADS)
    return 0, 0


def stage_memory(scenario: Scenario, stage: int) -> StageMemory:
    """Per-rank memory of `stage` for the scenario's model, cluster size and training settings;
    under pipeline parallelism, the pipeline stage whose peak is highest (what "fits" judges)."""
    if scenario.parallelism.pipeline_parallel > 1:
        return max(pipeline_memory(scenario, stage), key=lambda row: row.peak_bytes)
    m, t = rank_model(scenario), scenario.training  # a tensor-parallel rank's slice
    mesh = mesh_of(scenario, stage)  # what the stage splits, over the shard group
    psi = total_params(m)
    bp = BYTES_PER_ELEMENT[t.precision]
    bg = grad_bytes_per_element(t, stage)
    params, grads, optimizer, host, nvme, optimizer_numel = _model_states(t, mesh, psi)
    fw = framework_of(t)
    kept, buffers = _stage_buffers(m, t, mesh, psi, bp, bg, fetches_by_module(scenario, stage))
    persistent = persistent_bytes(scenario, stage)
    buffers += persistent + fw.loss_transient_bytes(m, t)
    acts = activations(m, t).peak_bytes
    return _with_peak(t, stage, (params, grads, optimizer, host, nvme), acts, buffers, kept,
                      persistent, fw.step_transient_bytes(t, stage, optimizer_numel))


def _model_states(t: TrainingConfig, mesh: Mesh, psi: int) -> tuple[int, int, int, int, int, int]:
    """(params, grads, optimizer, host, nvme, optimizer elements) of Ψ elements over the mesh:
    the ZeRO paper's Table 1, the framework's fp32 shards, offload's partitions."""
    stage = mesh.stage
    bp, bg = BYTES_PER_ELEMENT[t.precision], grad_bytes_per_element(t, stage)
    k = optimizer_bytes_per_param(t)
    shard = shard_elements(psi, mesh.dp_shard)
    params = bp * shard_elements(psi, mesh.param_ways)
    grads = bg * shard_elements(psi, mesh.grad_ways)
    optimizer_numel = shard_elements(psi, mesh.optimizer_ways)
    optimizer = k * optimizer_numel
    if framework_of(t).fp32_shards_are_the_master(t, stage):
        params, grads = FP32_BYTES * shard, FP32_BYTES * shard
        optimizer = FP32_BYTES * MOMENTS[t.optimizer] * shard
    host = nvme = 0
    if t.optimizer_offload != "none" and stage >= 1:  # DeepSpeed offloads ZeRO's partitions
        host, nvme = offload_bytes(t, stage, optimizer_numel, MOMENTS[t.optimizer])
        optimizer = 0
        if stage >= 2:
            grads = 0  # each reduced gradient partition is copied out as its bucket completes
        if stage == 3 and t.param_offload != "none":
            params = 0  # the shard lives off the GPU, copied in before each all-gather
    return params, grads, optimizer, host, nvme, optimizer_numel


def _with_peak(t: TrainingConfig, stage: int, states_split: tuple, acts: int, buffers: int,
               kept: int, persistent: int, step: int) -> StageMemory:
    """The StageMemory of model states, activations and buffers, with the step's peak."""
    params, grads, optimizer, host, nvme = states_split
    states = params + grads + optimizer
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
                       step_bytes=step, peak_bytes=peak, nvme_bytes=nvme)


def pipeline_memory(scenario: Scenario, stage: int) -> list[StageMemory]:
    """Per-rank memory of `stage` on each pipeline stage (parallel/pipeline.py), in order: the
    ZeRO paper's Table 1 over the stage's own parameters and its d data-parallel ranks; the
    activations of the micro-batches its schedule holds at once (parallel/schedule.py, walking
    its order: GPipe's m, 1F1B's p - i, the interleaved schedule's warmup + 1 chunks), with one
    layer's recomputation during a backward (where the chunk holds the head, after the head's
    backward has freed its logits: Activations.peak_bytes' order) and, on the stage of the
    head, the loss's transients; the point-to-point buffers of its transfers; FSDP2's kept units
    and its unsharded gradients at stage 2 (Framework.pipeline_unsharded_gradients)."""
    m, t = rank_model(scenario), scenario.training
    mesh, layout = mesh_of(scenario, stage), layout_of(scenario)
    units, acts = gather_units(m), activations(m, t)
    held_per_unit = unit_activation_bytes(m, t)
    fw, bp = framework_of(t), BYTES_PER_ELEMENT[t.precision]
    p2p = p2p_bytes(scenario)
    rows = []
    for i, order in enumerate(stage_orders(layout)):
        mine = layout.stage_units(i)
        psi = sum(units[u] for u in mine)  # the head's stage holds its own output matrix
        params, grads, optimizer, host, nvme, numel = _model_states(t, mesh, psi)
        chunks = [layout.chunk_units(i, c) for c in range(layout.virtual)]
        chunk = [sum(held_per_unit[u] for u in c) for c in chunks]
        acts_bytes = peak_held(order, chunk, [_recompute(c, len(units), acts, held_per_unit)
                                              for c in chunks])
        head = len(units) - 1 in mine
        kept = bp * psi if fw.keeps_gathered_parameters(t, stage) else 0
        # FSDP2 beside a pipeline: every unit's gradient, unsharded, until the reduction
        # (accumulated in reduce_dtype: torch's FSDPParam.to_accumulated_grad_if_needed)
        unsharded = grad_bytes_per_element(t, stage) * psi
        buffers = kept + (unsharded if fw.pipeline_unsharded_gradients(t, stage) else 0)
        persistent = fw.persistent_buffer_bytes(t, stage, psi)
        directions = (i > 0 or layout.virtual > 1) + (i < layout.stages - 1 or layout.virtual > 1)
        buffers += persistent + 2 * directions * p2p + (fw.loss_transient_bytes(m, t) if head
                                                        else 0)
        rows.append(_with_peak(t, stage, (params, grads, optimizer, host, nvme), acts_bytes,
                               buffers, kept, persistent,
                               fw.step_transient_bytes(t, stage, numel)))
    return rows


def p2p_bytes(scenario: Scenario) -> int:
    """One point-to-point transfer between pipeline stages: a micro-batch's activation (or its
    gradient) at a stage boundary, s x b x h elements of the compute dtype, 1/t of the sequence
    under sequence parallelism (Megatron-LM's p2p_communication.py sends the tensor whole, of
    shape [s / t, b, h] then)."""
    m, t = rank_model(scenario), scenario.training
    return BYTES_PER_ELEMENT[t.compute_dtype] * (t.seq_len or 0) * t.micro_batch * m.hidden \
        // m.sequence_shards


def _recompute(units: list[int], count: int, acts, held_per_unit: list[int]) -> int:
    """What a chunk's backward adds to what it holds: one layer's recomputation, less, where the
    chunk holds the head, the head's activations its backward frees first (never below 0)."""
    if not any(0 < u < count - 1 for u in units):
        return 0
    head = held_per_unit[count - 1] if count - 1 in units else 0
    return max(0, acts.recompute_bytes - head)


def peak_held(order, chunk_bytes: list[int], transients: list[int] | None = None) -> int:
    """The most activation bytes a stage's order holds at once: a forward's from its end to the
    end of its micro-batch's backward, counted at each backward's start (when they are all
    alive), with that chunk's backward transient on top (`transients`, per chunk). Timing cannot
    change it: only the order decides what is alive together."""
    held = peak = 0
    for op in order:
        if op.kind == PASSES[0]:
            held += chunk_bytes[op.chunk]
            peak = max(peak, held)
        else:
            peak = max(peak, held + (transients[op.chunk] if transients else 0))
            held -= chunk_bytes[op.chunk]
    return peak


def fits(scenario: Scenario, peak_bytes: int) -> bool:
    """Whether a rank's peak fits its GPU's memory (cluster.hbm_GiB)."""
    return peak_bytes <= scenario.cluster.hardware.memory_bytes


def table_stages(scenario: Scenario) -> tuple[int, ...]:
    """The stages a table of the scenario shows: all four (its own zero_stage does not restrict
    them), or beside a pipeline those its framework runs there (Framework.pipeline_stages)."""
    if scenario.parallelism.pipeline_parallel > 1:
        return framework_of(scenario.training).pipeline_stages
    return STAGES


def memory_table(scenario: Scenario) -> list[StageMemory]:
    """Each stage of table_stages for one scenario; commands have refused a scenario beyond
    2**53 when they loaded it (check_scale)."""
    return [stage_memory(scenario, stage) for stage in table_stages(scenario)]


def check_scale(scenario: Scenario) -> Scenario:
    """The scenario, if every number zerosim reports of it stays at most 2**53 (exact in JSON and
    as a float): Ψ, every stage's bytes with what its calibration profile adds, and the bytes a
    rank sends per step. Inputs are capped one by one (scenario.checks); this caps what they make
    together. Searches over hypothetical models (plan) call stage_memory without it."""
    m, t = rank_model(scenario), scenario.training
    gathered = gathered_elements(m)
    param, grad = BYTES_PER_ELEMENT[t.precision], grad_bytes_per_element(t, 3)
    micro = MAX_GATHERS_PER_MICRO_STEP * param + MAX_REDUCES_PER_MICRO_STEP * grad
    within_cap("the bytes a rank sends per step",
               gathered * (t.gradient_accumulation * micro + GATHERS_PER_STEP * param),
               f"{gathered:,} gathered elements x ({t.gradient_accumulation} micro-steps x "
               f"{micro} bytes + {GATHERS_PER_STEP * param} bytes)")
    for stage in STAGES:
        row = stage_memory(scenario, stage)
        extra = mechanism_terms(scenario, stage)  # its memory mechanisms: every term >= 0
        added = (sum(v for term, v in extra.items() if term != "optimizer_per_element")
                 + extra["optimizer_per_element"] * total_params(m))
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
    row, m = stage_memory(scenario, stage), rank_model(scenario)
    acts = activations(m, scenario.training)
    stored = acts.after_forward_bytes
    states = row.model_states_bytes + persistent_bytes(scenario, stage)
    made = row.grads_bytes if made_in_backward(scenario.training, stage) else 0
    kept = kept_parameter_bytes(m, scenario.training, mesh_of(scenario, stage))
    after_forward, after_backward, after_step = MEMORY_POINTS[1:]
    return {after_forward: states - made + stored + kept, after_backward: states,
            after_step: states}
