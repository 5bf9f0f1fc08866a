"""One collective alone on the simulated cluster, reported as nccl-tests reports it (`zerosim
collective`).

nccl-tests (PERFORMANCE.md) defines, for a buffer of S bytes taking t seconds on n ranks,
algbw = S / t and busbw = algbw * factor (zerosim.contract.busbw_factor): busbw is comparable to
the link bandwidth whatever n is. One departure: our broadcast and reduce are two ring walks (see
collectives/ring.py), not NCCL's deeply pipelined chain, so their busbw is about n / (2(n-1)) of
the link bandwidth.
"""

from __future__ import annotations

from typing import Callable

import simpy

from zerosim.contract import ALL_GATHER, OPS, REDUCE_SCATTER, busbw_factor
from zerosim.errors import InputError
from zerosim.scenario.checks import MAX_VALUE
from zerosim.sim.collectives import Collectives
from zerosim.sim.collectives.ring import FLAT, Group, bytes_sent_per_rank, representatives, run_phases
from zerosim.sim.costs import price_phases
from zerosim.sim.network import Cluster
from zerosim.units import GB

# Chunk by chunk over every rank's links costs O(n^2) events.
MAX_RANKS_CHUNK_BY_CHUNK = 512
# Ring steps moved one by one (about 20 us each); beyond, each walk moves as one delay and one
# transfer per link (ring.py's "phase" granularity, the engine's): the same time on links no other
# transfer shares, in O(1) events, so a ring of 2**40 nodes answers as fast as simulate does.
MAX_STEPS_ONE_BY_ONE = 10_000


SENDS_PER_BYTE = {ALL_GATHER: 1, REDUCE_SCATTER: 1}
"""The most bytes a rank sends per byte of a collective, rounded up to a whole number: (n-1)/n
for a ring's all-gather and reduce-scatter; 2(n-1)/n, so 2, for every other op (all-reduce: a
reduce-scatter, then an all-gather; broadcast and reduce as sim/collectives prices them). So
what `collective` reports (bytes_sent_per_rank) stays within 2**53 (review I6)."""


def check_sends(op: str, sizes: list[int]) -> None:
    """Refuse, before simulating, sizes whose bytes sent per rank could pass 2**53."""
    factor = SENDS_PER_BYTE.get(op, 2)
    if max(sizes) * factor > MAX_VALUE:
        raise InputError(f"{op} of {max(sizes):,} bytes: a rank sends up to {factor} x that, "
                         f"beyond what zerosim models (at most 2**53 = {MAX_VALUE}); at most "
                         f"{MAX_VALUE // factor:,} bytes")


def _group_size(scenario, ranks: int | None) -> int:
    c = scenario.cluster
    if c.world_size < 2:
        raise InputError("the cluster has a single rank (cluster.nodes = 1, cluster.gpus_per_node "
                         "= 1): a collective needs at least 2")
    n = c.world_size if ranks is None else ranks
    if not 2 <= n <= c.world_size:
        raise InputError(f"--ranks {n}: a collective needs 2..{c.world_size} ranks (the cluster has "
                         f"{c.nodes} node(s) x {c.gpus_per_node} GPUs)")
    return n


def _links(scenario, group: Group, flat: bool, mode: str) -> list[int]:
    """Ranks whose links are simulated: one representative per role when no link of the group is
    degraded ("auto"), every rank's otherwise or when mode is "per_rank"."""
    # Only a degraded link inside the group changes a collective (stragglers and jitter slow
    # compute, not links).
    degraded = any(r < group.size for r in scenario.variation.degraded)
    if degraded and mode == "symmetric":
        raise InputError("--mode symmetric needs uniform links, but [variation] degrades a link of "
                         "the group")
    if not degraded and mode != "per_rank":
        return representatives(group, {FLAT} if flat else set())
    if group.size > MAX_RANKS_CHUNK_BY_CHUNK:
        raise InputError(f"a collective over every rank's links (a degraded link, or --mode "
                         f"per_rank), chunk by chunk, is limited to {MAX_RANKS_CHUNK_BY_CHUNK} "
                         f"ranks ({group.size} asked)")
    return list(range(group.size))


def simulate_collective(scenario, op: str, size_bytes: float, ranks: int | None = None,
                        log: list | None = None, mode: str = "auto",
                        progress: Callable[[int, int], None] | None = None) -> dict:
    """One collective over the first `ranks` ranks, chunk by chunk ("step" granularity, which
    `log` needs), or walk by walk past MAX_STEPS_ONE_BY_ONE steps; `progress(done, total)` in
    ring steps (512 ranks one by one take seconds)."""
    n = _group_size(scenario, ranks)
    if op not in OPS:
        raise InputError(f"--op {op!r} is not one of {', '.join(OPS)}")
    group = Group(n, min(scenario.cluster.gpus_per_node, n))
    collectives = Collectives(scenario, group)
    choice = collectives.choose(op, size_bytes)
    phases = price_phases(scenario, op, size_bytes, group, choice.phases)
    links = _links(scenario, group, collectives.flat, mode)
    env = simpy.Environment()
    cluster = Cluster(env, scenario, links)
    steps = sum(phase.steps for phase in phases)
    granularity = "step" if log is not None or steps <= MAX_STEPS_ONE_BY_ONE else "phase"
    env.process(run_phases(env, cluster, group, phases, links, granularity=granularity, log=log,
                           progress=progress))
    env.run()
    time_s = env.now
    if not 0 < time_s < float("inf"):
        raise InputError(f"{op} of {size_bytes} bytes takes {time_s} s: check the scenario's "
                         f"link bandwidths and latencies")
    algbw = size_bytes / time_s
    return {"op": op, "size_bytes": size_bytes, "ranks": n, "algorithm": choice.algorithm,
            "protocol": choice.protocol, "library": collectives.library,
            "time_s": time_s, "algbw_GBps": algbw / GB,
            "busbw_GBps": algbw * busbw_factor(op, n) / GB,
            "bytes_sent_per_rank": bytes_sent_per_rank(phases),
            "ranks_simulated": len(links), "notes": scenario.cluster.notes}
