"""What the parallelism axes beyond data parallelism need of the model, the cluster and the
other schemes: tensor parallelism (Megatron-LM's layout, parallel/tensor.py) splits every
layer's heads, key/value heads and MLP width t ways over t consecutive ranks; pipeline
parallelism (parallel/pipeline.py) splits the layers into p stages of N / p ranks, run in a
schedule of training.gradient_accumulation micro-batches, beside the ZeRO stages its framework
runs with a pipeline. Each impossible combination is one InputError naming the keys and the
arithmetic."""

from __future__ import annotations

from zerosim.errors import InputError
from zerosim.frameworks import framework_of
from zerosim.scenario.family import offloads, zeropp


def check_axes(scenario) -> None:
    """Every axis's needs: tensor parallelism's, then pipeline parallelism's."""
    _check_tensor(scenario)
    _check_pipeline(scenario)


def _check_tensor(scenario) -> None:
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


def _check_pipeline(scenario) -> None:
    """Pipeline parallelism's needs: a shaped model, a world that t x p divide, a layer split
    that adds up, a schedule its micro-batches fit, and the schemes modelled beside it."""
    m, c, p, t = scenario.model, scenario.cluster, scenario.parallelism, scenario.training
    pp, v = p.pipeline_parallel, p.virtual_stages
    interleaved = p.pipeline_schedule == "interleaved_1f1b"
    if pp == 1:
        if v != 1 or p.pipeline_layers:
            raise InputError("parallelism.virtual_stages and pipeline_layers need "
                             "parallelism.pipeline_parallel > 1")
        return
    key = f"parallelism.pipeline_parallel = {pp}"
    if m.is_bare:
        raise InputError(f"{key} splits the model's layers into stages, but [model] gives a bare "
                         f"parameter count: give the model's shape (hidden, heads, layers, ...)")
    world, ways = c.world_size, p.tensor_parallel * pp
    if world % ways:
        raise InputError(f"{key} x tensor_parallel = {p.tensor_parallel} must divide the world "
                         f"size {world} ({world} / {ways} = {world / ways:.4g})")
    if interleaved and v < 2:
        raise InputError(f"parallelism.pipeline_schedule = 'interleaved_1f1b' needs "
                         f"parallelism.virtual_stages >= 2 model chunks per stage, not {v}")
    if not interleaved and v != 1:
        raise InputError(f"parallelism.virtual_stages = {v} needs pipeline_schedule = "
                         f"'interleaved_1f1b' (the {p.pipeline_schedule!r} schedule runs one "
                         f"chunk per stage)")
    micro = t.gradient_accumulation
    if interleaved and micro % pp:
        # Megatron-LM's schedules.py (forward_backward_pipelining_with_interleaving) asserts it
        raise InputError(f"pipeline_schedule = 'interleaved_1f1b' runs micro-batches in groups "
                         f"of p = {pp}: training.gradient_accumulation = {micro} must be a "
                         f"multiple of {pp}")
    _check_layer_split(m.n_layers, pp, v, p.pipeline_layers)
    fw = framework_of(t)
    if p.pipeline_schedule not in fw.pipeline_schedules:
        raise InputError(f"parallelism.pipeline_schedule = {p.pipeline_schedule!r} with "
                         f"training.framework = {fw.name!r}, which runs "
                         f"{' or '.join(map(repr, fw.pipeline_schedules))} only")
    if t.zero_stage not in fw.pipeline_stages:
        allowed = " or ".join(map(str, fw.pipeline_stages))
        raise InputError(f"{key} with training.framework = {fw.name!r} runs zero_stage {allowed}, "
                         f"not {t.zero_stage}: {fw.pipeline_refusal}")
    # ZeRO++ needs ZeRO-3, which no framework runs beside a pipeline (refused above).
    for on, what in ((p.shard_group, f"parallelism.shard_group = {p.shard_group}"),
                     (offloads(t), "offload")):
        if on:
            raise InputError(f"{key} with {what}: not modelled beside a pipeline yet; set one of "
                             f"them")


def _check_layer_split(layers: int, pp: int, v: int, given: tuple[int, ...]) -> None:
    chunks = pp * v
    where = f"{pp} stages" + (f" x {v} chunks" if v > 1 else "")
    if not given:
        if layers % chunks:
            raise InputError(f"model.layers = {layers} does not split evenly over {where}: give "
                             f"parallelism.pipeline_layers, {chunks} numbers adding up to {layers}")
        return
    if len(given) != chunks:
        raise InputError(f"parallelism.pipeline_layers has {len(given)} entries: give one per "
                         f"virtual stage, {where} = {chunks}")
    if sum(given) != layers:
        raise InputError(f"parallelism.pipeline_layers adds up to {sum(given)}, not "
                         f"model.layers = {layers}")
    empty = [i for i, n in enumerate(given[1:-1], 1) if n == 0]
    if empty:
        raise InputError(f"parallelism.pipeline_layers[{empty[0]}] = 0: only the first and the "
                         f"last virtual stage (which hold the embedding and the head) may have "
                         f"no layers")
