"""The three collectives the stages need, on 1-D buffers, in place, two ways.

`native`: torch.distributed's own. On NCCL, reduce-scatter and all-gather run in place (NCCL
documents recvbuff == sendbuff + rank * count as supported). gloo has no reduce-scatter of its own:
torch's ProcessGroupGloo clones the input and all-reduces the clone (twice the ring traffic of a
reduce-scatter, plus a full copy). We call all_reduce in place instead, which is the same traffic
without the copy, and record it as what it stands for (op "reduce_scatter", name saying gloo).

`ring`: an explicit ring from send/recv (Thakur et al. 2005): N-1 steps, each rank sending one
piece to its right neighbour while receiving one from its left. Pieces may be uneven or empty, so
a bucket cut anywhere in a flat buffer reduce-scatters to the ranks that own its parts. This is
the algorithm zerosim simulates, so on CPU it is the honest counterpart of the simulator.

Sizes recorded follow nccl-tests: all_reduce the buffer, reduce_scatter/all_gather the whole
buffer (N x per-rank piece).

Hybrid sharding's process groups (`shard_groups_of`; parallelism.shard_group = g of N ranks,
FSDP2's HSDP, MiCS): model states are sharded over the g consecutive ranks of a shard group,
[i*g, (i+1)*g), and replicated across the N/g replica groups, the ranks with the same place in
their shard groups (zerosim.scenario.family's layout). torch.distributed.new_group is
collective over the whole world: every rank creates every group, in the same order, members or
not; the groups of a (world, g) are made once per process and reused by every stage built on
them. Each group times out as the world does (`timeout_s`, the run's --timeout-s): new_group's
own default is torch's 30 minutes, in which a stopped rank's peers would wait unreported.
Tensor parallelism's groups (`tensor_groups_of`, t consecutive ranks, and the data-parallel N/t
ranks t apart) are the same layout with g = t. A pipeline's (`pipeline_groups_of`) follow
Megatron-LM's order tp-dp-pp: the tensor groups, each stage's data-parallel groups, and the
embedding groups of each pipeline's first and last stage.

Waiting, native gloo on CPU between processes: each collective is started asynchronously and its
work polled, the core yielded between polls, instead of waited for asleep in work.wait() (see
wait_yielding). Errors and timeouts still raise from work.wait(), called once the work is done.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from zerosim.contract import COLLECTIVE_IMPLS

# torch 2.13 renamed the tensor forms; older releases only have the *_tensor names.
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}
"""all_reduce's reductions: the stages sum; the vocabulary-parallel loss also takes a max."""


def _offsets(sizes: list[int]) -> list[int]:
    out, total = [], 0
    for size in sizes:
        out.append(total)
        total += size
    return out


def wait_yielding(work) -> None:
    """Wait for gloo's asynchronous `work` awake: poll it, yielding the core between polls, then
    work.wait(), which returns at once, or raises the collective's error or gloo's timeout (an
    error or a timeout completes the work, so the polling ends on them too).

    Why awake: asleep in work.wait(), the rank's core goes idle, and each hand-over between
    gloo's threads and the rank is a wake-up; on the 2-core VM of issue 17, whose idle cores halt
    at once, eight 64 KiB all-reduces at 2 ranks took 2.05 ms each asleep, 0.96 ms polled.

    Why the future's done() and not work.is_completed(): is_completed() keeps the GIL while it
    takes the work's lock, and gloo's thread finishes a work under that lock, running the torch
    profiler's end callback there, which restores the rank's thread-local state (the saved-tensor
    hooks of zero_real.parts.measure.ActivationTracker: Python objects) and so needs the GIL. Stage 3's
    gathers in forward under the memory profiler deadlocked that way (seen with gdb; 10 of 18
    runs beside two busy loops, polled with short sleeps; polled through done(), 0 of 20)."""
    done = work.get_future().done
    while not done():
        os.sched_yield()
    work.wait()


