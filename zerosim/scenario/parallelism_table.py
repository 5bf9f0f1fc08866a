"""The [parallelism] table: how the world's ranks divide beyond plain data parallelism, as a user
writes it (the mesh a step runs on is derived from it: zerosim/parallel/mesh.py).

`shard_group`, `replica_allreduce` and `hpz_partition` were [training] keys; that spelling stays
accepted everywhere a key is read (a scenario file, --set, --vary, a reference), moved here by
the loader (LEGACY_TRAINING_KEYS). Tensor parallelism (Megatron-LM's layout, with its sequence
parallelism) is `tensor_parallel`; what it needs of the model and the cluster is checked in
scenario/axes.py. Pipeline parallelism (`pipeline_parallel`, its schedule, its layer split) splits the
layers into stages on their own ranks (zerosim/parallel/pipeline.py); its checks are in axes.py
too.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from zerosim.contract import PIPELINE_SCHEDULES
from zerosim.scenario.checks import one_of, positive

REPLICA_ALLREDUCES = ("every_micro_step", "once_per_step")


@dataclass(frozen=True, kw_only=True)
class ParallelismConfig:
    """[parallelism]: tensor parallelism, hybrid sharding's groups and ZeRO++'s secondary
    partition."""

    tensor_parallel: int = 1
    """t: ranks that split every layer's matrices among them, Megatron-LM's way (QKV and the
    MLP's first projections by columns, the attention output and the MLP's last projection by
    rows, the embedding and the output layer by vocabulary). Consecutive ranks, inside a node
    when t <= gpus_per_node. The ZeRO stage then shards each rank's slice over the N / t
    data-parallel ranks. Must divide the world size, model.heads and model.ffn. 1: off."""
    sequence_parallel: bool = False
    """With tensor_parallel > 1: Megatron's sequence parallelism (Korthikanti et al. 2022): the
    norms, dropouts and residuals work on 1/t of the sequence, and each all-reduce of tensor
    parallelism becomes a reduce-scatter and an all-gather."""
    tp_comm_overlap: bool = False
    """With tensor_parallel > 1: tensor parallelism's collectives overlap the GEMMs around them
    (Megatron's userbuffers, PyTorch's async TP) instead of blocking the compute stream
    (Megatron's default)."""

    pipeline_parallel: int = 1
    """p: pipeline stages, each a contiguous block of layers on its own t x d ranks (Megatron-LM's
    rank order tp-dp-pp: a stage's ranks are N / p consecutive ranks); the embedding on the
    first stage, the final norm, output layer and loss on the last. The micro-batches of a step
    are training.gradient_accumulation. Must divide world / t. 1: off."""
    pipeline_schedule: str = "1f1b"
    """With pipeline_parallel > 1: the order each stage runs its micro-batches' forwards and
    backwards: "gpipe" (every forward, then every backward), "1f1b" (PipeDream-flush: Megatron's
    and DeepSpeed's default) or "interleaved_1f1b" (Megatron's, with virtual_stages chunks per
    stage)."""
    virtual_stages: int = 1
    """v: model chunks per pipeline stage under "interleaved_1f1b" (Megatron's
    virtual_pipeline_model_parallel_size, >= 2 there); 1 for the other schedules."""
    pipeline_layers: tuple[int, ...] = ()
    """Layers of each virtual stage (p x v of them, in order; chunk c of stage i is virtual stage
    c x p + i), adding up to model.layers; the first and last may be 0 (a stage of the embedding
    alone, or of the head alone). Empty: model.layers split evenly (it must then divide by p x v)."""

    shard_group: int = 0
    """Stages 1-3: ranks that shard the model states among them; the N / shard_group groups
    replicate (HSDP, MiCS). 0: all ranks (plain ZeRO). Must divide the world size and be a
    divisor or a multiple of gpus_per_node."""
    replica_allreduce: str = "every_micro_step"
    """Under shard_group: when the shards are all-reduced across the replica groups:
    "every_micro_step" (FSDP2's HSDP default) or "once_per_step" (MiCS, at the accumulation
    boundary)."""
    hpz_partition: int = 0
    """Stage 3, ZeRO++ hpZ: a secondary copy of each gathered layer, sharded over this many
    ranks of a node, that backward gathers from (DeepSpeed's zero_hpz_partition_size); 0 or 1
    = off (DeepSpeed's default is 1)."""

    def __post_init__(self) -> None:
        one_of("parallelism.replica_allreduce", self.replica_allreduce, REPLICA_ALLREDUCES)
        for key in ("shard_group", "hpz_partition"):
            positive(f"parallelism.{key}", getattr(self, key), allow_zero=True)
        positive("parallelism.tensor_parallel", self.tensor_parallel)
        positive("parallelism.pipeline_parallel", self.pipeline_parallel)
        positive("parallelism.virtual_stages", self.virtual_stages)
        one_of("parallelism.pipeline_schedule", self.pipeline_schedule, PIPELINE_SCHEDULES)
        for i, layers in enumerate(self.pipeline_layers):
            positive(f"parallelism.pipeline_layers[{i}]", layers, allow_zero=True)


PARALLELISM_KEYS = tuple(f.name for f in fields(ParallelismConfig))
LEGACY_TRAINING_KEYS = ("shard_group", "replica_allreduce", "hpz_partition")
"""[training] keys that are [parallelism]'s now, still accepted under their old table."""


def canonical_key(table: str, key: str) -> tuple[str, str]:
    """(table, key) with the old [training] spelling of a [parallelism] key moved to its table."""
    moved = table == "training" and key in LEGACY_TRAINING_KEYS
    return ("parallelism", key) if moved else (table, key)

