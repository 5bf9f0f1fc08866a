"""ZeRO-3, as what it changes from ZeRO-2 (replicated.py): parameters sharded too.

Each gather unit (zerosim's: embedding token and position matrices, each block, final norm +
head) is its own flat buffer padded to a multiple of N (under hybrid sharding, of the shard
group's g), so per-rank parameter bytes are the sum of per-unit ceil(n/N), at most one element
per unit above zerosim's ceil(Ψ/N) (the ledger reports it as padding). A unit's full parameters and full gradient exist only around its use: their
storages are shrunk to zero bytes afterwards. A tied matrix's gradient is the exception: the
head's part stays in its full buffer until the embedding unit's backward adds its own, and the
sum is reduce-scattered once (zerosim sends it once, with the embedding unit).
"""

from __future__ import annotations

import torch

from zero_real.parts.flat import FlatParams
from zero_real.stages.replicated import ZeRO2


class ZeRO3(ZeRO2):
    """Parameters sharded: a flat buffer per gather unit, gathered just in time, freed after."""

    stage = 3

    def build(self, device, seed, lr):
        m, ledger, n = self.model, self.rec.ledger, self.shard_comm.world_size  # the shard group
        # zerosim's gather units: the embedding (token, position), each block, final norm + head.
        units = [list(m.embedding.tok.named_parameters("embedding.tok"))]
        if m.embedding.pos is not None:
            units.append(list(m.embedding.pos.named_parameters("embedding.pos")))
        units += [list(b.named_parameters(f"blocks.{i}")) for i, b in enumerate(m.blocks)]
        units.append(list(m.head.named_parameters("head")))
        self.groups = [FlatParams(self.model, named, self.shard_comm.rank, n, self.dtype, device, seed,
                                  sharded=True) for named in units]
        self.optimizers = []
        for g in self.groups:
            ideal = g.layout.numel / n
            ledger.add_state("params", g.shard, ideal)
            g.grad_shard = self.sharding.grad_shard(g.layout.shard, self.dtype, ideal)  # or host
            # The unit's whole gradient lives only around its backward: like the gathered
            # parameters, its storage is shrunk to nothing after use (anything the process group
            # still references then holds no bytes).
            g.grad_full = torch.empty_like(g.full)
            g.grad_full.untyped_storage().resize_(0)
            self.optimizers.append(self.sharding.optimizer(g.shard, g.grad_shard, ideal, lr))
        first_block = 1 if m.embedding.pos is None else 2
        head = [len(self.groups) - 1] + ([0] if self.tied else [])  # a tied head re-gathers tok
        self.segments = ([list(range(first_block))]
                         + [[first_block + i] for i in range(len(m.blocks))] + [head])
        count = len(self.segments)
        self.visits = list(range(count)) + list(reversed(range(count)))  # forward, then backward
        self.buckets = []

    def is_param_storage(self, ptr):
        return any(g.gathered and g.full.untyped_storage().data_ptr() == ptr for g in self.groups)

    def _enter(self, k: int) -> None:
        """Visit k (a unit's forward or backward) needs its units, and the next `prefetch`."""
        for j in range(k, min(k + 1 + self.prefetch, len(self.visits))):
            for gi in self.segments[self.visits[j]]:
                g = self.groups[gi]
                if not g.gathered:
                    self.rec.layer = self.visits[j]
                    g.gather(self.shard_comm)
                    self.rec.ledger.alloc("gathered", g.full_bytes)

    def _leave(self, k: int) -> None:
        keep = {gi for j in range(k + 1, min(k + 1 + max(self.prefetch, 1), len(self.visits)))
                for gi in self.segments[self.visits[j]]}
        for gi in self.segments[self.visits[k]]:
            if gi not in keep and self.groups[gi].gathered:
                self.groups[gi].free()
                self.rec.ledger.free("gathered", self.groups[gi].full_bytes)

    def before_forward(self, s):
        self._enter(s)

    def after_forward(self, s):
        self._leave(s)

    def before_backward(self, s):
        k = 2 * len(self.segments) - 1 - s
        self._enter(k)
        for gi in self.segments[s]:  # the unit's whole gradient, accumulated in place by autograd
            g = self.groups[gi]
            if g.grad_full.untyped_storage().nbytes():
                continue  # the tied matrix: already holds the head's part, and stays bound
            g.grad_full.untyped_storage().resize_(g.full_bytes)
            g.grad_full.zero_()
            self.rec.ledger.alloc("buckets", g.full_bytes)
            g.bind_grads(g.grad_full)

    def after_backward(self, s):
        for gi in self.segments[s]:
            if self.tied and gi == 0 and s > 0:
                # The head's part of the tied matrix's gradient waits in its full buffer for the
                # embedding's part: reduce-scattered once, with the embedding unit (as zerosim
                # counts it), not once per use.
                continue
            g = self.groups[gi]
            grad, n = g.grad_full, self.shard_comm.world_size
            self.shard_comm.reduce_scatter(grad, [g.layout.shard] * n, name="unit gradient")
            lo, hi = g.layout.owned(self.shard_comm.rank)
            # add: micro-steps accumulate into the shard (summed over replicas: sharding.py)
            self.sharding.keep(grad[lo:hi], g.grad_shard, "unit gradient",
                               last_micro=self.last_micro)
            for p in g.params:
                p.grad = None
            grad.untyped_storage().resize_(0)
            self.rec.ledger.free("buckets", g.full_bytes)
        self._leave(2 * len(self.segments) - 1 - s)

    def grad_regions(self):
        return [(g.layout, g.grad_shard, g.layout.owned(self.shard_comm.rank)[0])
                for g in self.groups]

    def zero_grads(self):
        for g in self.groups:
            g.grad_shard.zero_()
            for p in g.params:
                p.grad = None

    def after_optimizer(self):
        pass  # parameters stay sharded: the next forward gathers what it needs

    def full_parameters(self):
        out = {}
        for g in self.groups:
            out.update(g.full_tensors(self.shard_comm))
        return out