class Collectives:
    """Collectives among the ranks of the world, or of one process group (`subgroup`): `rank`
    and `world_size` are then this rank's place in the group and the group's size. `timeout_s`:
    the world's timeout on each collective, which the process groups made from it get too."""

    def __init__(self, mode: str, rank: int, world_size: int, recorder, backend: str, *,
                 timeout_s: float):
        if mode not in COLLECTIVE_IMPLS:
            raise ValueError(f"collectives mode {mode!r} is not one of {COLLECTIVE_IMPLS}")
        self.mode, self.rank, self.world_size = mode, rank, world_size
        self.recorder, self.backend, self.timeout_s = recorder, backend, timeout_s
        self.group, self.ranks = None, range(world_size)  # group rank -> global rank
        self._in_group: dict = {}  # torch.distributed's group= argument (none for the world)

    def subgroup(self, group, ranks: list[int]) -> Collectives:
        """The same collectives among `ranks` (global ranks, this one among them), over the
        process group `group` that every rank created (collectives.shard_groups_of)."""
        sub = Collectives(self.mode, ranks.index(self.ranks[self.rank]), len(ranks),
                          self.recorder, self.backend, timeout_s=self.timeout_s)
        sub.group, sub.ranks, sub._in_group = group, list(ranks), {"group": group}
        return sub

    def _nbytes(self, t: torch.Tensor) -> int:
        return t.numel() * t.element_size()

    def polls(self, t: torch.Tensor) -> bool:
        """Native gloo between processes on CPU tensors: waited for awake (wait_yielding). NCCL,
        the ring, the fake process group and a single rank: as torch.distributed waits."""
        return (self.mode == "native" and self.backend == "gloo" and self.world_size > 1
                and t.device.type == "cpu")

    def _native(self, collective, *args, **kwargs) -> None:
        """torch.distributed's `collective(*args, **kwargs)`, waited for awake where that pays
        (args[0] is the tensor it writes, as for every torch.distributed collective)."""
        if self.polls(args[0]):
            wait_yielding(collective(*args, **kwargs, **self._in_group, async_op=True))
        else:
            collective(*args, **kwargs, **self._in_group)

    # -- the interface the stages use ----------------------------------------------------------

    def all_reduce(self, t: torch.Tensor, name: str = "all_reduce", op: str = "sum") -> None:
        """Sum `t` over ranks, in place; or its elementwise maximum with op="max" (the
        vocabulary-parallel loss's max, zero_real.parts.tensor)."""
        with self.recorder.comm(name, "all_reduce", self._nbytes(t)):
            if self.world_size == 1:
                return
            if self.mode == "native":
                # torch's default op is the sum: passed only for another one
                self._native(dist.all_reduce, t, **({} if op == "sum" else {"op": REDUCE_OPS[op]}))
            else:
                base, extra = divmod(t.numel(), self.world_size)
                sizes = [base + (1 if r < extra else 0) for r in range(self.world_size)]
                self._ring_reduce_scatter(t, sizes, op)
                self._ring_all_gather(t, sizes)

    def reduce_scatter(self, t: torch.Tensor, sizes: list[int], name: str = "reduce_scatter") -> None:
        """`t` is cut into consecutive pieces of `sizes` (one per rank); afterwards rank r's piece
        holds the sum over ranks. The other pieces are left in an unspecified state."""
        assert sum(sizes) == t.numel() and len(sizes) == self.world_size
        label = name + (" (gloo: all_reduce)" if self._gloo_native else "")
        with self.recorder.comm(label, "reduce_scatter", self._nbytes(t)):
            if self.world_size == 1:
                return
            if self.mode == "ring":
                self._ring_reduce_scatter(t, sizes)
            elif self._gloo_native:
                self._native(dist.all_reduce, t)
            elif len(set(sizes)) == 1:
                lo = self.rank * sizes[0]
                _reduce_scatter_single(t[lo:lo + sizes[0]], t, **self._in_group)
            else:  # uneven on NCCL: each owner receives the reduction of its piece
                for r, (start, size) in enumerate(zip(_offsets(sizes), sizes)):
                    if size:
                        dist.reduce(t[start:start + size], dst=self.ranks[r], **self._in_group)

    def all_gather(self, t: torch.Tensor, sizes: list[int], name: str = "all_gather") -> None:
        """Rank r's piece of `t` is valid; afterwards every piece is, on every rank."""
        assert sum(sizes) == t.numel() and len(sizes) == self.world_size
        with self.recorder.comm(name, "all_gather", self._nbytes(t)):
            if self.world_size == 1:
                return
            if self.mode == "ring":
                self._ring_all_gather(t, sizes)
            elif len(set(sizes)) == 1:
                lo = self.rank * sizes[0]
                self._native(_all_gather_single, t, t[lo:lo + sizes[0]])
            else:
                for r, (start, size) in enumerate(zip(_offsets(sizes), sizes)):
                    if size:
                        self._native(dist.broadcast, t[start:start + size], src=self.ranks[r])

    @property
    def _gloo_native(self) -> bool:
        return self.mode == "native" and self.backend in ("gloo", "fake") and self.world_size > 1

    # -- the ring ------------------------------------------------------------------------------

    def _exchange(self, send: torch.Tensor | None, recv: torch.Tensor | None) -> None:
        """Send to the right neighbour and receive from the left one at the same time. One batch:
        at world size 2 both are the same peer, and NCCL deadlocks on a lone isend followed by
        an irecv to that peer on one communicator; batch_isend_irecv groups them (gloo too)."""
        right = self.ranks[(self.rank + 1) % self.world_size]  # global ranks, as P2POp's peer
        left = self.ranks[(self.rank - 1) % self.world_size]
        ops = []
        if send is not None and send.numel():
            ops.append(dist.P2POp(dist.isend, send.contiguous(), right, self.group))
        if recv is not None and recv.numel():
            ops.append(dist.P2POp(dist.irecv, recv, left, self.group))
        if ops:
            for work in dist.batch_isend_irecv(ops):
                work.wait()

    def _ring_reduce_scatter(self, t: torch.Tensor, sizes: list[int], op: str = "sum") -> None:
        n, offsets = self.world_size, _offsets(sizes)
        scratch = torch.empty(max(sizes), dtype=t.dtype, device=t.device)

        def piece(i: int) -> torch.Tensor:
            return t[offsets[i]:offsets[i] + sizes[i]]

        # Step k: pass on piece (r-k-1), which already holds the sums of k+1 ranks; after N-1
        # steps the piece that arrives last, and is complete, is this rank's own piece r.
        for k in range(n - 1):
            send_i, recv_i = (self.rank - k - 1) % n, (self.rank - k - 2) % n
            incoming = scratch[:sizes[recv_i]]
            self._exchange(piece(send_i), incoming)
            if op == "max":
                torch.maximum(piece(recv_i), incoming, out=piece(recv_i))
            else:
                piece(recv_i).add_(incoming)

    def _ring_all_gather(self, t: torch.Tensor, sizes: list[int]) -> None:
        n, offsets = self.world_size, _offsets(sizes)
        for k in range(n - 1):
            send_i, recv_i = (self.rank - k) % n, (self.rank - k - 1) % n
            self._exchange(t[offsets[send_i]:offsets[send_i] + sizes[send_i]],
                           t[offsets[recv_i]:offsets[recv_i] + sizes[recv_i]])


