"""What the parallelism axes beyond data parallelism need of the model, the cluster and the
other schemes: tensor parallelism (Megatron-LM's layout, parallel/tensor.py) splits every
layer's heads, key/value heads and MLP width t ways over t consecutive ranks. Each impossible
combination is one InputError naming the keys and the arithmetic."""

from __future__ import annotations

from zerosim.errors import InputError
from zerosim.scenario.family import zeropp


def check_axes(scenario) -> None:
    """Tensor parallelism's needs: a shaped model whose heads, key/value heads and MLP width
    split t ways, a world and nodes it divides, and the schemes it is modelled with."""
    m, c, p, t = scenario.model, scenario.cluster, scenario.parallelism, scenario.training
    tp = p.tensor_parallel
    if tp == 1:
        return
    key = f"parallelism.tensor_parallel = {tp}"
    if m.is_bare:
        raise InputError(f"{key} splits the model's matrices by shape, but [model] gives a bare "
                         f"parameter count: give the model's shape (hidden, heads, layers, ...)")
    world, n = c.world_size, c.gpus_per_node
    if world % tp:
        raise InputError(f"{key} must divide the world size {world} ({c.nodes} nodes x {n} GPUs; "
                         f"{world} / {tp} = {world / tp:.4g})")
    if tp % n and n % tp:
        raise InputError(f"{key} must divide cluster.gpus_per_node = {n} or be a multiple of "
                         f"it ({n} / {tp} = {n / tp:.4g}), so that tensor-parallel groups "
                         f"follow node boundaries")
    for name, value in (("model.heads", m.heads), ("model.ffn", m.ffn_width)):
        if value % tp:
            raise InputError(f"{key} must divide {name} = {value} ({value} / {tp} = "
                             f"{value / tp:.4g}): each rank holds an equal part")
    kv = m.n_kv_heads
    if kv % tp and tp % kv:
        raise InputError(f"{key} and model.kv_heads = {kv} must divide one another: each rank "
                         f"holds kv / t key/value heads, or when kv < t a t / kv-th part of one")
    if m.kv_width % tp:  # only when kv < t: kv / t whole heads have head_dim columns each
        # Megatron splits the fused QKV weight's columns evenly (ColumnParallelLinear's divide)
        raise InputError(f"{key} must divide model.kv_heads x head_dim = {kv} x {m.head_dim} = "
                         f"{m.kv_width} ({m.kv_width} / {tp} = {m.kv_width / tp:.4g}): each "
                         f"rank holds an equal part of K's and V's columns")
    if p.tp_comm_overlap and not p.sequence_parallel:
        # Megatron-LM's arguments.py asserts it; PyTorch's async TP overlaps SP's all-gathers
        raise InputError(f"parallelism.tp_comm_overlap with {key} needs "
                         f"parallelism.sequence_parallel = true: the overlap splits sequence "
                         f"parallelism's all-gathers and reduce-scatters around the GEMMs")
    seq = t.seq_len or 0
    if p.sequence_parallel and seq % tp:
        raise InputError(f"parallelism.sequence_parallel splits the sequence {tp} ways, but "
                         f"training.seq_len = {seq} is not a multiple of {tp}")
    if p.shard_group:
        raise InputError(f"{key} with parallelism.shard_group = {p.shard_group}: hybrid sharding "
                         f"beside tensor parallelism is not modelled yet; set one of them")
    on = zeropp(t, p)
    if on:
        raise InputError(f"{key} with {on[0]}: ZeRO++ beside tensor parallelism is not "
                         f"modelled yet; set one of them")
