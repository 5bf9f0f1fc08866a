"""The mesh one stage's step runs on: the world's ranks as named axes, derived in one place
(and once per layout: cached), as torchtitan's ParallelDims names them (dp_replicate, dp_shard,
tp, pp).

    world = dp_replicate x dp_shard x tp x pp

`tp` consecutive ranks split every layer's matrices (tensor parallelism, parallel/tensor.py:
each holds its slice); `dp_shard` ranks share each model-state shard of a slice (hybrid
sharding's shard group, else every data-parallel rank: world / tp; 1 at stage 0, which shards
nothing); `dp_replicate` copies of each shard exist (HSDP's and MiCS's replica groups, and the
data-parallel ranks of stage 0); `pp` pipeline stages each hold a block of the layers on N / pp
consecutive ranks (Megatron-LM's rank order tp-dp-pp: parallel_state.py,
initialize_model_parallel), so the data-parallel ranks of a stage are d = N / (tp x pp), tp
apart, and a stage's neighbour is tp x d ranks away (parallel/pipeline.py splits the layers).
ZeRO++ adds two layouts of its own at stage 3: hpZ's secondary partition over `hpz` ranks of a
node, and qgZ's all-to-alls inside a node and then across nodes. What each stage splits
(`param_ways`, `grad_ways`, `optimizer_ways`) is a property of the mesh, so memory, the stage
programs and the planner all read the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from zerosim.scenario.family import hpz


@dataclass(frozen=True)
class Mesh:
    """The axes of one stage's step, each a count of ranks."""

    stage: int
    world: int
    node: int
    """Ranks of one node in the world (min(gpus_per_node, world))."""
    dp_shard: int
    """Ranks that shard the model states among them."""
    dp_replicate: int
    """Copies of each shard: world / (dp_shard x tp x pp)."""
    hpz: int = 0
    """ZeRO++ hpZ's secondary partition (ranks of a node) at stage 3; 0 off."""
    qgz: bool = False
    """ZeRO++ qgZ's all-to-alls (within a node, then across nodes) at stage 3."""
    tp: int = 1
    """Ranks of a tensor-parallel group: consecutive, each holding 1/tp of every layer."""
    pp: int = 1
    """Pipeline stages: blocks of tp x data_parallel consecutive ranks, one per stage."""

    def __post_init__(self) -> None:
        product = self.dp_replicate * self.dp_shard * self.tp * self.pp
        assert product == self.world, (
            f"dp_replicate({self.dp_replicate}) * dp_shard({self.dp_shard}) * tp({self.tp}) * "
            f"pp({self.pp}) != world({self.world})")

    @property
    def param_ways(self) -> int:
        """How many ways the parameters are split (ZeRO-3)."""
        return self.dp_shard if self.stage >= 3 else 1

    @property
    def grad_ways(self) -> int:
        """How many ways the gradients are split (ZeRO-2 on)."""
        return self.dp_shard if self.stage >= 2 else 1

    @property
    def optimizer_ways(self) -> int:
        """How many ways the optimizer states are split (ZeRO-1 on)."""
        return self.dp_shard if self.stage >= 1 else 1

    @property
    def hybrid(self) -> bool:
        """Whether shards are replicated across groups (hybrid sharding's replica groups)."""
        return self.stage >= 1 and self.dp_replicate > 1

    @property
    def data_parallel(self) -> int:
        """Ranks that hold the same slice of the model (N_d = world / (tp x pp))."""
        return self.world // (self.tp * self.pp)

    @property
    def nodes(self) -> int:
        return self.world // self.node


def mesh_of(scenario, stage: int) -> Mesh:
    """The mesh `stage` runs on under the scenario's cluster and [parallelism] table, derived
    once per layout whoever asks (memory, the step's shape, the subgroups, plan)."""
    c = scenario.cluster
    return _mesh(stage, c.world_size, c.gpus_per_node, scenario.parallelism,
                 scenario.training.quantized_gradients)


@lru_cache(maxsize=256)
def _mesh(stage: int, world: int, gpus_per_node: int, p, quantized_gradients: bool) -> Mesh:
    """Keyed on what the mesh reads alone (never the whole Scenario, which may hold a large
    calibration profile, or a list given through the Python API)."""
    tp, pp = p.tensor_parallel, p.pipeline_parallel
    data = world // (tp * pp)
    shard = 1 if stage == 0 else (p.shard_group or data)
    return Mesh(stage=stage, world=world, node=min(gpus_per_node, world),
                dp_shard=shard, dp_replicate=data // shard,
                hpz=hpz(p) if stage == 3 else 0, qgz=quantized_gradients and stage == 3, tp=tp,
                pp=pp)
