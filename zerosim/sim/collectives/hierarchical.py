"""Two-level collectives for multi-node clusters: rings inside each node over the fast link, one
ring per local GPU index across nodes over the slow one (NCCL's and Horovod's hierarchical
all-reduce). With g GPUs per node, m nodes, n = g m ranks and a buffer of S bytes:

    reduce_scatter  intra reduce-scatter of S, then inter reduce-scatter of S/g
    all_gather      inter all-gather of S/g, then intra all-gather of S
    all_reduce      intra reduce-scatter, inter reduce-scatter, inter all-gather, intra all-gather

Each rank sends (g-1)/g S + (m-1)/m S/g = (n-1)/n S per walk: the flat ring's bytes, but the slow
link sees only (m - 1) latencies per walk instead of (n - 1), and carries S/g of the buffer.
"""

from __future__ import annotations

from zerosim.contract import RING_WALKS
from zerosim.sim.collectives.ring import Group, Phase
from zerosim.sim.network import INTER, INTRA


def is_applicable(group: Group) -> bool:
    """Whole nodes, more than one of them, more than one GPU each."""
    return group.nodes > 1 and group.gpus_per_node > 1 and group.size % group.gpus_per_node == 0


def hierarchical_phases(op: str, size_bytes: float, group: Group) -> list[Phase]:
    g, m = group.gpus_per_node, group.nodes
    n = g * m
    phases: list[Phase] = []
    for walk in RING_WALKS[op]:
        if walk in ("reduce_scatter", "scatter"):
            phases += [Phase(walk, INTRA, g - 1, size_bytes / g),
                       Phase(walk, INTER, m - 1, size_bytes / n)]
        else:  # all_gather, gather: the same two walks in reverse order
            phases += [Phase(walk, INTER, m - 1, size_bytes / n),
                       Phase(walk, INTRA, g - 1, size_bytes / g)]
    return phases
