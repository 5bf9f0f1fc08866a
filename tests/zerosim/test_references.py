"""`zerosim validate --references DIR`: published runs against the simulation. The harness is
checked on references written here (their "measured" figures set from a separate simulation so
the expected errors are known exactly); the repository's own references/ must all read and run."""

import json
from pathlib import Path

import pytest

from zerosim.calibration.references import read_reference
from zerosim.scenario.load import build_scenario
from zerosim.sim.engine import simulate

from tests.conftest import ROOT, assert_one_line_error, run_zerosim

SCENARIO = """
[scenario.model]
params = 1.5e9
layers = 24
[scenario.cluster]
gpu = "A100-80GB"
nodes = 2
gpus_per_node = 8
[scenario.training]
zero_stage = 2
seq_len = 2048
micro_batch = 4
"""
INFO = """
[reference]
title = "{title}"
source = "https://example.org/paper"
where = "Table 1"
published = "2024-01-01"
framework = "deepspeed"
hardware = "2 x 8 A100-80GB"
expressible = {expressible}
{why}
"""


def simulated():
    tables = {"model": {"params": 1.5e9, "layers": 24}, "variation": {},
              "cluster": {"gpu": "A100-80GB", "nodes": 2, "gpus_per_node": 8},
              "training": {"zero_stage": 2, "seq_len": 2048, "micro_batch": 4}}
    return simulate(build_scenario(tables, base_dir=Path(".")), 2, keep_events=False)


def write(folder: Path, name: str, measured: str, expressible: bool = True, why: str = "") -> None:
    info = INFO.format(title=name, expressible=str(expressible).lower(),
                       why=f'why = "{why}"' if why else "")
    (folder / f"{name}.toml").write_text(info + "\n[measured]\n" + measured + SCENARIO)


def test_errors_per_category_and_the_bar(tmp_path):
    r = simulated()
    # measured 25% above the simulation: error = (s - 1.25 s) / 1.25 s = -20%
    write(tmp_path, "a", f"tokens_per_s_per_gpu = {1.25 * r.tokens_per_s_per_gpu!r}\n"
                         f"memory_GiB = {r.peak_allocated_bytes / 2**30 / 0.95!r}\n"
                         f'memory_kind = "max_memory_allocated"\n')
    write(tmp_path, "b", f"mfu = {r.mfu!r}\n")  # exact
    write(tmp_path, "c", "", expressible=False, why="tensor parallel 8")
    shown = run_zerosim("validate", "--references", str(tmp_path), "--json")
    assert shown.code == 0  # throughput: mean |error| 10% and worst 20%, at the bar and within
    report = json.loads(shown.stdout)
    errors = {(row["reference"], row["category"]): row["error_pct"] for row in report["rows"]}
    assert errors[("a", "throughput")] == pytest.approx(-20.0, abs=1e-9)
    assert errors[("a", "memory")] == pytest.approx(-5.0, abs=1e-9)
    assert errors[("b", "throughput")] == pytest.approx(0.0, abs=1e-9)
    assert report["summary"]["throughput"]["mean_abs_error_pct"] == pytest.approx(10.0)
    assert report["not_expressible"] == [{"reference": "c", "title": "c",
                                          "why": "tensor parallel 8"}]
    text = run_zerosim("validate", "--references", str(tmp_path)).stdout
    assert "-20.0%" in text and "c: tensor parallel 8" in text
    write(tmp_path, "d", f"tokens_per_s_per_gpu = {2 * r.tokens_per_s_per_gpu!r}\n")  # -50%
    assert run_zerosim("validate", "--references", str(tmp_path)).code == 1


def test_an_offload_scenario_has_its_throughput_compared(tmp_path):
    """Optimizer offload is timed (sim/offload.py): its throughput is compared like any other,
    and its memory too; nothing of it is listed as not expressible."""
    r = simulated()
    write(tmp_path, "a", f"tokens_per_s_per_gpu = {r.tokens_per_s_per_gpu!r}\n")  # exact
    write(tmp_path, "offload", f"tokens_per_s_per_gpu = {2 * r.tokens_per_s_per_gpu!r}\n"
                               f"memory_GiB = 1.0\nmemory_kind = \"max_memory_allocated\"\n")
    offload = tmp_path / "offload.toml"
    offload.write_text(offload.read_text() + 'optimizer_offload = "cpu"\n')
    shown = run_zerosim("validate", "--references", str(tmp_path), "--json")
    assert shown.code == 1  # the memory row (1 GiB measured) is far off: judged as usual
    report = json.loads(shown.stdout)
    rows = {(row["reference"], row["category"]) for row in report["rows"]}
    assert rows == {("a", "throughput"), ("offload", "throughput"), ("offload", "memory")}
    assert report["not_expressible"] == []

