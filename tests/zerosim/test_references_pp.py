"""The published pipeline-parallel runs of references/ (issue 30's test set): each reads with
pipeline_parallel > 1, its model has the parameters its header comment states, counted here by
hand from the shape (never by zerosim's own counter), and its batch arithmetic is the source's:
micro_batch x gradient_accumulation x d = the global batch in sequences, d = N / (t p)."""

import math

import pytest

from zerosim.analytic.model import total_params
from zerosim.calibration.references import read_reference
from zerosim.scenario.load import build_scenario

from tests.conftest import ROOT
from tests.zerosim.test_references_tp import _stated_count, gpt, llama


def bloom(layers: int, h: int, vocab: int) -> int:
    """BLOOM as zerosim counts it: GPT's layer 12 h^2 + 13 h (ffn = 4h), tied embedding, a final
    LayerNorm 2h, ALiBi (no position rows); the embedding LayerNorm (2h) left out."""
    return gpt(layers, h, 4 * h, vocab, positions=0)


BLOOM_176B = 176_247_242_752    # + 2 h of --embed-layernorm: 176,247,271,424 (the released model)
MT_NLG_530B = 529_600_819_200
LLAMA_405B = 405_853_388_800

# name: (hand count, [t, p, schedule, v], global batch in sequences as the source states it)
RUNS = {
    "bigscience_bloom_176b_384xa100_tp4_pp12": (BLOOM_176B, (4, 12, "1f1b", 1), 2048),
    "megatron_turing_nlg_530b_2240xa100_tp8_pp35": (MT_NLG_530B, (8, 35, "1f1b", 1), 1920),
    "megatron_turing_nlg_530b_2800xa100_tp8_pp35": (MT_NLG_530B, (8, 35, "1f1b", 1), 1920),
    "megatron_turing_nlg_530b_3360xa100_tp8_pp35": (MT_NLG_530B, (8, 35, "1f1b", 1), 1920),
    # Table 4: 16M tokens = DP x Batch size/DP x 8192
    "meta_llama3_405b_8192xh100_tp8_pp16_dp64":
        (LLAMA_405B, (8, 16, "interleaved_1f1b", 8), 64 * 32),
    "meta_llama3_405b_16384xh100_tp8_pp16_dp128":
        (LLAMA_405B, (8, 16, "interleaved_1f1b", 8), 128 * 16),
    # Table 5: "Local batch size 32, global batch size 256" (Float8: scenario in bf16)
    "torchtitan_llama3_405b_512xh100_3d": (LLAMA_405B, (8, 8, "interleaved_1f1b", 2), 256),
    "torchtitan_llama3_405b_512xh100_3d_1f1b": (LLAMA_405B, (8, 8, "1f1b", 1), 256),
}
# The layers per virtual stage each source states or its code derives (hand-written here).
LAYERS = {
    "bigscience_bloom_176b_384xa100_tp4_pp12": [5] + [6] * 10 + [5],  # README's partition
    "meta_llama3_405b_8192xh100_tp8_pp16_dp64": [0] + [1] * 126 + [0],  # §3.3.2
    "meta_llama3_405b_16384xh100_tp8_pp16_dp128": [0] + [1] * 126 + [0],
    "torchtitan_llama3_405b_512xh100_3d": [7] + [8] * 14 + [7],  # generate_split_points, 16
    "torchtitan_llama3_405b_512xh100_3d_1f1b": [15] + [16] * 6 + [15],  # generate_split_points, 8
}


def test_the_hand_counts_are_the_published_sizes():
    """BLOOM's README: a layer is 2,466,437,120 parameters and the embedding 3,596,615,680; with
    the embedding LayerNorm the count is the released 176,247,271,424. MT-NLG: 105 layers of
    12 h^2 + 13 h, h = 20480, and Megatron's vocabulary 50257 padded to 51200."""
    h = 14336
    assert 12 * h * h + 13 * h == 2_466_437_120 and 250880 * h == 3_596_615_680
    assert bloom(70, h, 250880) == BLOOM_176B
    assert BLOOM_176B + 2 * h == 176_247_271_424
    assert math.ceil(50257 / (128 * 8)) * 128 * 8 == 51200
    assert gpt(105, 20480, 4 * 20480, 51200, 2048) == MT_NLG_530B
    assert llama(126, 16384, 128, 8, 53248, 128256) == LLAMA_405B


def _scenario(ref):
    tables = {"variation": {}, **{name: dict(ref.scenario.get(name, {}))
                                  for name in ("model", "cluster", "training", "parallelism")}}
    return build_scenario(tables, base_dir=ref.path.parent, source=str(ref.path))


def _path(name):
    return ROOT / "references" / f"{name}.toml"


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_pipeline_reference_states_its_run(name):
    count, (t, p, schedule, v), global_batch = RUNS[name]
    ref = read_reference(_path(name))
    scenario = _scenario(ref)
    par, training, cluster = scenario.parallelism, scenario.training, scenario.cluster
    assert (par.tensor_parallel, par.pipeline_parallel) == (t, p) and p > 1
    assert (par.pipeline_schedule, par.virtual_stages) == (schedule, v)
    world = cluster.nodes * cluster.gpus_per_node
    assert world % (t * p) == 0
    d = world // (t * p)
    assert training.micro_batch * training.gradient_accumulation * d == global_batch
    assert _stated_count(_path(name)) == count
    assert total_params(scenario.model) == count
    if name in LAYERS:
        assert list(ref.scenario["parallelism"]["pipeline_layers"]) == LAYERS[name]
        assert sum(LAYERS[name]) == scenario.model.layers and len(LAYERS[name]) == p * v


def test_every_pipeline_reference_is_here():
    """A reference added with pipeline_parallel > 1 is added to RUNS too, and each named here
    exists (six or more runs, issue 30)."""
    found = {path.stem for path in (ROOT / "references").glob("*.toml")
             if read_reference(path).scenario.get("parallelism", {})
             .get("pipeline_parallel", 1) > 1}
    assert found == set(RUNS) and len(found) >= 6


def test_the_derived_tokens_per_second_are_the_sources_arithmetic():
    """tokens/s/GPU written in the files from the sources' own figures: BLOOM's 19.561 samples/s
    of 2048 tokens over 384 GPUs; MT-NLG's 1920 x 2048 tokens per iteration of 60.1, 50.2, 44.4 s
    on 2240, 2800, 3360 GPUs."""
    expected = {"bigscience_bloom_176b_384xa100_tp4_pp12": 19.561 * 2048 / 384,
                "megatron_turing_nlg_530b_2240xa100_tp8_pp35": 1920 * 2048 / (60.1 * 2240),
                "megatron_turing_nlg_530b_2800xa100_tp8_pp35": 1920 * 2048 / (50.2 * 2800),
                "megatron_turing_nlg_530b_3360xa100_tp8_pp35": 1920 * 2048 / (44.4 * 3360)}
    for name, tokens in expected.items():
        measured = read_reference(_path(name)).measured["tokens_per_s_per_gpu"]
        assert measured == pytest.approx(tokens, abs=1e-4)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_pipeline_reference_simulates(name):
    """Each run simulates to a finite, positive throughput (the errors are the lead's record)."""
    pytest.importorskip("zerosim.sim.pipeline.plan")
    from zerosim.sim.engine import simulate

    scenario = _scenario(read_reference(_path(name)))
    result = simulate(scenario, scenario.training.zero_stage, keep_events=False)
    assert math.isfinite(result.tokens_per_s_per_gpu) and result.tokens_per_s_per_gpu > 0
