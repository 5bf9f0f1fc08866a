"""Ring collectives as simpy processes: chunks move step by step over the links of a ring.

A ring of k ranks cuts the buffer of S bytes (nccl-tests convention: S is the whole buffer) into k
chunks. Reduce-scatter takes k - 1 steps: in each, every rank sends one chunk of S/k to its
successor and adds what it received to its own copy of that chunk; all-gather is the same walk
without the addition; all-reduce is reduce-scatter then all-gather (Thakur, Rabenseifner and
Gropp 2005, "Optimization of Collective Communication Operations in MPICH", §4). With per-step
latency α and link bandwidth B, one step costs α + S/(k·B), so

    reduce_scatter, all_gather   (k - 1) (α + S / (k B))      each rank sends (k - 1) S / k
    all_reduce                 2 (k - 1) (α + S / (k B))      each rank sends 2 (k - 1) S / k

Broadcast and reduce use the same two walks (scatter + all-gather, reduce-scatter + gather: van de
Geijn's large-message algorithms), so they cost as much as all-reduce. Each step is paced by the
slowest link of the ring: a flat ring over several nodes runs at the inter-node link's speed.

Two granularities give identical times on an uncontended ring:
- "step": one simpy event per chunk per rank per step, with an event log (the reference);
- "phase": the k - 1 steps of one walk as one latency delay and one transfer of (k - 1) chunks
  per link, O(1) events per link instead of O(k): what the engine uses to stay fast at 16k GPUs.
They differ only when collectives share a link, where "phase" shares bandwidth as a fluid. A
collective that has its links to itself needs no event per phase either: idle_plan and plan_end_s
give the time "phase" would end at, the same float additions in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import simpy

from zerosim.contract import RING_WALKS
from zerosim.sim.network import INTER, INTRA, Cluster

FLAT = "flat"  # a walk over the whole group, each rank on its link to its successor


@dataclass(frozen=True)
class Phase:
    """One walk around a ring: `steps` steps of `chunk_bytes` per rank, on links of `scope`."""

    walk: str
    scope: str
    """FLAT, INTRA (rings inside each node) or INTER (one ring per local index across nodes)."""
    steps: int
    chunk_bytes: float
    latency_s: float | None = None
    """Latency per step; None: the link's. A calibration profile sets it (costs.price_phases)."""
    link_scale: float = 1.0
    """Link-time per byte relative to the link's bandwidth (a profile's measured bus bandwidth
    for this op, or NCCL's model of it, against the link's): the bytes sent are unchanged,
    their time is scaled."""
    alongside: tuple["Phase", ...] = ()
    """Phases on other links pipelined with this one: this phase's latency is paid first, then
    every transfer runs at once (the phase ends with the last)."""

    def latency(self, link) -> float:
        return link.latency_s if self.latency_s is None else self.latency_s