def test_within_the_bar_exits_0(tmp_path):
    r = simulated()
    write(tmp_path, "a", f"tokens_per_s_per_gpu = {1.05 * r.tokens_per_s_per_gpu!r}\n")
    assert run_zerosim("validate", "--references", str(tmp_path)).code == 0


@pytest.mark.parametrize("measured, extra, fragment", [
    ("mfu = -1\n", "", "measured.mfu = -1 must be a positive number"),
    ("speed = 3\n", "", "unknown key measured.speed"),
    ("", "", None),  # written without expressible's why: below
])
def test_bad_references_are_one_line(tmp_path, measured, extra, fragment):
    if fragment is None:
        write(tmp_path, "x", "", expressible=False)
        fragment = "says why"
    else:
        write(tmp_path, "x", measured)
    assert_one_line_error(run_zerosim("validate", "--references", str(tmp_path)), fragment)


def test_references_and_measurements_exclude_each_other(tmp_path):
    assert_one_line_error(run_zerosim("validate", "m.json", "--references", str(tmp_path)),
                          "not both")
    assert_one_line_error(run_zerosim("validate", "--references", str(tmp_path)), "no *.toml")


KNOWN_MISSES = {  # (reference, category): its error today, % (README, published-runs.md)
    ("deepspeed_azure_gpt_1t_1024xa100", "throughput"): 39.12,  # compute (the CPU step is 1 s)
    ("llmfoundry_mpt_3b_128xh100_shard_grad_op", "throughput"): 29.15,
    ("llmfoundry_mpt_7b_128xh100", "throughput"): 25.96,
    # tensor parallel (issue 29): faster than measured, see references/README.md
    ("opt_175b_992xa100_fsdp_tp8", "throughput"): 28.19,
    ("torchtitan_asynctp_llama3_8b_64xh100_fsdp8_tp8_async", "throughput"): 30.51,
    # pipeline parallel (issue 30): faster than measured, see references/README.md
    ("megatron_turing_nlg_530b_2240xa100_tp8_pp35", "throughput"): 32.23,
    ("megatron_turing_nlg_530b_2800xa100_tp8_pp35", "throughput"): 33.73,
    ("megatron_turing_nlg_530b_3360xa100_tp8_pp35", "throughput"): 37.60,
    # frameworks as they really ran (issue 32): each miss's mechanism named in
    # references/README.md (per-module host work, the kernels of 2020-22, host checkpoints)
    ("deepcompile_llama3_70b_32xh100_fsdp1_seq1024", "throughput"): 101.49,
    ("deepcompile_llama3_70b_32xh100_zero3_seq1024", "throughput"): 86.1,
    ("deepcompile_llama3_70b_32xh100_zero3_seq1024_ga16", "throughput"): 76.02,
    ("deepcompile_llama3_70b_32xh100_zero3_seq2048", "throughput"): 59.65,
    ("deepspeed_azure_gpt_530b_1024xa100", "throughput"): 31.39,
    ("deepspeed_azure_gpt_530b_512xa100", "throughput"): 33.51,
    ("deepspeed_zero_offload_tutorial_gpt2_10b_1xv100_32gb", "throughput"): 80.50,
    ("deepspeed_zero_tutorial_gpt2_1.5b_8xv100_32gb_zero1", "throughput"): 192.39,
    ("deepspeed_zero_tutorial_gpt2_1.5b_8xv100_32gb_zero1", "memory"): -45.07,
    ("deepspeed_zero_tutorial_gpt2_10b_32xv100_32gb_zero2", "throughput"): 242.54,
}
ISSUE_32 = {name for name, _ in KNOWN_MISSES if name.startswith(("deepcompile", "deepspeed_zero"))
            } | {"deepspeed_azure_gpt_530b_1024xa100", "deepspeed_azure_gpt_530b_512xa100",
                 "deepspeed_azure_gpt_175b_1024xa100_seq1024",
                 "torchtitan_pr165_llama2_7b_8xh100_fsdp1_full_ac",
                 "torchtitan_pr165_llama2_7b_8xh100_fsdp1_selective_op_ac"}
