"""Pipeline parallelism's inputs and layout (issue 30): every refusal of scenario/axes.py
(_check_pipeline) and of the pipelined step (sim/pipeline/step.py) through the command line (one
line on stderr, exit 2, naming the key and the arithmetic), what is taken, and the layer split
and the links of parallel/pipeline.py counted by hand from Megatron-LM's layout
(megatron/core/transformer/transformer_block.py, get_num_layers_to_build and the layer offset;
parallel_state.py, initialize_model_parallel's rank order tp-dp-pp: a stage's N / p ranks are
consecutive) and Narayanan et al. 2021, §2.2.2 (chunk c of stage i is virtual stage c p + i)."""

import pytest

from tests.conftest import ZERO_PAPER, assert_one_line_error, run_zerosim
from zerosim.parallel.mesh import mesh_of
from zerosim.parallel.pipeline import layout_of
from zerosim.scenario.load import load_scenario
from tests.zerosim.pipeline_scenarios import GPT_8L

# 2 nodes x 8 GPUs; a GPT of 8 layers (h 1024, 16 heads, tied head); 8 micro-batches, p = 4.
BASE = GPT_8L


def command(write, name: str, *sets: str, extra: tuple[str, ...] = ()):
    argv = [name, str(write("pp.toml", BASE)), "--json", *extra]
    for assignment in sets:
        argv += ["--set", assignment]
    return run_zerosim(*argv)


def scenario(write, *sets: str):
    return load_scenario(write("pp.toml", BASE), list(sets))


INTERLEAVED = ("parallelism.pipeline_schedule=interleaved_1f1b",)


@pytest.mark.parametrize("sets, fragments", [
    # t x p must divide the world: 16 ranks over p = 3; over t x p = 8 x 4 = 32.
    (["parallelism.pipeline_parallel=3"],
     ["parallelism.pipeline_parallel = 3", "world size 16", "16 / 3 = 5.333"]),
    (["parallelism.tensor_parallel=8"],
     ["parallelism.pipeline_parallel = 4", "tensor_parallel = 8", "16 / 32 = 0.5"]),
    # 6 layers do not split over 4 stages without a list; 8 layers not over 4 x 3 chunks.
    (["model.layers=6"], ["model.layers = 6", "4 stages", "parallelism.pipeline_layers"]),
    ([*INTERLEAVED, "parallelism.virtual_stages=3"],
     ["model.layers = 8", "4 stages x 3 chunks", "12 numbers"]),
    # A list of the wrong length, of the wrong sum, with an empty middle virtual stage.
    (["parallelism.pipeline_layers=[2, 2, 4]"],
     ["parallelism.pipeline_layers has 3 entries", "4 stages = 4"]),
    ([*INTERLEAVED, "parallelism.virtual_stages=2", "parallelism.pipeline_layers=[4, 4, 0, 0]"],
     ["parallelism.pipeline_layers has 4 entries", "4 stages x 2 chunks = 8"]),
    (["parallelism.pipeline_layers=[2, 2, 2, 3]"],
     ["parallelism.pipeline_layers adds up to 9", "model.layers = 8"]),
    (["parallelism.pipeline_layers=[4, 0, 2, 2]"], ["parallelism.pipeline_layers[1] = 0"]),
    (["parallelism.pipeline_layers=[4, 2, 0, 2]"], ["parallelism.pipeline_layers[2] = 0"]),
    # The interleaved schedule needs v >= 2, v > 1 needs it, and m a multiple of p
    # (Megatron-LM's schedules.py, forward_backward_pipelining_with_interleaving, asserts it).
    ([*INTERLEAVED], ["interleaved_1f1b", "virtual_stages >= 2", "not 1"]),
    (["parallelism.virtual_stages=2"], ["parallelism.virtual_stages = 2", "interleaved_1f1b",
                                        "'1f1b'"]),
    (["parallelism.pipeline_schedule=gpipe", "parallelism.virtual_stages=2"],
     ["parallelism.virtual_stages = 2", "'gpipe'"]),
    ([*INTERLEAVED, "parallelism.virtual_stages=2", "training.gradient_accumulation=6"],
     ["groups of p = 4", "training.gradient_accumulation = 6", "multiple of 4"]),
    # The ZeRO stages each framework runs beside a pipeline.
    (["training.framework=deepspeed", "training.zero_stage=2"],
     ["parallelism.pipeline_parallel = 4", "'deepspeed'", "not 2",
      "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"]),
    (["training.framework=fsdp2", "training.zero_stage=3"],
     ["parallelism.pipeline_parallel = 4", "'fsdp2'", "zero_stage 2, not 3",
      "reshard_after_forward"]),
    (["training.zero_stage=2"], ["'zero'", "zero_stage 0 or 1, not 2", "distributed optimizer"]),
    (["training.zero_stage=3"], ["'zero'", "not 3"]),
    # Hybrid sharding and offload are not modelled beside a pipeline.
    (["parallelism.shard_group=2"], ["parallelism.pipeline_parallel = 4",
                                     "parallelism.shard_group = 2", "not modelled"]),
    (["training.framework=deepspeed", "training.optimizer_offload=cpu"],
     ["parallelism.pipeline_parallel = 4", "offload", "not modelled"]),
    # ZeRO++ works on ZeRO-3 alone, which no framework runs beside a pipeline: refused there.
    (["training.zero_stage=3", "parallelism.hpz_partition=8"],
     ["parallelism.pipeline_parallel = 4", "not 3"]),
    (["training.zero_stage=3", "training.quantized_weights=true"],
     ["parallelism.pipeline_parallel = 4", "not 3"]),
    # A layer split without a pipeline.
    (["parallelism.pipeline_parallel=1", "parallelism.pipeline_layers=[4, 4]"],
     ["pipeline_layers", "pipeline_parallel > 1"]),
    (["parallelism.pipeline_parallel=1", "parallelism.virtual_stages=2"],
     ["virtual_stages", "pipeline_parallel > 1"]),
    # p >= 1, a schedule of the contract's.
    (["parallelism.pipeline_parallel=0"], ["parallelism.pipeline_parallel"]),
    (["parallelism.pipeline_schedule=zb_v"], ["parallelism.pipeline_schedule", "zb_v"]),
])
@pytest.mark.parametrize("name", ["memory", "simulate"])
def test_each_refusal_is_one_line_naming_the_key_and_the_arithmetic(write, name, sets,
                                                                      fragments):
    assert_one_line_error(command(write, name, *sets), *fragments)


