"""Flat buffers: parameters as views into one 1-D buffer padded to a multiple of the world size.

Rank r owns the contiguous slice [r*S, (r+1)*S) with S = ceil(numel / N) (zerosim.analytic.memory's
shard_elements): the last ranks may own only padding, and a buffer with fewer elements than ranks
still works (S = 1). Padding elements are never read by the model; their gradients stay zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from zerosim.analytic.memory import shard_elements  # one definition of the shard size, zerosim's


@dataclass(frozen=True)
class Slot:
    name: str
    shape: torch.Size
    offset: int
    numel: int


@dataclass(frozen=True)
class Layout:
    """Where each parameter sits in a flat buffer, and who owns which elements."""

    slots: tuple[Slot, ...]
    numel: int
    world_size: int

    @classmethod
    def of(cls, named_params: list[tuple[str, nn.Parameter]], world_size: int) -> Layout:
        slots, offset = [], 0
        for name, p in named_params:
            slots.append(Slot(name, p.shape, offset, p.numel()))
            offset += p.numel()
        return cls(tuple(slots), offset, world_size)

    @property
    def shard(self) -> int:
        return shard_elements(self.numel, self.world_size)

    @property
    def padded(self) -> int:
        return self.shard * self.world_size

    def owned(self, rank: int) -> tuple[int, int]:
        return rank * self.shard, (rank + 1) * self.shard

    def owned_within(self, lo: int, hi: int, rank: int) -> tuple[int, int]:
        """[a, b) of the elements of [lo, hi) that `rank` owns (a >= b: none)."""
        own_lo, own_hi = self.owned(rank)
        return max(lo, own_lo), min(hi, own_hi)

    def pieces(self, lo: int, hi: int) -> list[int]:
        """Sizes of [lo, hi) cut at the rank boundaries: piece r is what rank r owns of it."""
        return [max(0, min(hi, (r + 1) * self.shard) - max(lo, r * self.shard))
                for r in range(self.world_size)]

    def buckets(self, bucket_elements: int) -> list[tuple[int, int]]:
        """[lo, hi) of each gradient bucket, cut from the top of the buffer down: the order in
        which backward produces gradients, so bucket 0 fills first."""
        return [(max(0, hi - bucket_elements), hi)
                for hi in range(self.numel, 0, -bucket_elements)]

    def spans(self, bucket_elements: int) -> list[list[tuple[int, int]]]:
        """Per slot, (bucket, elements of the slot in it) for each bucket it overlaps, top down:
        computed once, so a gradient's hook walks only its own buckets."""
        buckets, out = self.buckets(bucket_elements), []
        for slot in self.slots:
            end, spans = slot.offset + slot.numel, []
            for i in range((self.numel - end) // bucket_elements, len(buckets)):
                overlap = min(buckets[i][1], end) - max(buckets[i][0], slot.offset)
                if overlap <= 0:
                    break
                spans.append((i, overlap))
            out.append(spans)
        return out


class FlatParams:
    """One flat parameter buffer over `params`; `full` is the whole padded buffer, `shard` the
    rank's slice. Replicated (stages 0-2): `full` is persistent and `shard` a view of it.
    Sharded (stage 3): `shard` is the only persistent storage; `full` is gathered on demand and
    freed by shrinking its storage to zero bytes, so the views the modules (and autograd's saved
    tensors) hold stay valid and point at real data again after the next gather."""

    def __init__(self, root: nn.Module, named_params: list[tuple[str, nn.Parameter]], rank: int,
                 world_size: int, dtype: torch.dtype, device: torch.device, seed: int,
                 sharded: bool):
        self.layout = Layout.of(named_params, world_size)
        self.rank, self.sharded = rank, sharded
        self.initial = root.initial  # a parameter's value from (name, seed): whole, or a TP slice
        lo, hi = self.layout.owned(rank)
        make = torch.empty if sharded else torch.zeros  # padding must read as zero
        self.full = make(self.layout.padded, dtype=dtype, device=device)
        if sharded:
            self.shard = torch.zeros(self.layout.shard, dtype=dtype, device=device)
            self._fill(self.shard, lo, hi, seed)
        else:
            self._fill(self.full, 0, self.layout.padded, seed)
            self.shard = self.full[lo:hi]
        # The meta-device parameters are replaced by parameters that are views of the buffer.
        self.params = []
        for slot in self.layout.slots:
            owner, _, leaf = slot.name.rpartition(".")
            view = self.full[slot.offset:slot.offset + slot.numel].view(slot.shape)
            p = nn.Parameter(view)
            setattr(root.get_submodule(owner), leaf, p)
            self.params.append(p)
        if sharded:
            self.full.untyped_storage().resize_(0)  # the views stay; the bytes go until gathered

    def _fill(self, out: torch.Tensor, lo: int, hi: int, seed: int) -> None:
        """Materialise only elements [lo, hi): one parameter at a time, never the whole model."""
        for slot in self.layout.slots:
            a, b = max(lo, slot.offset), min(hi, slot.offset + slot.numel)
            if a < b:
                value = self.initial(slot.name, slot.shape, seed, out.dtype, out.device).flatten()
                out[a - lo:b - lo] = value[a - slot.offset:b - slot.offset]

    @property
    def gathered(self) -> bool:
        return self.full.untyped_storage().nbytes() > 0

    @property
    def full_bytes(self) -> int:
        return self.layout.padded * self.full.element_size()

    def gather(self, comm) -> None:
        """Stage 3: re-allocate the full buffer and all-gather every rank's shard into it."""
        if self.gathered:
            return
        self.full.untyped_storage().resize_(self.full_bytes)
        # .data: a write that does not bump the version autograd checked when it saved views.
        full = self.full.data
        lo, hi = self.layout.owned(self.rank)
        full[lo:hi].copy_(self.shard)
        comm.all_gather(full, [self.layout.shard] * self.layout.world_size)

    def free(self) -> None:
        if self.sharded:
            self.full.untyped_storage().resize_(0)

    def bind_grads(self, flat_grad: torch.Tensor) -> None:
        """Point each parameter's .grad at its slice of `flat_grad`: autograd then accumulates
        in place there (no per-parameter gradient allocations)."""
        for slot, p in zip(self.layout.slots, self.params):
            p.grad = flat_grad[slot.offset:slot.offset + slot.numel].view(slot.shape)

    def full_tensors(self, comm) -> dict[str, torch.Tensor]:
        """Every parameter, whole, as a fresh tensor (for checks; gathers under stage 3)."""
        was_gathered = self.gathered
        self.gather(comm)
        out = {slot.name: self.full[slot.offset:slot.offset + slot.numel].view(slot.shape).clone()
               for slot in self.layout.slots}
        if not was_gathered:
            self.free()
        return out