# -- hybrid sharding's process groups -------------------------------------------------------

_GROUPS: dict = {}
"""(the world's process group, shard group size) -> every group's handle, in creation order."""


@dataclass(frozen=True)
class ShardGroups:
    """One rank's process groups under hybrid sharding (zerosim's mesh names the same axes:
    dp_shard, dp_replicate)."""

    shard: Collectives
    """This rank's shard group: the reduce-scatters and all-gathers of the stage."""
    replica: Collectives | None
    """This rank's replica group (the ranks holding the same shard), None without hybrid."""


def shard_groups(world_size: int, g: int) -> tuple[list[list[int]], list[list[int]]]:
    """(shard groups, replica groups) of N = world_size ranks, in global ranks."""
    if g < 1 or world_size % g:
        raise ValueError(f"a shard group of {g} ranks does not divide {world_size} ranks")
    shards = [list(range(i * g, (i + 1) * g)) for i in range(world_size // g)]
    replicas = [list(range(j, world_size, g)) for j in range(g)]
    return shards, replicas


def shard_groups_of(comm: Collectives, g: int) -> ShardGroups:
    """This rank's shard and replica groups for shard groups of g ranks (`comm`: the world)."""
    n, rank = comm.world_size, comm.rank
    if g == n:
        return ShardGroups(shard=comm, replica=None)
    shards, replicas = shard_groups(n, g)
    key = (dist.group.WORLD, g)
    if key not in _GROUPS:
        timeout = datetime.timedelta(seconds=comm.timeout_s)  # not new_group's 30 minutes
        _GROUPS[key] = [dist.new_group(ranks, timeout=timeout) for ranks in shards + replicas]
    handles = _GROUPS[key]
    shard, replica = rank // g, rank % g
    return ShardGroups(shard=comm.subgroup(handles[shard], shards[shard]),
                       replica=comm.subgroup(handles[len(shards) + replica], replicas[replica]))


# -- tensor parallelism's process groups -----------------------------------------------------

@dataclass(frozen=True)
class TensorGroups:
    """One rank's groups under tensor parallelism of t (zerosim.parallel.mesh's tp axis and its
    data-parallel ranks): the t consecutive ranks [i*t, (i+1)*t) that split every layer, and
    the N/t ranks t apart that hold the same slice (the stage's world)."""

    tensor: Collectives
    data: Collectives


def tensor_groups_of(comm: Collectives, t: int) -> TensorGroups:
    """This rank's tensor and data-parallel groups (`comm`: the world). They are hybrid
    sharding's layout with shard groups of t (shard_groups_of: consecutive groups, and the ranks
    with the same place in theirs), so every rank creates them in the same order, once; the
    two schemes are not combined (zerosim.scenario.axes refuses it)."""
    groups = shard_groups_of(comm, t)
    data = groups.replica or comm.subgroup(None, [comm.ranks[comm.rank]])  # t = N: one rank
    return TensorGroups(tensor=groups.shard, data=data)


# -- pipeline parallelism's process groups ----------------------------------------------------

@dataclass(frozen=True)
class PipelineGroups:
    """One rank's place in a mesh of t x d x p ranks in Megatron-LM's order tp-dp-pp
    (megatron/core/parallel_state.py, initialize_model_parallel's default order "tp-dp-pp"):
    rank r has tensor-parallel index r % t, data-parallel index (r // t) % d and pipeline stage
    r // (t d), as zerosim.parallel.pipeline lays the stages out (N / p consecutive ranks each)."""

    stage: int
    stages: int
    tensor: Collectives | None
    """The t consecutive ranks that split every layer (None at t = 1)."""
    data: Collectives
    """The stage's d ranks t apart that hold the same slice: its ZeRO stage's world."""
    previous: int | None
    """The global rank this one receives activations from (None on stage 0)."""
    next: int | None
    """The global rank this one sends activations to (None on the last stage)."""
    embedding: Collectives | None
    """First and last stage with the same tensor- and data-parallel index: the two copies of a
    tied word embedding (Megatron's embedding group, parallel_state._EMBEDDING_GROUP); None on
    the other stages."""


def pipeline_ranks(world_size: int, t: int, p: int) -> tuple[list, list, list, list]:
    """(tensor groups, data-parallel groups, pipelines, embedding groups) of N = world_size
    ranks in global ranks, Megatron's order tp-dp-pp, d = N / (t p)."""
    d = world_size // (t * p)
    tensor = [list(range(i * t, (i + 1) * t)) for i in range(world_size // t)]
    data = [[stage * t * d + j * t + k for j in range(d)] for stage in range(p) for k in range(t)]
    pipes = [list(range(first, world_size, t * d)) for first in range(t * d)]
    embedding = [[pipe[0], pipe[-1]] for pipe in pipes]
    return tensor, data, pipes, embedding


def pipeline_groups_of(comm: Collectives, t: int, p: int) -> PipelineGroups:
    """This rank's groups in a pipeline of p stages with tensor parallelism of t (`comm`: the
    world). Every rank creates every group in one order (torch.distributed.new_group is
    collective over the world), once per (world, t, p)."""
    n, rank = comm.world_size, comm.rank
    tensor, data, pipes, embedding = pipeline_ranks(n, t, p)
    key = (dist.group.WORLD, "pipeline", t, p)
    if key not in _GROUPS:
        timeout = datetime.timedelta(seconds=comm.timeout_s)  # not new_group's 30 minutes
        _GROUPS[key] = [dist.new_group(ranks, timeout=timeout)
                        for ranks in tensor + data + embedding]
    handles = iter(_GROUPS[key])
    tensor_h, data_h, embedding_h = ([next(handles) for _ in groups]
                                     for groups in (tensor, data, embedding))

    def mine(groups, handles_of):
        i = next(i for i, ranks in enumerate(groups) if rank in ranks)
        return comm.subgroup(handles_of[i], groups[i])

    pipe = next(pipe for pipe in pipes if rank in pipe)
    stage = pipe.index(rank)
    return PipelineGroups(
        stage=stage, stages=p, tensor=mine(tensor, tensor_h) if t > 1 else None,
        data=mine(data, data_h),
        previous=pipe[stage - 1] if stage > 0 else None,
        next=pipe[stage + 1] if stage < p - 1 else None,
        embedding=mine(embedding, embedding_h) if stage in (0, p - 1) else None)
