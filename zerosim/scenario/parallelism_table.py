"""The [parallelism] table: how the world's ranks divide beyond plain data parallelism, as a user
writes it (the mesh a step runs on is derived from it: zerosim/parallel/mesh.py).

`shard_group`, `replica_allreduce` and `hpz_partition` were [training] keys; that spelling stays
accepted everywhere a key is read (a scenario file, --set, --vary, a reference), moved here by
the loader (LEGACY_TRAINING_KEYS). Tensor and pipeline parallelism will be keys of this table.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from zerosim.scenario.checks import one_of, positive

REPLICA_ALLREDUCES = ("every_micro_step", "once_per_step")


@dataclass(frozen=True, kw_only=True)
class ParallelismConfig:
    """[parallelism]: hybrid sharding's groups and ZeRO++'s secondary partition."""

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


PARALLELISM_KEYS = tuple(f.name for f in fields(ParallelismConfig))
LEGACY_TRAINING_KEYS = ("shard_group", "replica_allreduce", "hpz_partition")
"""[training] keys that are [parallelism]'s now, still accepted under their old table."""


def canonical_key(table: str, key: str) -> tuple[str, str]:
    """(table, key) with the old [training] spelling of a [parallelism] key moved to its table."""
    moved = table == "training" and key in LEGACY_TRAINING_KEYS
    return ("parallelism", key) if moved else (table, key)

