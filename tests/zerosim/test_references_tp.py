"""The published tensor-parallel runs of references/ (issue 29's test set): each reads, its
tensor-parallel layout reaches the scenario and the mesh as its source states it (TP degree, the
number of data-parallel ranks, the global batch), and its model has the parameters its header
comment states, counted here by hand from the shape (never by zerosim's own counter)."""

import re

import pytest

from zerosim.analytic.model import total_params
from zerosim.calibration.references import compare, read_reference
from zerosim.parallel.mesh import mesh_of
from zerosim.scenario.load import build_scenario
from zerosim.sim.engine import simulate

from tests.conftest import ROOT


def llama(layers: int, h: int, heads: int, kv: int, ffn: int, vocab: int) -> int:
    """Llama (torchtitan's model.py): per layer wq and wo h x h, wk and wv h x kv*head_dim,
    SwiGLU w1, w2, w3 h x ffn, two RMSNorm weights h; a final norm h; token embedding and the
    untied output layer vocab x h each; no biases."""
    head_dim = h // heads
    layer = 2 * h * h + 2 * h * kv * head_dim + 3 * h * ffn + 2 * h
    return layers * layer + h + 2 * vocab * h


def gpt(layers: int, h: int, ffn: int, vocab: int, positions: int) -> int:
    """GPT/OPT with biases and LayerNorm, tied embedding: per layer QKV 3h^2 + 3h, the attention
    output h^2 + h, the MLP h*ffn + ffn and ffn*h + h, two LayerNorms 4h; a final LayerNorm 2h;
    token and learned position embeddings. With ffn = 4h a layer is 12h^2 + 13h."""
    layer = 4 * h * h + 4 * h + 2 * h * ffn + ffn + h + 4 * h
    return layers * layer + 2 * h + vocab * h + positions * h


LLAMA_8B, LLAMA_70B, LLAMA_405B = 8_030_261_248, 70_553_706_496, 405_853_388_800
OPT_175B = 174_604_443_648  # 2048 positions (the released model's 2050 add 2 x 12288)

# name: (hand count, [parallelism] as the source states it, data-parallel ranks, global batch in
# sequences as the source states it or as its launcher derives it)
RUNS = {
    "torchtitan_asynctp_llama3_70b_256xh100_fsdp32_tp8":
        (LLAMA_70B, {"tensor_parallel": 8, "sequence_parallel": True, "tp_comm_overlap": False},
         32, 16 * 32),  # "FSDP=32, TP=8 ... local batch size 16"
    "torchtitan_asynctp_llama3_70b_256xh100_fsdp32_tp8_async":
        (LLAMA_70B, {"tensor_parallel": 8, "sequence_parallel": True, "tp_comm_overlap": True},
         32, 16 * 32),
    "torchtitan_asynctp_llama3_8b_64xh100_fsdp8_tp8":
        (LLAMA_8B, {"tensor_parallel": 8, "sequence_parallel": True, "tp_comm_overlap": False},
         8, 12 * 8),  # "FSDP=8, TP=8 ... local batch size 12"
    "torchtitan_asynctp_llama3_8b_64xh100_fsdp8_tp8_async":
        (LLAMA_8B, {"tensor_parallel": 8, "sequence_parallel": True, "tp_comm_overlap": True},
         8, 12 * 8),
    "torchtitan_llama3_405b_128xh100_fsdp16_tp8":
        (LLAMA_405B, {"tensor_parallel": 8, "sequence_parallel": True, "tp_comm_overlap": False},
         16, 32),  # "global batch size = local batch size 2 * number of FSDP ranks 16 = 32"
    "torchtitan_llama3_70b_256xh100_fsdp_tp":  # Float8: not expressible, its scenario is bf16
        (LLAMA_70B, {"tensor_parallel": 8, "sequence_parallel": True, "tp_comm_overlap": False},
         32, 512),  # Table 4: "256 GPUs (FSDP 32, TP 8) ... global batch size 512"
    "opt_175b_992xa100_fsdp_tp8":
        (OPT_175B, {"tensor_parallel": 8, "sequence_parallel": False, "tp_comm_overlap": False},
         124, 992),  # 992 GPUs / TP 8; (2 M tokens // 124) // 2048 = 8 sequences per group
}


