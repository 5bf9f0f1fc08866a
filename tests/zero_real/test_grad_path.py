"""`zero-real calibrate`'s gradient-path microbenchmark (zero_real/calibration/grad_path.py) on
one process: the hooks and buckets it counts are the stage's own (zerosim's framework count of
zero_real's parameter tensors, checked here against the modules themselves; the buckets of the
flat layout). Times are only checked for sign and order (a loaded box may do anything else)."""

import math

import pytest

torch = pytest.importorskip("torch")

from tests.conftest import SCENARIOS  # noqa: E402
from zerosim.analytic.model import total_params  # noqa: E402
from zerosim.contract import PASSES  # noqa: E402
from zerosim.frameworks import REGISTRY  # noqa: E402
from zerosim.scenario.load import load_scenario  # noqa: E402

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
LLAMA = ("model.norm='rmsnorm'", "model.bias=false", "model.mlp='swiglu'",
         "model.position='rope'", "model.tied_embeddings=false", "model.layers=3")
CONFIGS = [(), LLAMA, ("model.tied_embeddings=false",)]


@pytest.mark.parametrize("overrides", CONFIGS)
def test_zeros_count_is_zero_reals_parameter_tensors(overrides):
    """Per unit, the parameters of zero_real's own modules (a tied matrix counted again in the
    head, where its first use fires a hook) equal Zero.gradient_hooks."""
    from zero_real.parts.model import build_model

    s = load_scenario(TINY, list(overrides))
    model = build_model(s.model, flash=s.training.flash_attention)
    tied = model.head.lm_head is None
    counted = ([len(list(model.embedding.parameters()))]
               + [len(list(b.parameters())) for b in model.blocks]
               + [len(list(model.head.parameters())) + (1 if tied else 0)])
    assert REGISTRY["zero"].gradient_hooks(s.model, s.training, 0) == counted


@pytest.mark.parametrize("overrides", [(), LLAMA])
@pytest.mark.parametrize("stage", [0, 2])
def test_one_backward_fires_every_hook_and_reduces_every_bucket(world_of_one, overrides, stage):
    from zero_real.calibration.grad_path import stage_row
    from zero_real.run.runconfig import CalibrationWorld

    def load(*extra):
        return load_scenario(TINY, ["cluster.nodes=1", "cluster.gpus_per_node=1",
                                    *overrides, *extra])

    s = load(f"training.zero_stage={stage}")
    cfg = CalibrationWorld(scenario=load(), backend="gloo", nproc=1, timeout_s=30,
                           collective_modes=("native",), micro_batches=(2,),
                           memory_scenarios={(stage, 2): s})
    row = stage_row(stage, 0, 1, cfg, torch.device("cpu"))
    hooks = REGISTRY["zero"].gradient_hooks(s.model, s.training, stage)
    buckets = math.ceil(total_params(s.model) * 4 / (s.training.reduce_bucket_MiB * 2**20))
    assert (row["processes"], row["stage"]) == (1, stage)
    assert (row["hooks"], row["buckets"]) == (sum(hooks), buckets)
    assert row["with_s"] > 0 and row["without_s"] > 0 and row["iterations"] >= 5
    assert row["reduce_s"] >= row["buckets_s"]
    # a micro-step that does not reduce: stage 0 reduces only on the last, ZeRO-2 on every one
    if stage == 2:
        assert row["idle_s"] is None and row["idle_hooks_s"] is None
    else:
        assert row["idle_s"] > 0 and isinstance(row["idle_hooks_s"], float)


def _visit_plan(path, overrides=(), mb_max=4):
    from zerosim.analytic.memory import stage_memory

    from zero_real.calibration.grad_path import visit_scenarios

    def load(*extra):
        return load_scenario(path, [*overrides, 'cluster.profile=""', "cluster.nodes=1",
                                    "cluster.gpus_per_node=1", *extra])

    bound = stage_memory(load("training.zero_stage=0", f"training.micro_batch={mb_max}"),
                         0).peak_bytes
    return load("training.zero_stage=3"), bound, visit_scenarios(load("training.zero_stage=3"),
                                                                 bound)


def test_the_tiny_models_visits_replay_at_x1_x2_x4():
    from zero_real.calibration.grad_path import VISIT_LAYERS

    base, _, plan = _visit_plan(TINY)
    assert list(plan) == [1, 2, 4]
    assert [s.model.hidden for s in plan.values()] == [64, 128, 256]
    assert {s.model.layers for s in plan.values()} == {min(VISIT_LAYERS, base.model.layers)}