"""The runs issue 32 added or made expressible: their own mean is pinned apart
(ISSUE_32_MEAN_PCT)."""
WITHIN_THE_BAR = {  # (reference, category) within 25% today
    *((name, "throughput") for name in (
        "deepspeed_azure_gpt_175b_256xa100", "llmfoundry_mpt_13b_512xh100",
        "llmfoundry_mpt_13b_8xa100_80gb", "llmfoundry_mpt_70b_64xa100_80gb",
        "llmfoundry_mpt_7b_128xa100_40gb", "llmfoundry_mpt_7b_8xa100_80gb",
        "pytorch_blog_fsdp_llama2_13b_128xa100", "pytorch_blog_fsdp_llama2_34b_96xh100",
        "pytorch_blog_fsdp_llama2_70b_128xa100", "pytorch_blog_fsdp_llama2_7b_128xa100_hsdp",
        "torchtitan_llama2_13b_64xa100", "torchtitan_llama3_70b_64xa100",
        "torchtitan_llama3_8b_128xh100", "torchtitan_llama3_8b_64xa100",
        "torchtitan_llama3_8b_8xh100", "torchtitan_pr165_llama2_7b_8xh100_fsdp2_full_ac",
        "torchtitan_pr165_llama2_7b_8xh100_fsdp2_selective_op_ac",
        "torchtitan_asynctp_llama3_70b_256xh100_fsdp32_tp8",
        "torchtitan_asynctp_llama3_70b_256xh100_fsdp32_tp8_async",
        "torchtitan_asynctp_llama3_8b_64xh100_fsdp8_tp8",
        "torchtitan_llama3_405b_128xh100_fsdp16_tp8",
        "bigscience_bloom_176b_384xa100_tp4_pp12", "meta_llama3_405b_16384xh100_tp8_pp16_dp128",
        "meta_llama3_405b_8192xh100_tp8_pp16_dp64",
        "torchtitan_pr165_llama2_7b_8xh100_fsdp1_full_ac",
        "torchtitan_pr165_llama2_7b_8xh100_fsdp1_selective_op_ac",
        "deepspeed_azure_gpt_175b_1024xa100_seq1024")),
    *((name, "memory") for name in (
        "torchtitan_llama3_8b_128xh100", "torchtitan_llama3_8b_8xh100",
        "torchtitan_pr165_llama2_7b_8xh100_fsdp2_full_ac",
        "torchtitan_pr165_llama2_7b_8xh100_fsdp2_selective_op_ac",
        "torchtitan_pr165_llama2_7b_8xh100_fsdp1_full_ac",
        "torchtitan_pr165_llama2_7b_8xh100_fsdp1_selective_op_ac",
        "deepspeed_zero_offload_tutorial_gpt2_10b_1xv100_32gb",
        "deepspeed_zero_tutorial_gpt2_10b_32xv100_32gb_zero2")),
}
TENSOR_PARALLEL_MEAN_PCT = 17.73  # mean |error| of the tensor-parallel runs today (README)
PIPELINE_MEAN_PCT = 21.56  # mean |error| of the pipeline-parallel runs today (README)
NOT_EXPRESSIBLE = {"deepspeed_azure_gpt_2t_1024xa100", "torchtitan_llama3_405b_512xh100_3d",
                   "torchtitan_llama3_405b_512xh100_3d_1f1b",
                   "torchtitan_llama3_70b_256xh100_fsdp_tp",
                   "pytorch_blog_fsdp_intro_gpt_175b_128xa100_40gb",
                   "pytorch_blog_fsdp_intro_gpt_1t_128xa100_40gb"}
ISSUE_32_MEAN_PCT = 60.31  # mean |error| of issue 32's runs today (references/README.md)


