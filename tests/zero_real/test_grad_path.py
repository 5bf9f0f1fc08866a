"""`zero-real calibrate`'s gradient-path microbenchmark (zero_real/calibration/grad_path.py) on
one process: the hooks and buckets it counts are the stage's own (zerosim's framework count of
zero_real's parameter tensors, checked here against the modules themselves; the buckets of the
flat layout). Times are only checked for sign and order (a loaded box may do anything else)."""

import math

import pytest

torch = pytest.importorskip("torch")

from tests.conftest import SCENARIOS  # noqa: E402
from zerosim.analytic.model import total_params  # noqa: E402
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
