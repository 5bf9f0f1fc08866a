"""One training step of DDP and ZeRO-1/2/3 over flat buffers: the simple stage first, then each
next stage as what it changes (replicated.py: DDP, ZeRO-1, ZeRO-2; zero3.py: ZeRO-3).

The model runs unit by unit ([embedding, block 1..L, head], zerosim's gather units): forward keeps
each unit's input and output, backward walks the units in reverse calling autograd on one unit at a
time. That makes "before this unit's forward/backward" a line of code rather than a hook, which is
where ZeRO-3 gathers, and it times every layer's forward and backward.

    DDP     gradients in one persistent flat buffer; buckets (slices of it) all-reduced as they
            fill during backward (on gloo, waited for by polling); Adam on everything, on every
            rank.
    ZeRO-1  buckets reduce-scattered instead (each rank keeps the sum of what it owns); Adam on
            the owned shard; parameters all-gathered after the step.
    ZeRO-2  no full gradient buffer: each gradient is copied into a bucket and freed; a reduced
            bucket leaves only the owned part, in a persistent gradient shard.
    ZeRO-3  parameters sharded too, one flat buffer per unit; a unit is gathered before its
            forward and its backward and freed after; its gradient is reduce-scattered at once
            (zero3.py).

Under gradient accumulation (training.gradient_accumulation = A micro-steps per optimizer step)
each micro-step's loss is scaled by 1/A; DDP and ZeRO-1 reduce only in the last micro-step (DDP's
no_sync: autograd adds each micro-step's gradients into the full buffer), ZeRO-2 reduce-scatters
and ZeRO-3 gathers and reduce-scatters in every micro-step, adding into the gradient shard; the
optimizer steps once, after the last.

Hybrid sharding (parallelism.shard_group) and optimizer offload (training.optimizer_offload = "cpu")
change stages 1-3 in one place, sharding.py: buffers sharded over the shard group, reduced
pieces summed across the replica group, the gradient shard and Adam in host memory.
"""

from zero_real.stages.replicated import DDP, DTYPES, ZeRO1, ZeRO2
from zero_real.stages.zero3 import ZeRO3

STAGES = {cls.stage: cls for cls in (DDP, ZeRO1, ZeRO2, ZeRO3)}
"""zerosim.contract's stage number -> its implementation."""

__all__ = ["DDP", "DTYPES", "STAGES", "ZeRO1", "ZeRO2", "ZeRO3"]
