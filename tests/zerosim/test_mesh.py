"""The mesh (zerosim/parallel/mesh.py) and the [parallelism] table it is derived from: the axes
multiply to the world, each stage splits what the ZeRO paper's §5 says it splits, the groups a
step's collectives run on are the mesh's, and the old [training] spelling of the table's keys
gives the same scenario as the new one."""

from __future__ import annotations

import dataclasses

import pytest

from tests.conftest import SCENARIOS, ZERO_PAPER, run_zerosim
from zerosim.errors import InputError
from zerosim.parallel.mesh import Mesh, mesh_of
from zerosim.scenario.load import load_scenario
from zerosim.sim.groups import HPZ, INTER_NODE, NODE, REPLICA, SHARD, subgroups

LLAMA = SCENARIOS / "llama2_7b_64gpu.toml"  # 8 nodes x 8 GPUs


@pytest.mark.parametrize("stage, ways", [(0, (1, 1, 1)), (1, (1, 1, 64)), (2, (1, 64, 64)),
                                         (3, (64, 64, 64))])
def test_each_stage_splits_what_the_paper_says_over_the_world(stage, ways):
    """ZeRO §5: P_os splits the optimizer states, P_os+g the gradients too, P_os+g+p the
    parameters too; DDP (stage 0) splits nothing and keeps 64 replicas."""
    mesh = mesh_of(load_scenario(ZERO_PAPER), stage)
    assert (mesh.param_ways, mesh.grad_ways, mesh.optimizer_ways) == ways
    assert (mesh.dp_shard, mesh.dp_replicate) == ((1, 64) if stage == 0 else (64, 1))
    assert (mesh.tp, mesh.pp, mesh.world, mesh.node, mesh.nodes) == (1, 1, 64, 8, 8)
    assert not mesh.hybrid
    assert mesh_of(load_scenario(ZERO_PAPER), stage) is mesh  # derived once per (scenario, stage)


