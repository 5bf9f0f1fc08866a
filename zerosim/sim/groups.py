"""The groups of ranks a step's collectives run among, beyond the whole world: hybrid
sharding's shard and replica groups, ZeRO++'s hpZ group and qgZ's two all-to-all groups
(parallel/mesh.py sizes them; scenario/family.py says which ranks each holds).

A group is described as collectives.ring.Group describes the world: its size and how many of its
ranks share a node. Groups of one kind run side by side, one per place in the node (the n
replica groups of a node each cross the network at once), so a group that has fewer ranks in a
node than the node has GPUs gets that share of the node's NICs (collectives.Collectives,
node_gpus): on a rail-optimized DGX with a NIC per GPU, each replica group has its GPU's NIC.

    shard     g consecutive ranks, min(g, n) per node
    replica   N / g ranks g apart, max(1, n / g) per node
    hpz       h ranks of one node (ZeRO++ hpZ: backward's all-gather)
    node      the n ranks of a node (qgZ's first all-to-all)
    inter     one rank per node, n apart, N / n of them (qgZ's second all-to-all)
"""

from __future__ import annotations

from zerosim.parallel.mesh import mesh_of
from zerosim.sim.collectives.ring import Group

WORLD = "world"
SHARD, REPLICA, HPZ, NODE, INTER_NODE = "shard", "replica", "hpz", "node", "inter"


def world_group(scenario, stage: int) -> Group:
    """Every rank, the mesh's node at a time: the group of a collective that names none."""
    mesh = mesh_of(scenario, stage)
    return Group(mesh.world, mesh.node)


def subgroups(scenario, stage: int = 3) -> dict[str, Group]:
    """The groups `stage`'s program uses under the scenario, by name (none for plain ZeRO):
    hybrid sharding's from stage 1, ZeRO++'s at stage 3."""
    mesh = mesh_of(scenario, stage)
    world, n = mesh.world, mesh.node
    out: dict[str, Group] = {}
    if mesh.hybrid:
        g = mesh.dp_shard
        out[SHARD] = Group(g, min(g, n))
        out[REPLICA] = Group(mesh.dp_replicate, max(1, n // g), stride=g)
    if mesh.hpz:
        out[HPZ] = Group(mesh.hpz, mesh.hpz)
    if mesh.qgz:
        out[NODE] = Group(n, n)
        out[INTER_NODE] = Group(world // n, 1, stride=n)
    return out