def test_the_hand_counts_are_the_published_shapes():
    """The formulas above give the counts written in the files' headers (and the published
    sizes: Llama 3.1 8B/70B/405B, OPT-175B)."""
    assert llama(32, 4096, 32, 8, 14336, 128256) == LLAMA_8B
    assert llama(80, 8192, 64, 8, 28672, 128256) == LLAMA_70B
    assert llama(126, 16384, 128, 8, 53248, 128256) == LLAMA_405B
    assert gpt(96, 12288, 4 * 12288, 50272, 2048) == OPT_175B
    assert gpt(96, 12288, 4 * 12288, 50272, 2050) == 174_604_468_224


def _scenario(ref):
    tables = {"variation": {}, **{name: dict(ref.scenario.get(name, {}))
                                  for name in ("model", "cluster", "training", "parallelism")}}
    return build_scenario(tables, base_dir=ref.path.parent, source=str(ref.path))


def _stated_count(path) -> int:
    """The first count of 10^9 or more written in the file's leading comment block."""
    header = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    counts = [int(n.replace(",", "")) for n in re.findall(r"\d{1,3}(?:,\d{3})+", " ".join(header))]
    return next(n for n in counts if n >= 10**9)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_tensor_parallel_reference_states_its_run(name):
    count, layout, data_parallel, global_batch = RUNS[name]
    path = ROOT / "references" / f"{name}.toml"
    ref = read_reference(path)
    assert ref.scenario["parallelism"] == layout  # every key written, none left to a default
    scenario = _scenario(ref)
    p = scenario.parallelism
    assert (p.tensor_parallel, p.sequence_parallel, p.tp_comm_overlap) == (
        layout["tensor_parallel"], layout["sequence_parallel"], layout["tp_comm_overlap"])
    mesh = mesh_of(scenario, scenario.training.zero_stage)
    assert (mesh.tp, mesh.data_parallel) == (layout["tensor_parallel"], data_parallel)
    # micro_batch is per data-parallel rank: the t ranks of a group share it
    assert scenario.training.micro_batch * mesh.data_parallel == global_batch
    assert _stated_count(path) == count
    assert total_params(scenario.model) == count


def test_every_tensor_parallel_reference_is_here():
    """A reference added with tensor_parallel > 1 and no pipeline is added to RUNS too (so its
    layout and count are checked), and each named here exists (test_references_pp.py checks
    the pipelined ones)."""
    found = set()
    for path in (ROOT / "references").glob("*.toml"):
        parallelism = read_reference(path).scenario.get("parallelism", {})
        if (parallelism.get("tensor_parallel", 1) > 1
                and parallelism.get("pipeline_parallel", 1) == 1):
            found.add(path.stem)
    assert found == set(RUNS)


def test_the_opt_global_batch_is_the_papers_2m_tokens():
    """Table 1 of the OPT paper: a batch of 2M tokens; the launcher's integer division gives 992
    sequences of 2048, 3.1% under 2**21."""
    _, _, data_parallel, sequences = RUNS["opt_175b_992xa100_fsdp_tp8"]
    tokens = sequences * 2048
    assert tokens == 2_031_616
    assert abs(tokens - 2**21) / 2**21 < 0.032


def test_hardware_tflops_per_gpu_share_the_group_s_flops():
    """A TP group's t GPUs share one micro-batch's FLOPs: per GPU, OPT's simulated hardware
    TFLOP/s is Megatron's count (Narayanan et al. 2021, eq. 3: 96 B s l h^2 (1 + s/6h + V/16lh),
    the recompute forward included) for B = micro-batch / t sequences over the step."""
    ref = read_reference(ROOT / "references" / "opt_175b_992xa100_fsdp_tp8.toml")
    scenario = _scenario(ref)
    step_s = simulate(scenario, scenario.training.zero_stage, keep_events=False).step_time_s
    b, s, l, h, v = 8 / 8, 2048, 96, 12288, 50272
    megatron = 96 * b * s * l * h**2 * (1 + s / (6 * h) + v / (16 * l * h)) / step_s / 1e12
    (row,) = compare(ref)
    assert row["metric"] == "TFLOP/s/GPU (hardware)"
    assert row["simulated"] == pytest.approx(megatron, rel=1e-9)
