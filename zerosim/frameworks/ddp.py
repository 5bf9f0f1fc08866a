"""torch.nn.parallel.DistributedDataParallel (`framework = "ddp"`): stage 0, its gradient
buckets, and torch.optim's foreach Adam."""

from __future__ import annotations

from zerosim.frameworks.base import Framework
from zerosim.units import BYTES_PER_ELEMENT


class DDP(Framework):
    """DDP: stage 0 only; no offload or ZeRO++."""

    name = "ddp"
    stages = (0,)
    offloads = False
    runs_zeropp = False
    pipeline_stages = (0,)
    pipeline_refusal = "torch's DistributedDataParallel replicates every state"

    def pipeline_sends_block(self, schedule: str) -> bool:
        """No: beside torch.distributed.pipelining, whose sends are isends waited later."""
        return False

    def persistent_buffer_bytes(self, t, stage: int, psi: int) -> int:
        """DDP's gradient buckets: a second copy of every gradient unless
        gradient_as_bucket_view (torch.nn.parallel.DistributedDataParallel)."""
        if stage == 0 and not t.gradient_as_bucket_view:
            return BYTES_PER_ELEMENT[t.precision] * psi
        return 0

    def foreach_adam(self, t) -> bool:
        return t.optimizer in ("adam", "adamw")
