"""PyTorch's FSDP2 (`framework = "fsdp2"`, fully_shard): fp32 shards, gradients made in backward,
the flat buffers its collectives copy through, and stage 2 as reshard_after_forward=False."""

from __future__ import annotations

from zerosim.frameworks.base import Framework


class FSDP2(Framework):
    """FSDP2 at stages 2-3, torch.optim's Adam, no offload or ZeRO++ (DeepSpeed's schemes)."""

    name = "fsdp2"
    stages = (2, 3)
    offloads = False
    runs_zeropp = False
    pipeline_stages = (2,)
    pipeline_refusal = ("torchtitan runs FSDP2 beside a pipeline with reshard_after_forward="
                        "False (zero_stage 2), its default there, so that micro-batches do not "
                        "each all-gather again (torchtitan's apply_fsdp); resharding after every "
                        "micro-batch's forward beside a pipeline is not modelled")

    pipeline_schedules = ("gpipe", "1f1b", "interleaved_1f1b")  # ScheduleGPipe, Schedule1F1B,
    # ScheduleInterleaved1F1B of torch.distributed.pipelining (schedules.py), torchtitan's choices

    def pipeline_sends_block(self, schedule: str) -> bool:
        """No: torch.distributed.pipelining posts its sends with isend and waits for them later
        (schedules.py: ScheduleGPipe's fwd_sends_to_wait, _PipelineScheduleRuntime)."""
        return False

    def pipeline_overlaps_reduction(self, t) -> bool:
        """No: beside torch.distributed.pipelining every micro-batch's backward runs without
        gradient sync, each unit's unsharded gradient accumulating, and the reduce-scatters run
        once the schedule is done (torch/distributed/pipelining/stage.py, perform_reduce_grad:
        "REDUCE_GRAD action is scheduled after all microbatches W, B actions", calling FSDP's
        post-backward by hand)."""
        return False

    def pipeline_unsharded_gradients(self, t, stage: int) -> bool:
        """Yes at stage 2: that accumulation holds the stage's whole gradient unsharded, in
        reduce_dtype (FSDPParam.to_accumulated_grad_if_needed casts it there), from the first
        backward to the reduction (pipeline_overlaps_reduction)."""
        return stage == 2

    def foreach_adam(self, t) -> bool:
        return t.optimizer in ("adam", "adamw")

    def fp32_shards_are_the_master(self, t, stage: int) -> bool:
        """fully_shard with a MixedPrecisionPolicy keeps each parameter shard in fp32 and casts
        it only into the all-gather's input; the optimizer steps those shards, and their
        gradients are fp32 whatever reduce_dtype (_fully_shard/_fsdp_param.py,
        _fsdp_collectives.py): 4 + 4 + 4 x moments bytes per shard element, 16 for Adam, not
        2 + 2 + 12. On an H100 (profiles/h100/fsdp2_memory_2026-11-24.json, Llama-2-7B, 8-way):
        12.67 GiB after the step, 16 x 842,301,952 bytes = 12.55 GiB."""
        return (stage >= 2 and t.precision != "fp32"
                and t.optimizer_offload == "none")  # offload: DeepSpeed's accounting

    def grads_made_in_backward(self, t, stage: int) -> bool:
        """FSDP2 makes each sharded gradient as its unit's reduce-scatter completes; zero_grad
        (set_to_none, torch's default since 2.0) frees them before the next forward. On an H100
        (profiles/h100/fsdp2_memory_*.json) forward's end held the fp32 shard, the moments and
        the activations: no gradient."""
        return stage >= 2

    def keeps_gathered_parameters(self, t, stage: int) -> bool:
        """Stage 2, reshard_after_forward=False (SHARD_GRAD_OP): each unit gathered before its
        forward stays, 16-bit, to the end of its backward (which gathers nothing)."""
        return stage == 2

    def copies_through_flat_buffers(self, t, stage: int) -> bool:
        """split_with_sizes_copy out of each all-gather's buffer, chunk_cat into each
        reduce-scatter's (_fully_shard/_fsdp_collectives.py; timed by op_costs.fsdp2_copies)."""
        return stage >= 2