def test_a_bare_parameter_count_has_no_layers_to_split():
    assert_one_line_error(run_zerosim("memory", str(ZERO_PAPER), "--set",
                                      "parallelism.pipeline_parallel=4"),
                          "parallelism.pipeline_parallel = 4", "bare parameter count")


@pytest.mark.parametrize("framework, stage, runs", [
    ("deepspeed", 2, "runs stage 0 or 1 there"), ("zero", 3, "runs stage 0 or 1 there"),
    ("ddp", 1, "runs stage 0 there"),  # torch's DDP replicates every state
])
def test_simulating_a_stage_the_framework_does_not_run_beside_a_pipeline_is_refused(
        write, framework, stage, runs):
    """The scenario's own zero_stage (0) is allowed; --stage asks for another."""
    result = command(write, "simulate", f"training.framework={framework}",
                     "training.zero_stage=0", extra=("--stage", str(stage)))
    assert_one_line_error(result, f"stage {stage} beside a pipeline",
                          "parallelism.pipeline_parallel = 4", f"'{framework}'", runs)


def test_deepspeeds_refusal_quotes_its_pipeline_engines_assertion(write):
    """deepspeed/runtime/pipe/engine.py (PipelineEngine.__init__): assert
    self.zero_optimization_stage() < ZeroStageEnum.gradients, "ZeRO-2 and ZeRO-3 are
    incompatible with pipeline parallelism"."""
    result = command(write, "simulate", "training.framework=deepspeed", extra=("--stage", "2"))
    assert_one_line_error(result, "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism",
                          "deepspeed/runtime/pipe/engine.py")


@pytest.mark.parametrize("sets, extra", [
    (["variation.slow_ranks=[3]"], ()),
    (["variation.degraded_links=[5]"], ()),
    (["variation.jitter_pct=5"], ()),
    ([], ("--mode", "per_rank")),
])
def test_variation_and_every_rank_are_refused_beside_a_pipeline(write, sets, extra):
    result = command(write, "simulate", *sets, extra=("--stage", "1", *extra))
    assert_one_line_error(result, "[variation]", "--mode per_rank", "pipeline")


@pytest.mark.parametrize("sets", [
    [],
    ["parallelism.pipeline_layers=[0, 4, 4, 0]"],  # first and last: the embedding, the head
    ["parallelism.pipeline_layers=[3, 2, 2, 1]"],
    ["parallelism.pipeline_schedule=gpipe", "training.zero_stage=0"],
    [*INTERLEAVED, "parallelism.virtual_stages=2"],
    ["parallelism.tensor_parallel=2", "parallelism.pipeline_parallel=8",
     "training.gradient_accumulation=1"],  # 2 x 8 = 16 ranks; fewer micro-batches than stages
    ["training.framework=fsdp2", "training.zero_stage=2"],
    ["training.framework=ddp", "training.zero_stage=0"],
])
def test_what_megatron_accepts_is_taken(write, sets):
    result = command(write, "memory", *sets)
    assert result.code == 0, result.stderr
    assert result.json["world_size"] == 16