@pytest.mark.parametrize("g", [2, 8, 16, 32])
def test_a_shard_group_of_g_gives_64_over_g_replicas(g):
    scenario = load_scenario(LLAMA, [f"parallelism.shard_group={g}"])
    for stage in (1, 2, 3):
        mesh = mesh_of(scenario, stage)
        assert (mesh.dp_shard, mesh.dp_replicate, mesh.hybrid) == (g, 64 // g, True)
        groups = subgroups(scenario, stage)
        # g consecutive ranks (min(g, 8) per node); 64 / g ranks g apart (max(1, 8 / g) per node)
        assert (groups[SHARD].size, groups[SHARD].gpus_per_node) == (g, min(g, 8))
        assert (groups[REPLICA].size, groups[REPLICA].gpus_per_node) == (64 // g, max(1, 8 // g))
    assert subgroups(scenario, 0) == {}  # stage 0 shards nothing: no group


def test_the_axes_multiply_to_the_world():
    with pytest.raises(AssertionError, match=r"dp_replicate\(2\) \* dp_shard\(8\) \* tp\(1\) \* "
                                             r"pp\(1\) != world\(64\)"):
        Mesh(stage=3, world=64, node=8, dp_shard=8, dp_replicate=2)


def test_zeropp_layouts_are_stage_3_only():
    scenario = load_scenario(LLAMA, ["training.framework=deepspeed", "parallelism.hpz_partition=4",
                                     "training.quantized_gradients=true"])
    assert (mesh_of(scenario, 3).hpz, mesh_of(scenario, 3).qgz) == (4, True)
    assert set(subgroups(scenario, 3)) == {HPZ, NODE, INTER_NODE}
    assert subgroups(scenario, 3)[HPZ].size == 4
    assert subgroups(scenario, 3)[INTER_NODE].size == 8  # one rank per node
    for stage in (0, 1, 2):
        assert (mesh_of(scenario, stage).hpz, mesh_of(scenario, stage).qgz) == (0, False)


OLD_AND_NEW = [("training.shard_group=8", "parallelism.shard_group=8"),
               ("training.replica_allreduce=once_per_step", "parallelism.replica_allreduce=once_per_step")]


@pytest.mark.parametrize("old, new", OLD_AND_NEW)
def test_the_old_spelling_is_the_same_scenario(old, new):
    extra = ["parallelism.shard_group=8"] if "replica" in old else []
    assert load_scenario(LLAMA, extra + [old]) == load_scenario(LLAMA, extra + [new])


def test_the_old_spelling_in_a_file_and_both_spellings_refused(tmp_path):
    base = LLAMA.read_text(encoding="utf-8")
    old = tmp_path / "old.toml"
    old.write_text(base.replace("[training]", "[training]\nshard_group = 8"), encoding="utf-8")
    new = tmp_path / "new.toml"
    new.write_text(base + "\n[parallelism]\nshard_group = 8\n", encoding="utf-8")
    assert load_scenario(old).parallelism.shard_group == 8
    assert dataclasses.replace(load_scenario(old), source="") == \
        dataclasses.replace(load_scenario(new), source="")
    both = tmp_path / "both.toml"
    both.write_text(base.replace("[training]", "[training]\nshard_group = 8") +
                    "\n[parallelism]\nshard_group = 8\n", encoding="utf-8")
    with pytest.raises(InputError, match="training.shard_group and parallelism.shard_group are "
                                         "both given"):
        load_scenario(both)


def test_set_overrides_the_files_parallelism_in_either_spelling(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(LLAMA.read_text(encoding="utf-8") + "\n[parallelism]\nshard_group = 16\n",
                    encoding="utf-8")
    assert load_scenario(path, ["training.shard_group=8"]).parallelism.shard_group == 8
    assert load_scenario(path, ["parallelism.shard_group=8"]).parallelism.shard_group == 8


def test_a_bad_parallelism_key_is_one_line_naming_it():
    out = run_zerosim("simulate", str(LLAMA), "--set", "parallelism.shard_group=3")
    assert out.code == 2 and "parallelism.shard_group = 3 must divide the world size 64" in out.stderr
    out = run_zerosim("simulate", str(LLAMA), "--set", "training.shard_grop=8")
    assert out.code == 2 and "did you mean 'parallelism.shard_group'?" in out.stderr


def test_build_scenario_takes_the_old_spelling_too():
    """The references' README promises every [scenario] loads with build_scenario, whichever
    spelling its tables use."""
    from zerosim.scenario.load import build_scenario, read_toml, split_tables
    raw = read_toml(LLAMA)  # a reference's [scenario]: no [variation], no [parallelism]
    tables = {name: dict(raw.get(name, {})) for name in ("model", "cluster", "training")}
    tables["training"]["shard_group"] = 8
    scenario = build_scenario(tables, base_dir=LLAMA.parent)
    assert scenario.parallelism.shard_group == 8 and "shard_group" in tables["training"]
    assert scenario == build_scenario(
        split_tables(raw, str(LLAMA)) | {"parallelism": {"shard_group": 8}}, base_dir=LLAMA.parent)


def test_the_mesh_does_not_hash_the_scenario():
    """A Scenario built through the Python API may hold a list (unhashable); the mesh reads only
    its layout."""
    from zerosim.analytic.memory import stage_memory
    from zerosim.scenario.variation import VariationConfig
    scenario = load_scenario(SCENARIOS / "tiny_gpt_4rank_cpu.toml")
    listed = dataclasses.replace(scenario, variation=VariationConfig(slow_ranks=[1]))
    assert stage_memory(listed, 1) == stage_memory(scenario, 1)


@pytest.mark.parametrize("first, second", [
    (["training.shard_group=2"], ["parallelism.shard_group=2"]),
    (["parallelism.shard_group = 2"], ["parallelism.shard_group=2"]),
    (["parallelism.replica_allreduce=once_per_step"], ['parallelism.replica_allreduce="once_per_step"']),
    (["training.shard_group=4", "parallelism.shard_group=2"], ["parallelism.shard_group=2"]),
    (["training.zero_stage=2", "parallelism.shard_group=2"],
     ["parallelism.shard_group=2", "training.zero_stage=2"])])
def test_validate_takes_runs_that_set_the_same_keys_as_one_configuration(first, second):
    """Overrides compare as the settings they make: the old spelling, spaces, quoting, order
    and a key set twice (the last wins) do not make two runs of one configuration differ."""
    from zerosim.calibration.validate import _same_configuration
    runs = [{"scenario": "s.toml", "overrides": o, "stage": 2} for o in (first, second)]
    _same_configuration(runs, ["first.json", "second.json"])  # no refusal
    other = {**runs[1], "overrides": [*second, "parallelism.shard_group=4"]}
    with pytest.raises(InputError, match="overrides .* differs from first.json's"):
        _same_configuration([runs[0], other], ["first.json", "other.json"])
