"""The groups of ranks a step's collectives run among: the data-parallel ranks (WORLD), tensor
parallelism's group, hybrid sharding's shard and replica groups, ZeRO++'s hpZ group and qgZ's
two all-to-all groups (parallel/mesh.py sizes them; scenario/family.py and scenario/axes.py say
which ranks each holds).

WORLD names the ranks that hold the same slice of the model, among which a stage reduces
gradients and gathers parameters: every rank without tensor parallelism, else the N / t ranks t
apart (Megatron-LM's data-parallel group, megatron/core/parallel_state.py,
initialize_model_parallel: TP groups are consecutive ranks, data-parallel groups strided by
them), so the stage programs name it as they always have.

A group is described as collectives.ring.Group describes the world: its size and how many of its
ranks share a node. Groups of one kind run side by side, one per place in the node (the n
replica groups of a node each cross the network at once), so a group that has fewer ranks in a
node than the node has GPUs gets that share of the node's NICs (collectives.Collectives,
node_gpus): on a rail-optimized DGX with a NIC per GPU, each replica group has its GPU's NIC.

    world     N / (t p) ranks t apart, min(N / (t p), max(1, n / t)) per node (all N when
              t = p = 1): one pipeline stage's data-parallel ranks
    tp        t consecutive ranks, min(t, n) per node (a t > n group crosses nodes)
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
TP = "tp"
"""Tensor parallelism's group, and the stream its collectives run on (a trace lane of its own)."""


def world_group(scenario, stage: int) -> Group:
    """The data-parallel ranks (WORLD: module docstring), the group of a collective that names
    none: every rank, the mesh's node at a time, or under tensor parallelism the N / t ranks t
    apart, t such groups side by side (each with its share of a node's NICs: node_gpus)."""
    mesh = mesh_of(scenario, stage)
    if mesh.tp == 1 and mesh.pp == 1:
        return Group(mesh.world, mesh.node)
    d = mesh.data_parallel  # a pipeline stage's block of tp x d ranks may be less than a node
    return Group(d, min(d, max(1, mesh.node // mesh.tp)), stride=mesh.tp)


def all_ranks(scenario, stage: int) -> Group:
    """All N ranks, the mesh's node at a time: whose links stand for every link role
    (collectives.ring.representatives), whichever group a collective runs on."""
    mesh = mesh_of(scenario, stage)
    return Group(mesh.world, mesh.node)


def node_gpus(scenario, stage: int) -> int:
    """GPUs of a node, among which a group with fewer ranks in it shares the NICs (Comm.of)."""
    return mesh_of(scenario, stage).node


def subgroups(scenario, stage: int = 3) -> dict[str, Group]:
    """The groups `stage`'s program uses under the scenario beside WORLD, by name (none for
    plain ZeRO): tensor parallelism's, hybrid sharding's from stage 1, ZeRO++'s at stage 3."""
    mesh = mesh_of(scenario, stage)
    world, n = mesh.world, mesh.node
    out: dict[str, Group] = {}
    if mesh.tp > 1:
        out[TP] = Group(mesh.tp, min(mesh.tp, n))
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
