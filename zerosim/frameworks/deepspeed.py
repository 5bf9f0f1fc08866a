"""DeepSpeed's ZeRO (`framework = "deepspeed"`): what its stage_1_and_2.py and stage3.py hold
beyond the paper's model states."""

from __future__ import annotations

from zerosim.frameworks import deepspeed_fetch
from zerosim.frameworks.base import Framework
from zerosim.units import mib_to_bytes

# ZeRO-3's host time at a module visit: HOOK_VISIT_US for its hooks alone, HOOK_PARAM_US more for
# each non-persistent parameter the module owns (half of what one parameter's forward, backward
# and step work measured: a visit in each pass). bench/deepspeed_hooks.py's split, 2026-11-28,
# DeepSpeed 0.16.4, torch 2.13.0+cpu, this project's 2-core AMD EPYC box, 256 and 512 Linears
# with and without a parameter-free GELU after each, five runs: per visit 156.4, 157.4, 127.4,
# 186.3, 179.5 us (mean 161.4); per parameter 197.5, 208.4, 246.0, 181.7, 193.1 us (mean
# 205.3). The split is noisy (+-20%) on a shared 2-core box; their sum per Linear module, two
# visits and two parameters, holds within 2% (731-747 us).
HOOK_VISIT_US, HOOK_PARAM_US = 161.4, 205.3 / 2


class DeepSpeed(Framework):
    """DeepSpeed: the fp32 gradient partition of the step, and the pinned 16-bit host copy of
    stages 1-2 under optimizer offload."""

    name = "deepspeed"
    step_transient_whole = "grads"  # one fp32 buffer per partition
    fetch_defaults = {"prefetch_bucket_elements": deepspeed_fetch.PREFETCH_BUCKET,
                      "max_live_parameters": deepspeed_fetch.MAX_LIVE,
                      "max_reuse_distance": deepspeed_fetch.MAX_REUSE_DISTANCE,
                      "param_persistence_threshold": deepspeed_fetch.PERSISTENCE_THRESHOLD}
    fetch_events_ahead = 2  # partitioned_param_coordinator.py: __max_ongoing_fetch_events
    bucket_elements = deepspeed_fetch.REDUCE_BUCKET  # reduce_bucket_size's default, 5e8
    pipeline_stages = (0, 1)
    pipeline_schedules = ("1f1b",)  # PipelineEngine.train_batch always builds TrainSchedule
    # (deepspeed/runtime/pipe/engine.py, schedule.py): 1F1B, one chunk per stage
    pipeline_refusal = ("DeepSpeed's PipelineEngine asserts 'ZeRO-2 and ZeRO-3 are incompatible "
                        "with pipeline parallelism' (deepspeed/runtime/pipe/engine.py)")

    def pipeline_sends_block(self, schedule: str) -> bool:
        """Yes: the PipelineEngine's SendActivation and SendGrad call p2p.send, a blocking
        dist.send (deepspeed/runtime/pipe/p2p.py, engine.py _exec_send_activations)."""
        return True

    def pipeline_overlaps_reduction(self, t) -> bool:
        """No: the PipelineEngine reduces gradients once the schedule's last backward is done
        (deepspeed/runtime/pipe/schedule.py, TrainSchedule.steps: ReduceTiedGrads and
        ReduceGrads after the final micro-batch; engine.py, _exec_reduce_grads)."""
        return False

    def fp32_grad_partition_in_step(self, t, stage: int) -> bool:
        """Under mixed precision each reduced gradient partition is converted to fp32 for the
        optimizer step (stage_1_and_2.py and stage3.py: the fp32 partition's .grad)."""
        return stage >= 1 and t.precision != "fp32"

    def pinned_bit16_host_partition(self, t, stage: int) -> bool:
        """Stages 1-2 add a pinned 16-bit copy of the partition that the step casts into before
        copying it up (stage_1_and_2.py, param_buffer_of_bit16_for_cpu_offload_groups)."""
        return stage in (1, 2)

    def fetch_plan(self, t, visits, sizes, reduce_bucket_elements: int):
        """ZeRO-3's steady-state plan of one micro-batch (deepspeed_fetch.fetch_plan) under the
        [training] keys, each DeepSpeed's default where the scenario leaves it (None)."""
        knobs = {key: default if getattr(t, key) is None else getattr(t, key)
                 for key, default in self.fetch_defaults.items()}
        return deepspeed_fetch.fetch_plan(
            visits, sizes, prefetch_bucket=knobs["prefetch_bucket_elements"],
            max_live=knobs["max_live_parameters"],
            threshold=knobs["param_persistence_threshold"], max_reuse=knobs["max_reuse_distance"],
            reduce_bucket=reduce_bucket_elements)

    def hook_us(self, params: int) -> float:
        """ZeRO-3's host time at a module visit whose module owns `params` non-persistent
        parameters: its hooks, fetch, prefetch, release and its parameters' gradient hooks and
        step (HOOK_VISIT_US, HOOK_PARAM_US; each visit, recomputation and micro-step charged
        alike, though the gradient hooks run once a backward and the step once a step: an
        overcharge under accumulation and full checkpointing). Measured with DeepSpeed's CPU
        accelerator, not on a GPU host, whose accelerator does more per fetch (stream waits,
        record_stream, events) on other cores: an assumption (docs/research/
        deepspeed_zero3_fetch.md sec. 8)."""
        return HOOK_VISIT_US + HOOK_PARAM_US * params

    def persistent_buffer_bytes(self, t, stage: int, psi: int) -> int:
        """The buckets each gradient is copied into (contiguous_gradients, True by default),
        whole reduce_bucket_size buffers whatever they come to hold: ZeRO-3's one, allocated at
        the optimizer's construction (stage3.py lines 731-735 at edaa722;
        docs/research/deepspeed_zero3_fetch.md sec. 6); stages 1-2's ipg_buffer, allocated at
        each backward, a second beside it under overlap_comm, each replacing the step before's
        (stage_1_and_2.py, backward, at 0.16.4): alive from the first backward on."""
        return mib_to_bytes(t.reduce_bucket_MiB) * self.bucket_buffers(t, stage)

    def bucket_buffers(self, t, stage: int) -> int:
        """Stage 3's one bucket; stages 1-2's one, two under overlap_comm; none at stage 0."""
        return {0: 0, 3: 1}.get(stage, 1 + (1 if t.overlap_comm else 0))
