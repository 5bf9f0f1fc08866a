"""Pipeline parallelism's layout: which layers each pipeline stage holds, as Megatron-LM places
them (megatron/core/transformer/transformer_block.py, get_num_layers_to_build and the layer
offset; megatron/core/models/gpt/gpt_model.py: the embedding where pre_process, the final norm,
output layer and loss where post_process).

The model's gather units are [embedding, layer 1..L, final norm + head] (analytic/model.py). A
pipeline of p stages with v model chunks each has p x v virtual stages; chunk c of stage i is
virtual stage g = c x p + i (Megatron's interleaved layout, Narayanan et al. 2021 §2.2.2: stage i
holds layers of chunks i, p + i, 2p + i, ...). Virtual stage g holds its block of layers, the
embedding too when g = 0 and the head when g = p v - 1:

    layers per virtual stage   parallelism.pipeline_layers, or L / (p v) each

The stages' ranks: N / p consecutive ranks each (Megatron's order tp-dp-pp), so stage i's first
rank is i x N / p, and a transfer between neighbouring stages stays inside a node only when both
blocks lie in one node.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from zerosim.parallel.schedule import Op, orders


@dataclass(frozen=True)
class PipelineLayout:
    """The pipeline of a scenario: stages, chunks, micro-batches, schedule and the layer split."""

    stages: int
    virtual: int
    micro_batches: int
    schedule: str
    layers: tuple[int, ...]
    """Layers of each virtual stage, p x v of them in virtual-stage order."""
    ranks_per_stage: int
    """N / p: one stage's tensor- and data-parallel ranks."""
    gpus_per_node: int

    @property
    def virtual_stages(self) -> int:
        return self.stages * self.virtual

    def virtual_stage(self, stage: int, chunk: int) -> int:
        return chunk * self.stages + stage

    def chunk_units(self, stage: int, chunk: int) -> list[int]:
        """Indices into the gather units [embedding, layer 1..L, head] of one chunk of a stage."""
        g = self.virtual_stage(stage, chunk)
        first = 1 + sum(self.layers[:g])
        units = list(range(first, first + self.layers[g]))
        total = sum(self.layers)
        return ([0] if g == 0 else []) + units + ([total + 1] if g == self.virtual_stages - 1
                                                  else [])

    def stage_layers(self, stage: int) -> int:
        """Layers the stage holds, its chunks together (`layers` is per virtual stage)."""
        return sum(self.layers[self.virtual_stage(stage, c)] for c in range(self.virtual))

    def stage_units(self, stage: int) -> list[int]:
        """Every unit the stage holds, chunk by chunk."""
        return [u for c in range(self.virtual) for u in self.chunk_units(stage, c)]

    def crosses_nodes(self, stage: int) -> bool:
        """Whether a transfer from `stage` to the next stage ((stage + 1) mod p) leaves the node:
        the two ranks that exchange it (the same place in each block) lie on different nodes."""
        n, block = self.gpus_per_node, self.ranks_per_stage
        nxt = (stage + 1) % self.stages
        return (stage * block) // n != (nxt * block) // n


def split_layers(layers: int, stages: int, virtual: int, given: tuple[int, ...]) -> tuple[int, ...]:
    """The layers of each virtual stage: `given` when set, else `layers` evenly (the scenario
    layer has checked that it divides or that `given` adds up)."""
    if given:
        return tuple(given)
    return (layers // (stages * virtual),) * (stages * virtual)


def layout_of(scenario) -> PipelineLayout | None:
    """The scenario's pipeline, or None without one (pipeline_parallel = 1)."""
    p, c = scenario.parallelism, scenario.cluster
    if p.pipeline_parallel == 1:
        return None
    return _layout(p.pipeline_parallel, p.virtual_stages, scenario.training.gradient_accumulation,
                   p.pipeline_schedule, scenario.model.n_layers, p.pipeline_layers,
                   c.world_size, c.gpus_per_node)


@lru_cache(maxsize=64)
def _layout(stages: int, virtual: int, micro: int, schedule: str, layers: int,
            given: tuple[int, ...], world: int, gpus_per_node: int) -> PipelineLayout:
    return PipelineLayout(stages=stages, virtual=virtual, micro_batches=micro, schedule=schedule,
                          layers=split_layers(layers, stages, virtual, given),
                          ranks_per_stage=world // stages,
                          gpus_per_node=min(gpus_per_node, world))


@lru_cache(maxsize=8)
def stage_orders(layout: PipelineLayout) -> tuple[tuple[Op, ...], ...]:
    """Each stage's order of forwards and backwards under the layout's schedule (schedule.py),
    made once per layout: memory, the plan and the trace all walk it."""
    return tuple(tuple(order) for order in orders(layout.schedule, layout.stages,
                                                  layout.micro_batches, layout.virtual))