@dataclass(frozen=True)
class Group:
    """`size` ranks of the cluster, `gpus_per_node` of them per node: the first ones, or (a
    subgroup, sim/groups.py) one of the groups of ranks `stride` apart, where a rank's place in
    its group is (rank // stride) % size."""

    size: int
    gpus_per_node: int
    stride: int = 1

    def place(self, rank: int) -> int:
        return (rank // self.stride) % self.size

    @property
    def nodes(self) -> int:
        return -(-self.size // self.gpus_per_node)


def ring_phases(op: str, size_bytes: float, group: Group) -> list[Phase]:
    k = group.size
    return [Phase(walk, FLAT, k - 1, size_bytes / k) for walk in RING_WALKS[op]]


def link_tier(group: Group, rank: int, scope: str) -> str:
    if scope != FLAT:
        return scope
    place = group.place(rank)
    successor = (place + 1) % group.size
    same_node = place // group.gpus_per_node == successor // group.gpus_per_node
    return INTRA if same_node else INTER


def representatives(group: Group, scopes: set[str]) -> list[int]:
    """Ranks whose links stand for every link role of a uniform cluster: rank 0, plus the last
    rank of node 0 when a flat ring crosses nodes (its successor is on the next node)."""
    ranks = [0]
    if FLAT in scopes and group.size > group.gpus_per_node > 1:
        ranks.append(group.gpus_per_node - 1)
    return ranks


def bytes_sent_per_rank(phases: list[Phase]) -> float:
    return sum(p.steps * p.chunk_bytes + bytes_sent_per_rank(list(p.alongside)) for p in phases)


@dataclass(frozen=True)
class StepRecord:
    """One chunk sent in the step-granularity log."""

    rank: int
    walk: str
    step: int
    tier: str
    size_bytes: float
    start_s: float
    end_s: float


def _send(env: simpy.Environment, link, size_bytes: float, latency_s: float) -> Iterator:
    yield env.timeout(latency_s)
    yield link.transfer(size_bytes)


def run_phases(env: simpy.Environment, cluster: Cluster, group: Group, phases: list[Phase],
               ranks: list[int], granularity: str = "phase",
               log: list[StepRecord] | None = None,
               progress: Callable[[int, int], None] | None = None) -> Iterator:
    """Process: every phase in order on the links of `ranks` (all of the group's ranks, or the
    representatives of a uniform one); returns when the slowest link finishes the last phase.
    `progress(done, total)` counts ring steps (after each one at "step" granularity)."""
    done, total = 0, sum(phase.steps for phase in phases)
    for phase in phases:
        if phase.steps == 0:
            continue
        links = [(rank, link_tier(group, rank, phase.scope)) for rank in ranks]
        wire = phase.chunk_bytes * phase.link_scale
        if phase.alongside:
            yield from _pipelined(env, cluster, group, phase, ranks)
        elif granularity == "phase" and len(links) == 1:  # one representative link: no sub-process
            link = cluster.link(*links[0])
            yield env.timeout(phase.steps * phase.latency(link))
            yield link.transfer(phase.steps * wire)
        elif granularity == "phase":
            yield env.all_of([env.process(_send(env, cluster.link(r, tier), phase.steps * wire,
                                                phase.steps * phase.latency(cluster.link(r, tier))))
                              for r, tier in links])
        else:
            yield from _steps(env, cluster, phase, links, log, progress, done, total)
        done += phase.steps
        if progress is not None:
            progress(done, total)


def idle_plan(cluster: Cluster, group: Group, phases: list[Phase],
              ranks: list[int]) -> list[list[tuple[float, float]]] | None:
    """run_phases (at "phase" granularity) on links that nothing else uses meanwhile, as the
    (latency, transfer) seconds of each link of each phase that has a step: a phase ends when the
    slowest of its links does (plan_end_s). These are the very delays its events add to the clock
    (an idle link times a transfer as its bytes over its bandwidth, network.Link). None: a phase
    sends twice over one link at once, which shares it, or a delay is negative."""
    plan = []
    for phase in phases:
        if phase.steps == 0:
            continue
        if phase.alongside:  # as _pipelined: one latency, then every transfer at once
            latency_s = phase.steps * phase.latency(cluster.link(ranks[0], INTRA))
            sends = [(cluster.link(r, link_tier(group, r, p.scope)),
                      p.steps * p.chunk_bytes * p.link_scale, latency_s)
                     for p in (phase, *phase.alongside) for r in ranks]
        else:  # as run_phases and _send: each link's latency, then its transfer
            wire = phase.chunk_bytes * phase.link_scale
            links = [cluster.link(r, link_tier(group, r, phase.scope)) for r in ranks]
            sends = [(link, phase.steps * wire, phase.steps * phase.latency(link))
                     for link in links]
        if len({id(link) for link, _, _ in sends}) < len(sends):
            return None
        plan.append([(latency_s, _idle_transfer_s(link, size_bytes))
                     for link, size_bytes, latency_s in sends])
        if not all(latency_s >= 0 and transfer_s >= 0 for latency_s, transfer_s in plan[-1]):
            return None  # events refuse a negative delay: let them say so
    return plan


def _idle_transfer_s(link, size_bytes: float) -> float:
    """network.Link.transfer of size_bytes alone on the link: its timer's delay (0: an event
    already triggered, no time passes)."""
    if size_bytes <= 0:
        return 0.0
    return max(float(size_bytes), 0.0) / (link.bandwidth_bytes_per_s / 1)


def plan_end_s(now_s: float, plan: list[list[tuple[float, float]]]) -> float:
    """When the phases of an idle_plan started at now_s end, adding the delays in the order the
    clock does (x + 0.0 is x: a transfer that takes no time changes nothing)."""
    for sends in plan:
        if len(sends) == 1:  # one representative link
            (latency_s, transfer_s), = sends
            now_s = (now_s + latency_s) + transfer_s
        else:
            now_s = max([(now_s + latency_s) + transfer_s for latency_s, transfer_s in sends])
    return now_s


def _pipelined(env, cluster, group, phase: Phase, ranks: list[int]) -> Iterator:
    """The phase's latency, then its transfers and those of the phases alongside, at once."""
    yield env.timeout(phase.steps * phase.latency(cluster.link(ranks[0], INTRA)))
    transfers = []
    for p in (phase, *phase.alongside):
        transfers += [cluster.link(r, link_tier(group, r, p.scope)).transfer(
            p.steps * p.chunk_bytes * p.link_scale) for r in ranks]
    yield env.all_of(transfers)


def _steps(env, cluster, phase, links, log, progress, done, total) -> Iterator:
    for step in range(phase.steps):
        if progress is not None and step:
            progress(done + step, total)
        start_s = env.now
        sends = [env.process(_send(env, cluster.link(r, tier), phase.chunk_bytes * phase.link_scale,
                                   phase.latency(cluster.link(r, tier)))) for r, tier in links]
        yield env.all_of(sends)
        if log is not None:
            log.extend(StepRecord(r, phase.walk, step, tier, phase.chunk_bytes, start_s, env.now)
                       for r, tier in links)
