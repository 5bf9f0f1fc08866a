"""NCCL's choice of algorithm and protocol for one call: every (algorithm, protocol) its tuner
enables for the op on this communicator is priced by its closed form (ring_nccl, tree, nvls,
pat), and the least predicted time wins; ties keep NCCL's enum order (Tree, Ring, NVLS,
NVLSTree, PAT; LL, LL128, Simple), as enqueue.cc's topoGetAlgoInfo does.

cluster.collective_algorithm and cluster.collective_protocol act as NCCL_ALGO and NCCL_PROTO:
they narrow the candidates. An algorithm that cannot run an op at all (tree for all_gather)
leaves that op to the tuner, as NCCL_ALGO="allreduce:tree" would; one that cannot run on this
cluster (nvls without NVLink SHARP, pat with several GPUs per node) is an error.
"""

from __future__ import annotations

from zerosim.contract import ALL_GATHER, ALL_REDUCE, COLLECTIVE_OPS, OPS, REDUCE_SCATTER
from zerosim.errors import InputError
from zerosim.sim.collectives import nccl_tables as T
from zerosim.sim.collectives.comm import Comm
from zerosim.sim.collectives.hierarchical import pipelined_cost
from zerosim.sim.collectives.nvls import nvls_cost, nvls_tree_cost
from zerosim.sim.collectives.pat import pat_cost
from zerosim.sim.collectives.ring_nccl import ring_cost
from zerosim.sim.collectives.tree import tree_cost

HIERARCHICAL = "hierarchical"
COSTS = {T.TREE: tree_cost, T.RING: ring_cost, T.NVLS: nvls_cost, T.NVLS_TREE: nvls_tree_cost,
         T.PAT: pat_cost, HIERARCHICAL: pipelined_cost}


def candidates(comm: Comm, op: str, algorithm: str = "auto", protocol: str = "auto") -> list:
    """Every enabled (algorithm, protocol)'s cost, in NCCL's order. "auto" algorithms are NCCL's
    own (not hierarchical)."""
    algorithms = T.ALGORITHM_ORDER if algorithm == "auto" else (algorithm,)
    protocols = T.PROTOCOL_ORDER if protocol == "auto" else (protocol,)
    costs = (COSTS[a](comm, op, p) for a in algorithms for p in protocols)
    return [cost for cost in costs if cost is not None]


def choose(comm: Comm, op: str, size_bytes: float, algorithm: str = "auto",
           protocol: str = "auto"):
    """The cost with the least predicted time for size_bytes."""
    found = candidates(comm, op, algorithm, protocol)
    if not found and algorithm != "auto" and _runs_op(algorithm, op) is False:
        found = candidates(comm, op, "auto", protocol)  # NCCL_ALGO does not cover this op
    if not found:
        raise InputError(_nothing_runs(comm, op, algorithm, protocol))
    return min(found, key=lambda cost: cost.time_s(size_bytes))


def check(comm: Comm, algorithm: str, protocol: str) -> None:
    """Refuse, before any work, an override that runs no op of a training step here."""
    if algorithm == "auto" and protocol == "auto":
        return
    for op in OPS:
        if candidates(comm, op, algorithm, protocol):
            return
    raise InputError(_nothing_runs(comm, "any collective", algorithm, protocol))


def _runs_op(algorithm: str, op: str) -> bool:
    """Whether the algorithm is defined for the op at all (whatever the cluster)."""
    if algorithm in (T.TREE, T.NVLS_TREE):
        return op == ALL_REDUCE
    if algorithm == T.PAT:
        return op in (REDUCE_SCATTER, ALL_GATHER)
    if algorithm == T.NVLS:
        return op in COLLECTIVE_OPS
    return True


def _nothing_runs(comm: Comm, op: str, algorithm: str, protocol: str) -> str:
    if protocol != "auto" and any(candidates(comm, o, algorithm) for o in OPS):
        return (f"cluster.collective_algorithm = {algorithm!r} does not run with "
                f"cluster.collective_protocol = {protocol!r}: NVLS, NVLSTree and PAT run Simple "
                f"only")
    why = {T.NVLS: "needs NVLink SHARP (cluster.nvlink_sharp) and a group inside one node",
           T.NVLS_TREE: "needs NVLink SHARP (cluster.nvlink_sharp) and several nodes",
           T.PAT: "needs one GPU per node and several nodes",
           HIERARCHICAL: "needs several nodes of several GPUs"}.get(algorithm)
    group = f"the group is {comm.ranks} ranks, {comm.ppn} per node"
    if why:
        return f"cluster.collective_algorithm = {algorithm!r} cannot run here: it {why}; {group}"
    return (f"no algorithm runs {op} with cluster.collective_algorithm = {algorithm!r} and "
            f"cluster.collective_protocol = {protocol!r} ({group})")