def test_a_large_models_replay_stays_within_the_calibrations_largest_run():
    """The committed H100 calibration's 1.3B GPT (its provenance: 24 layers, hidden 2048, bf16,
    flash attention): replayed whole at x4 width it would need several times the largest run
    the calibration trains; the plan cuts it to VISIT_LAYERS blocks and keeps the widest
    VISIT_WIDTHS widths, one after the other in VISIT_SCALES, that fit that run."""
    import dataclasses

    from zerosim.analytic.memory import stage_memory

    from zero_real.calibration.grad_path import VISIT_LAYERS, VISIT_SCALES, VISIT_WIDTHS
    from zero_real.calibration.ops import _scaled

    shape = ("training.precision=bf16", "training.activation_checkpointing=none",
             "training.flash_attention=true", "model.layers=24", "model.hidden=2048",
             "model.heads=16")
    base, bound, plan = _visit_plan(SCENARIOS / "megatron_7b5_64gpu.toml", shape)
    whole = dataclasses.replace(base, model=_scaled(base.model, 4, base.training.seq_len))
    assert stage_memory(whole, 3).peak_bytes > 5 * bound  # what the uncapped replay built
    kept = sorted(plan, reverse=True)
    first = VISIT_SCALES.index(kept[0])
    assert len(kept) == VISIT_WIDTHS and kept == list(VISIT_SCALES[first:first + len(kept)])
    assert list(plan) == [0.5, 1, 2]  # as docs/calibration.md cites it
    assert 4 not in plan  # this shape's x4 does not fit: the cap is what chose
    for scenario in plan.values():
        assert scenario.model.layers == VISIT_LAYERS
        assert stage_memory(scenario, 3).peak_bytes <= bound


def test_scales_that_make_one_model_count_once(monkeypatch):
    """A head size of 2 under rope cannot shrink (rope rotates pairs): with the MLP's width
    derived from hidden (ffn unset), x1, x1/2 and x1/4 are one model. Bounded at x1's own peak
    the plan has it once, not three rows of it, and a line needs two sizes: refused. With an
    explicit ffn the MLP still shrinks: three sizes, accepted."""
    import dataclasses

    from zerosim.analytic.memory import stage_memory
    from zerosim.analytic.model import gathered_elements
    from zerosim.errors import InputError

    from zero_real.calibration import grad_path

    rope = ("model.position='rope'", "model.hidden=8", "model.ffn=32", "model.layers=2")
    explicit = load_scenario(TINY, [*rope, 'cluster.profile=""', "training.zero_stage=3"])
    derived = dataclasses.replace(explicit, model=dataclasses.replace(explicit.model, ffn=None))
    monkeypatch.setattr(grad_path, "VISIT_FLOOR_BYTES", 0)
    with pytest.raises(InputError, match="at 1 width"):
        grad_path.visit_scenarios(derived, stage_memory(derived, 3).peak_bytes)
    plan = grad_path.visit_scenarios(explicit, stage_memory(explicit, 3).peak_bytes)
    assert list(plan) == [0.25, 0.5, 1] and {p.model.hidden for p in plan.values()} == {8}
    assert len({gathered_elements(p.model) for p in plan.values()}) == 3
    assert [p.model.hidden for p in grad_path.visit_scenarios(derived, 1e12).values()] == [
        8, 16, 32]


def test_a_world_without_a_replay_plan_is_refused():
    from zero_real.calibration.grad_path import measure_grad_path
    from zero_real.run.runconfig import CalibrationWorld

    cfg = CalibrationWorld(scenario=None, backend="gloo", nproc=1, timeout_s=30)
    with pytest.raises(ValueError, match="visit_scenarios is empty"):
        measure_grad_path(0, 1, cfg, torch.device("cpu"), None)


def test_calibrate_plans_each_worlds_replay_from_its_own_runs(dry_run, tmp_path):
    """prepare: the replay starts from the first micro-batch's ZeRO-3 run of the world, capped
    by its largest stage-0 run."""
    from zero_real.calibration.grad_path import VISIT_LAYERS

    cfg = dry_run("calibrate", TINY, "--nproc", "2", "--micro-batches", "1,3",
                  "--out", tmp_path / "p.json").launched
    assert cfg.nproc == 1 and list(cfg.visit_scenarios) == [1, 2, 4]
    for scale, s in cfg.visit_scenarios.items():
        assert (s.training.zero_stage, s.training.micro_batch) == (3, 1)
        assert s.cluster.gpus_per_node == 1 and s.model.layers == VISIT_LAYERS
        assert s.model.hidden == 64 * scale


def test_a_replay_that_fits_nowhere_is_refused_in_one_line():
    from zero_real.calibration.grad_path import visit_scenarios
    from zerosim.errors import InputError

    s = load_scenario(SCENARIOS / "llama2_7b_64gpu.toml", ['cluster.profile=""',
                                                            "training.zero_stage=3"])
    with pytest.raises(InputError, match="visit replay .* fits in 256 MiB per rank at 0 width"):
        visit_scenarios(s, 0)


def test_a_visit_row_counts_zerosims_flat_buffers(world_of_one):
    """One process replays the tiny GPT's visits: each pass gathers the flat buffers zerosim
    prices a collective for (costs.gather_buffers), with their bytes."""
    from zero_real.calibration.grad_path import visit_rows
    from zero_real.run.runconfig import CalibrationWorld
    from zerosim.sim.costs import gather_buffers

    base, _, plan = _visit_plan(TINY)
    cfg = CalibrationWorld(scenario=base, backend="gloo", nproc=1, timeout_s=30,
                           collective_modes=("native",), micro_batches=(2,),
                           visit_scenarios=plan)
    rows = visit_rows(2, 0, 1, cfg, torch.device("cpu"))
    buffers = gather_buffers(plan[2], 3)
    assert tuple(r["pass"] for r in rows) == PASSES
    for row in rows:
        assert row["scale"] == 2 and row["time_s"] > 0
        assert row["counts"] == {"groups": sum(map(len, buffers)),
                                 "bytes": 4 * sum(map(sum, buffers))}
