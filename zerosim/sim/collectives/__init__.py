"""Collectives on the simulated cluster: which algorithm, and the phases it moves its bytes in.

Each algorithm is a module beside this one with its closed form in its docstring (ring.py,
hierarchical.py); `phases_of` turns an op, a buffer and a group into that algorithm's phases,
which ring.run_phases moves over the links. Pricing the phases from a calibration profile is
zerosim.sim.costs; one collective alone, with nccl-tests' figures, is zerosim.sim.collective_bench.
"""

from __future__ import annotations

from zerosim.errors import InputError
from zerosim.sim.collectives.hierarchical import hierarchical_phases, is_applicable
from zerosim.sim.collectives.ring import Group, Phase, bytes_sent_per_rank, ring_phases


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


def phases_of(op: str, size_bytes: float, group: Group, algorithm: str) -> list[Phase]:
    """The phases of `op` over a buffer of size_bytes on `group` under `algorithm`."""
    if group.size == 1:
        return []
    if algorithm == "hierarchical":
        return hierarchical_phases(op, size_bytes, group)
    return ring_phases(op, size_bytes, group)


__all__ = ["Group", "Phase", "bytes_sent_per_rank", "choose_algorithm", "phases_of"]
