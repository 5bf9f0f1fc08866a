"""Collectives on the simulated cluster: which algorithm, its phases, and the nccl-tests figures.

nccl-tests (PERFORMANCE.md) defines, for a buffer of S bytes taking t seconds on n ranks,
algbw = S / t and busbw = algbw * factor, with factor 2(n-1)/n for all_reduce, (n-1)/n for
reduce_scatter and all_gather, and 1 for broadcast and reduce: busbw is comparable to the link
bandwidth whatever n is. One departure: our broadcast and reduce are two ring walks (see ring.py),
not NCCL's deeply pipelined chain, so their busbw is about n / (2(n-1)) of the link bandwidth.
"""

from __future__ import annotations

import simpy

from zerosim.collectives.hierarchical import hierarchical_phases, is_applicable
from zerosim.collectives.ring import (FLAT, Group, Phase, bytes_sent_per_rank, representatives,
                                      ring_phases, run_phases)
from zerosim.errors import InputError
from zerosim.network import Cluster

# Chunk by chunk over every rank's links costs O(n^2) events.
MAX_RANKS_CHUNK_BY_CHUNK = 512
OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")


def busbw_factor(op: str, n: int) -> float:
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("reduce_scatter", "all_gather"):
        return (n - 1) / n
    return 1.0


def choose_algorithm(requested: str, group: Group) -> str:
    """"auto": hierarchical where it applies (several whole nodes of several GPUs), else ring."""
    if requested == "auto":
        return "hierarchical" if is_applicable(group) else "ring"
    if requested == "hierarchical" and not is_applicable(group):
        raise InputError(
            f"cluster.collective_algorithm = 'hierarchical' needs several whole nodes of several "
            f"GPUs, but the group is {group.size} rank(s) at {group.gpus_per_node} per node "
            f"({group.size} / {group.gpus_per_node} = {group.size / group.gpus_per_node:.4g} nodes)")
    return requested


def plan(op: str, size_bytes: float, group: Group, algorithm: str) -> list[Phase]:
    if group.size == 1:
        return []
    if algorithm == "hierarchical":
        return hierarchical_phases(op, size_bytes, group)
    return ring_phases(op, size_bytes, group)


def simulate_collective(scenario, op: str, size_bytes: float, ranks: int | None = None,
                        log: list | None = None, mode: str = "auto") -> dict:
    """One collective over the first `ranks` ranks, chunk by chunk ("step" granularity): through
    one representative link per role when no link of the group is degraded ("auto"), over every
    rank's links otherwise or when mode is "per_rank"."""
    c, v = scenario.cluster, scenario.variation
    if c.world_size < 2:
        raise InputError("the cluster has a single rank (cluster.nodes = 1, cluster.gpus_per_node "
                         "= 1): a collective needs at least 2")
    n = c.world_size if ranks is None else ranks
    if not 2 <= n <= c.world_size:
        raise InputError(f"--ranks {n}: a collective needs 2..{c.world_size} ranks (the cluster has "
                         f"{c.nodes} node(s) x {c.gpus_per_node} GPUs)")
    if op not in OPS:
        raise InputError(f"--op {op!r} is not one of {', '.join(OPS)}")
    from zerosim.costs import price_phases

    group = Group(n, min(c.gpus_per_node, n))
    algorithm = choose_algorithm(c.collective_algorithm, group)
    phases = price_phases(scenario, op, size_bytes, group, plan(op, size_bytes, group, algorithm))
    # Only a degraded link inside the group changes a collective (stragglers and jitter slow
    # compute, not links).
    degraded = any(r < n for r in v.degraded)
    if degraded and mode == "symmetric":
        raise InputError("--mode symmetric needs uniform links, but [variation] degrades a link of "
                         "the group")
    if not degraded and mode != "per_rank":
        links = representatives(group, {FLAT} if algorithm == "ring" else set())
    elif n > MAX_RANKS_CHUNK_BY_CHUNK:
        raise InputError(f"a collective over every rank's links (a degraded link, or --mode "
                         f"per_rank), chunk by chunk, is limited to {MAX_RANKS_CHUNK_BY_CHUNK} "
                         f"ranks ({n} asked)")
    else:
        links = list(range(n))
    env = simpy.Environment()
    cluster = Cluster(env, scenario, links)
    env.process(run_phases(env, cluster, group, phases, links, granularity="step", log=log))
    env.run()
    time_s = env.now
    if not 0 < time_s < float("inf"):
        raise InputError(f"{op} of {size_bytes} bytes takes {time_s} s: check the scenario's "
                         f"link bandwidths and latencies")
    algbw = size_bytes / time_s
    return {"op": op, "size_bytes": size_bytes, "ranks": n, "algorithm": algorithm,
            "time_s": time_s, "algbw_GBps": algbw / 1e9,
            "busbw_GBps": algbw * busbw_factor(op, n) / 1e9,
            "bytes_sent_per_rank": bytes_sent_per_rank(phases),
            "ranks_simulated": len(links)}


__all__ = ["OPS", "Group", "Phase", "busbw_factor", "bytes_sent_per_rank", "choose_algorithm",
           "plan", "simulate_collective"]
