"""What a framework holds and runs beyond the ZeRO paper's accounting: the questions every
framework answers, with the answers most frameworks share (a subclass changes only what its
framework does differently).

Each method is asked with the [training] table (`t`) and the stage; none reads the framework's
name. The terms were read off the frameworks' sources and off H100 traces (cited per method).
"""

from __future__ import annotations

from zerosim.contract import PASSES, STAGES
from zerosim.units import BYTES_PER_ELEMENT, FP32_BYTES


TOKEN, REST = "token", "rest"
"""Flat buffers of a gather unit (Framework.gather_buffers): the token matrix; the rest of it."""


class Framework:
    """A framework as the memory model and the stage programs see it."""

    name: str = ""
    stages: tuple[int, ...] = STAGES
    """The ZeRO stages it runs (FSDP2: reshard_after_forward False ~ 2, True ~ 3)."""
    offloads: bool = True
    """Whether offload is expressible under it (offload is modelled as DeepSpeed runs it)."""
    runs_zeropp: bool = True
    """Whether ZeRO++ (DeepSpeed's hpZ, qwZ, qgZ) is expressible under it."""
    runs_in_zero_real: bool = False
    """Whether zero_real's stages train it: they implement the ZeRO paper's accounting, not a
    framework's extras (DeepSpeed's fp32 gradient partition, FSDP2's fp32 shards, DDP's buckets)."""
    pipeline_stages: tuple[int, ...] = (0, 1)
    """The ZeRO stages it runs beside a pipeline (parallelism.pipeline_parallel > 1): Megatron-
    LM's data parallelism and its distributed optimizer (ZeRO-1's sharding: megatron/core/
    optimizer/distrib_optimizer.py); its ZeRO-2/3 counterparts do not run with a pipeline."""
    pipeline_refusal: str = ("Megatron-LM shards at most the optimizer states beside a pipeline "
                             "(its distributed optimizer)")
    """Why a stage outside pipeline_stages is refused, in one clause."""
    pipeline_schedules: tuple[str, ...] = ("gpipe", "1f1b", "interleaved_1f1b")
    """The pipeline schedules it runs (Megatron-LM's schedules.py: forward_backward_no_
    pipelining aside, 1F1B with and without interleaving; GPipe's order is its 1F1B with every
    forward as warmup, as torch.distributed.pipelining's ScheduleGPipe runs it)."""
    fetch_defaults: dict[str, int] | None = None
    """Where ZeRO-3 gathers parameters module by module (DeepSpeed), the defaults of the
    [training] keys that steer it (config.FETCH_KNOBS); None: it gathers whole units (a wrapped
    block: FSDP, zero_real) and those keys are refused."""
    bucket_elements: int | None = None
    """Its own default reduce bucket, in elements, where it differs from zerosim's 25 MiB
    (scenario/defaults.py says so when a scenario leaves training.reduce_bucket_MiB out)."""
    fetch_events_ahead: int = 0
    """Module by module: the fetch events its host may leave outstanding on the compute stream
    before it blocks on the oldest (analytic/fetch.FetchSteps, sim/stages/fetch.py)."""
    step_transient_whole: str | None = None
    """The memory category of the optimizer step's transient when it is one buffer (DeepSpeed's
    fp32 gradient partition: "grads"); None: one tensor per parameter (foreach Adam)."""

    def hook_us(self, params: int) -> float:
        """Module by module: the host microseconds its hooks take at a visit of a module owning
        `params` non-persistent parameters (training.module_hook_us overrides it); 0 here."""
        return 0.0

    def loss_blocks(self, m, t) -> dict[str, list[int]]:
        """The tensors fp32 cross-entropy over the vocabulary allocates beside the activations,
        per phase in order, as torchtitan and Hugging Face compute it (logits.float(),
        log_softmax, nll_loss). Forward: the 16-bit logits and their fp32 copy (under fp32 the
        logits alone). Backward: nll_loss's and log_softmax's fp32 gradients. Read off an H100
        FSDP2 trace (profiles/h100/allocator_trace_llama_1b_*.json.gz, events 1396-1415): 2, 4,
        [4 kept], 4, 4 bytes per token and vocabulary entry."""
        if m.is_bare or t.seq_len is None:
            return {phase: [] for phase in PASSES}
        w = BYTES_PER_ELEMENT[t.compute_dtype]  # activations are in the compute dtype
        entries = t.micro_batch * t.seq_len * m.vocab
        forward = [w * entries] + ([FP32_BYTES * entries] if w != FP32_BYTES else [])
        return dict(zip(PASSES, (forward, [FP32_BYTES * entries, FP32_BYTES * entries])))

    def loss_transient_bytes(self, m, t) -> int:
        """The most loss_blocks holds at once, every layer's activations alive: (w + 4) tokens V
        bytes in forward, 8 tokens V in backward (w = 2 or 4: backward's is the larger)."""
        return max((sum(blocks) for blocks in self.loss_blocks(m, t).values()), default=0)

    def pipeline_overlaps_reduction(self, t) -> bool:
        """Whether a pipeline stage's data-parallel gradient reduction runs during its last
        micro-batch's backward, bucket by bucket, instead of after it: Megatron-LM's
        --overlap-grad-reduce (megatron/core/distributed/param_and_grad_buffer.py: a bucket's
        collective starts when its last gradient is made, and only in the last micro-batch,
        under no_sync for the others), training.overlap_comm here."""
        return t.overlap_comm

    def pipeline_sends_block(self, schedule: str) -> bool:
        """Whether a pipeline stage waits for its activation or gradient to arrive before its
        next op: Megatron-LM's non-interleaved schedules do ("Non-interleaved pipeline
        parallelism does not support overlapping p2p communication", megatron/core/
        pipeline_parallel/schedules.py; p2p_communication.py waits on its requests), its
        interleaved one overlaps them (overlap_p2p_comm)."""
        return schedule != "interleaved_1f1b"

    def pipeline_unsharded_gradients(self, t, stage: int) -> bool:
        """Whether a stage's whole gradient is held unsharded beside a pipeline, beyond its
        model states (FSDP2's accumulation without sync); stages 0-1 keep a full gradient
        buffer anyway (the ZeRO paper's Table 1)."""
        return False

    def bucket_buffers(self, t, stage: int) -> int:
        """Whole reduce buckets the framework allocates whatever they hold, kept among its
        persistent buffers; 0: buckets hold what is made into them (ZeRO-2's, sim/stages/
        replicated.ZeRO2) or are slices of the gradient buffer (stages 0-1)."""
        return 0

    def persistent_buffer_bytes(self, t, stage: int, psi: int) -> int:
        """Buffers alive all step beyond the model states (none but DDP's)."""
        return 0

    def fp32_grad_partition_in_step(self, t, stage: int) -> bool:
        """Whether the optimizer step converts the rank's reduced gradient partition to fp32."""
        return False

    def foreach_adam(self, t) -> bool:
        """Whether the optimizer is torch.optim's Adam/AdamW, foreach (CUDA's default)."""
        return False

    def step_transient_bytes(self, t, stage: int, elements: int) -> int:
        """What the optimizer step holds beyond the states, over the `elements` it updates:
        - DeepSpeed under mixed precision converts the rank's reduced gradient partition to fp32
          (stage_1_and_2.py and stage3.py: the fp32 partition's .grad), 4 bytes per element,
          for the step's duration (on the host under offload);
        - foreach_adam takes the square root of every second moment into new tensors
          (torch/optim/adam.py, _multi_tensor_adam: _foreach_sqrt), 4 bytes per element: on an
          H100 4,000,002,048 bytes for 10^9 elements, none fused
          (profiles/h100/microbench_2026-11-24.json)."""
        if t.optimizer_offload != "none":
            return 0
        if self.fp32_grad_partition_in_step(t, stage) or self.foreach_adam(t):
            return FP32_BYTES * elements
        return 0

    def fp32_shards_are_the_master(self, t, stage: int) -> bool:
        """Whether the parameter shards are kept in fp32 and stepped as the master copy."""
        return False

    def grads_made_in_backward(self, t, stage: int) -> bool:
        """Whether sharded gradients are made during backward (else a persistent buffer)."""
        return False

    def keeps_gathered_parameters(self, t, stage: int) -> bool:
        """Whether each unit gathered for forward stays gathered to the end of its backward."""
        return False

    def autocast_caches_weights(self, t) -> bool:
        """Whether the module's parameters are leaf tensors, which torch.autocast's cache keeps
        a 16-bit cast of until the autocast region ends (analytic/model.autocast_weight_bytes)."""
        return True

    def keeps_root_gathered(self, t, stage: int) -> bool:
        """Whether the root unit (the embedding and the head, one flat parameter) is gathered
        once in forward and stays gathered to the end of the step's backward."""
        return False

    def pinned_bit16_host_partition(self, t, stage: int) -> bool:
        """Whether optimizer offload keeps a pinned 16-bit copy of the partition on the host."""
        return False

    def copies_through_flat_buffers(self, t, stage: int) -> bool:
        """Whether each gather and reduction copies into and out of flat communication buffers
        (kernels beyond the model's own, timed by the op model)."""
        return False

    def gradient_hooks(self, m, t, stage: int) -> list[int] | None:
        """Per gradient unit, the Python hooks its backward runs, one per parameter gradient
        (a profile's fit.grad_path prices each, and each bucket's reduction: the measurements
        are zero_real's stages); None: no per-parameter Python hook measured for this
        framework (DDP's Reducer hooks in C++, FSDP2 per module)."""
        return None

    def gather_buffers(self, m, t, stage: int) -> list[list[str]] | None:
        """Per gather unit, the flat buffers ZeRO-3 gathers for it, one collective each: TOKEN
        (the token matrix), REST (what else the unit holds); analytic/model.buffer_elements
        counts them (a profile's fit.grad_path also prices each buffer's and each byte's host
        work: measured on zero_real's ZeRO-3). None: one buffer per unit, its host work not
        measured."""
        return None
