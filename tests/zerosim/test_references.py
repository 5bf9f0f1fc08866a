"""`zerosim validate --references DIR`: published runs against the simulation. The harness is
checked on references written here (their "measured" figures set from a separate simulation so
the expected errors are known exactly); the repository's own references/ must all read and run."""

import json
from pathlib import Path

import pytest

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


def test_the_repository_references_read_and_run():
    folder = ROOT / "references"
    if not any(folder.glob("*.toml")):
        pytest.skip("no references/ yet")
    shown = run_zerosim("validate", "--references", str(folder), "--json")
    assert shown.code in (0, 1), shown.stderr
    report = json.loads(shown.stdout)
    assert report["references"] >= 10
    listed = {row["reference"] for row in report["rows"]} | {
        row["reference"] for row in report["not_expressible"]}
    assert listed == {path.stem for path in folder.glob("*.toml")}  # none dropped


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