def test_the_repository_references_read_and_run():
    """Pinned: which runs are compared and within the bar, and each known miss at its error
    (to 0.01%). A new miss, a known one that moves, or a run that stops being compared
    fails here; so does the bar's exit code. Improving a run means moving it in these tables
    (no model constant is tuned to a reference: they are a test set)."""
    folder = ROOT / "references"
    shown = run_zerosim("validate", "--references", str(folder), "--json")
    assert shown.code == (1 if KNOWN_MISSES else 0), shown.stderr
    report = json.loads(shown.stdout)
    assert report["references"] == len({path.stem for path in folder.glob("*.toml")})
    errors = {(row["reference"], row["category"]): row["error_pct"] for row in report["rows"]}
    assert set(errors) == WITHIN_THE_BAR | set(KNOWN_MISSES)
    for key, error in errors.items():
        if key in KNOWN_MISSES:
            assert error == pytest.approx(KNOWN_MISSES[key], abs=0.01), key
        else:
            assert abs(error) <= 25.0, (key, error)  # issue 16's bar for each run
    assert {row["reference"] for row in report["not_expressible"]} == NOT_EXPRESSIBLE
    def axis(key: str) -> set[str]:
        return {path.stem for path in folder.glob("*.toml")
                if read_reference(path).scenario.get("parallelism", {}).get(key, 1) > 1}

    pp = axis("pipeline_parallel")
    tp = axis("tensor_parallel") - pp
    for category in ("throughput", "memory"):  # without TP or PP: within the bar today
        plain = [abs(e) for (name, kind), e in errors.items()
                 if kind == category and name not in tp | pp | ISSUE_32]
        assert sum(plain) / len(plain) <= 10.0, category
    for runs, mean in ((tp, TENSOR_PARALLEL_MEAN_PCT), (pp, PIPELINE_MEAN_PCT),
                       (ISSUE_32, ISSUE_32_MEAN_PCT)):
        axis_errors = [abs(e) for (name, _), e in errors.items() if name in runs]
        assert sum(axis_errors) / len(axis_errors) == pytest.approx(mean, abs=0.01)


def test_set_applies_to_every_reference(tmp_path):
    r = simulated()
    write(tmp_path, "a", f"tokens_per_s_per_gpu = {r.tokens_per_s_per_gpu!r}\n")
    plain = run_zerosim("validate", "--references", str(tmp_path), "--json").json
    halved = run_zerosim("validate", "--references", str(tmp_path), "--json",
                         "--set", "cluster.compute_efficiency=0.25").json
    assert plain["rows"][0]["error_pct"] == pytest.approx(0.0, abs=1e-9)
    assert halved["rows"][0]["error_pct"] < -30  # flat at a quarter of peak: far slower
    assert halved["overrides"] == {"cluster": {"compute_efficiency": 0.25}}
    assert_one_line_error(run_zerosim("validate", "--references", str(tmp_path), "--set",
                                      "cluster.nope=1"), "unknown key cluster.nope")
    assert_one_line_error(run_zerosim("validate", "m.json", "--set", "cluster.gpu=CPU"),
                          "--set applies to --references only")


def test_nothing_compared_fails(tmp_path):
    """Review I2: a folder whose runs zerosim cannot express printed an empty table and exited
    0; an expressible run with an empty [measured] table was silently not compared."""
    write(tmp_path, "tp", "", expressible=False, why="tensor parallel 8")
    only = run_zerosim("validate", "--references", str(tmp_path))
    assert only.code == 1, only.stdout
    assert "nothing compared: no run here is one zerosim can express (FAILED)" in only.stdout
    assert run_zerosim("validate", "--references", str(tmp_path), "--json").code == 1
    write(tmp_path, "empty", "")
    assert_one_line_error(run_zerosim("validate", "--references", str(tmp_path)),
                          "empty.toml: [measured] has none of tokens_per_s_per_gpu, "
                          "tflops_per_gpu, mfu, memory_GiB: nothing to compare")


def test_an_error_that_overflows_is_refused_and_json_stays_json(tmp_path):
    """Review I7: tokens_per_s_per_gpu = 5e-324 gave an error of inf, printed `Infinity`. A
    measured figure no error can be taken against is refused; huge finite errors average into a
    finite mean (their sum overflows) and the output stays strict JSON."""
    r = simulated()
    write(tmp_path, "a", "tokens_per_s_per_gpu = 5e-324\n")
    assert_one_line_error(run_zerosim("validate", "--references", str(tmp_path), "--json"),
                          "a.toml: tokens/s/GPU measured 5e-324, simulated ",
                          "the error relative to the measurement overflows")
    # error = (s - s / 1.2e306) / (s / 1.2e306) x 100 ~ 1.2e308 each: finite, their sum is not
    for name in ("a", "b"):
        write(tmp_path, name, f"tokens_per_s_per_gpu = {r.tokens_per_s_per_gpu / 1.2e306!r}\n")
    shown = run_zerosim("validate", "--references", str(tmp_path), "--json")
    assert shown.code == 1

    def refuse(constant):
        raise AssertionError(f"{constant} in JSON output")
    report = json.loads(shown.stdout, parse_constant=refuse)
    assert report["summary"]["throughput"]["mean_abs_error_pct"] == pytest.approx(1.2e308)


def test_a_name_past_the_systems_limit_is_one_line():
    """Review T3: Path.is_dir raised ENAMETOOLONG (Python 3.11) as a traceback."""
    assert_one_line_error(run_zerosim("validate", "--references", "y" * 300),
                          "--references", "File name too long")