# parallel/pipeline.py's units: [embedding, layer 1..L, head]: 0, 1..8, 9 for 8 layers.
def test_four_stages_of_two_layers_by_hand(write):
    layout = layout_of(scenario(write))
    assert [layout.chunk_units(i, 0) for i in range(4)] == [[0, 1, 2], [3, 4], [5, 6],
                                                            [7, 8, 9]]
    assert [layout.stage_units(i) for i in range(4)] == [[0, 1, 2], [3, 4], [5, 6], [7, 8, 9]]


def test_an_explicit_list_over_two_stages_of_two_chunks_by_hand(write):
    """Virtual stages 0..3 hold [1, 3, 2, 2] layers; stage i's chunk c is virtual stage 2c + i:
    stage 0 holds virtual stages 0 and 2, stage 1 holds 1 and 3."""
    s = scenario(write, *INTERLEAVED, "parallelism.pipeline_parallel=2",
                 "parallelism.virtual_stages=2", "parallelism.pipeline_layers=[1, 3, 2, 2]")
    layout = layout_of(s)
    # virtual stage 0: embedding + layer 1; 1: layers 2-4; 2: layers 5-6; 3: layers 7-8 + head
    assert [layout.chunk_units(0, c) for c in range(2)] == [[0, 1], [5, 6]]
    assert [layout.chunk_units(1, c) for c in range(2)] == [[2, 3, 4], [7, 8, 9]]
    assert layout.stage_units(0) == [0, 1, 5, 6]
    assert layout.stage_units(1) == [2, 3, 4, 7, 8, 9]


def test_an_empty_first_stage_holds_the_embedding_alone(write):
    layout = layout_of(scenario(write, "parallelism.pipeline_layers=[0, 4, 4, 0]"))
    assert [layout.chunk_units(i, 0) for i in range(4)] == [[0], [1, 2, 3, 4], [5, 6, 7, 8],
                                                            [9]]


def test_four_ranks_a_stage_share_a_node_two_by_two(write):
    """16 ranks, 8 a node, p = 4: stages 0, 1 on node 0 (ranks 0-3, 4-7), 2, 3 on node 1; link
    i goes from stage i to i + 1, link 3 wraps to stage 0 (only interleaving uses it)."""
    layout = layout_of(scenario(write))
    assert [layout.crosses_nodes(i) for i in range(4)] == [False, True, False, True]


def test_sixteen_ranks_a_stage_cross_nodes_on_every_link(write):
    """64 ranks, p = 4: each stage is 16 ranks, two whole nodes; every neighbour is another
    node."""
    layout = layout_of(scenario(write, "cluster.nodes=8"))
    assert [layout.crosses_nodes(i) for i in range(4)] == [True] * 4


def test_two_stages_of_a_node_each_cross_on_their_one_link(write):
    """Two stages of 8 ranks each fill one node each: the one link crosses, both ways."""
    layout = layout_of(scenario(write, "parallelism.pipeline_parallel=2"))
    assert [layout.crosses_nodes(i) for i in range(2)] == [True, True]


def test_stages_within_one_node_never_cross(write):
    layout = layout_of(scenario(write, "cluster.nodes=1"))  # 8 ranks: 2 a stage
    assert [layout.crosses_nodes(i) for i in range(4)] == [False] * 4


@pytest.mark.parametrize("tp, pp, d", [(1, 4, 4), (2, 4, 2), (2, 2, 4), (4, 4, 1), (1, 16, 1)])
def test_a_stage_shards_over_n_over_t_p_ranks(write, tp, pp, d):
    """Megatron's data-parallel size: world / (t x p) (parallel_state.py,
    initialize_model_parallel: data_parallel_size = world_size // (tp * pp * cp))."""
    s = scenario(write, f"parallelism.tensor_parallel={tp}", f"parallelism.pipeline_parallel={pp}",
                 "model.layers=16")
    mesh = mesh_of(s, 1)
    assert (mesh.tp, mesh.pp, mesh.data_parallel, mesh.optimizer_ways) == (tp, pp, d, d)
    assert layout_of(s).ranks_per_stage == 16 // pp
