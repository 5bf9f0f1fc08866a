"""The Python API (zerosim/api.py) walked as a notebook would: every figure equal to what the
command of the same name prints with --json, a scenario built from keywords equal to the file
it came from, presets always filled, bad input one InputError."""

from __future__ import annotations

import json
import tomllib

import pytest

import zerosim
from zerosim.scenario.cluster import ClusterConfig

from tests.conftest import SCENARIOS, run_zerosim

LLAMA = SCENARIOS / "llama2_7b_64gpu.toml"
SETS = {"training.zero_stage": 3, "cluster.nodes": 2, "training.framework": "deepspeed"}
FLAGS = [arg for key, value in SETS.items() for arg in ("--set", f"{key}={json.dumps(value)}")]


def test_a_notebook_walk_gets_the_commands_numbers(tmp_path):
    scenario = zerosim.load(LLAMA, sets=SETS)
    memory = zerosim.memory(scenario)
    assert memory.to_dict() == run_zerosim("memory", LLAMA, *FLAGS, "--json").json
    assert [row["peak_bytes"] for row in memory.table()] == [
        stage["peak_bytes"] for stage in memory.to_dict()["stages"]]
    assert str(memory) == run_zerosim("memory", LLAMA, *FLAGS).stdout.rstrip("\n")

    simulated = zerosim.simulate(scenario, stage=3)
    shown = run_zerosim("simulate", LLAMA, *FLAGS, "--stage", "3", "--json").json
    assert simulated.to_dict() == shown
    assert simulated.table()[0]["step_time_s"] == shown[0]["step_time_s"]
    assert simulated.table()[0]["comm_bytes_per_rank.all_gather"] == \
        shown[0]["comm_bytes_per_rank"]["all_gather"]

    planned = zerosim.plan(scenario, allow=["offload"])
    assert planned.to_dict() == run_zerosim("plan", LLAMA, *FLAGS, "--allow", "offload",
                                            "--json").json
    assert [row["name"] for row in planned.table()] == ["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3"]

    rows = zerosim.sweep(LLAMA, {"cluster.nodes": [1, 2]}, sets={"training.seq_len": 2048})
    out = tmp_path / "sweep.json"
    run_zerosim("sweep", LLAMA, "--vary", "cluster.nodes=1,2", "--set", "training.seq_len=2048",
                "--out", out, "--quiet")
    assert rows == json.loads(out.read_text())["rows"]
    assert [row["cluster.nodes"] for row in rows] == [1] * 4 + [2] * 4

    page = zerosim.report_page(scenario, tokens="300B", price_per_gpu_hour=3, gpus=[8, 16])
    html = tmp_path / "report.html"
    run_zerosim("report", LLAMA, *FLAGS, "--tokens", "3e11", "--price-per-gpu-hour", "3",
                "--gpus", "8,16", "-o", html)
    from tests.zerosim.test_report_page import parsed

    shown_page = parsed(html.read_text()).data
    mine = page.to_dict()
    for key in ("memory", "simulate", "budget", "plan", "sweep", "notes", "inputs"):
        assert mine[key] == shown_page[key], key
    assert [row["budget.cost"] for row in page.table()] == [b["cost"] for b in mine["budget"]]
    page.write(tmp_path / "again.html")
    assert parsed((tmp_path / "again.html").read_text()).data["simulate"] == mine["simulate"]


def test_sets_take_python_values():
    """A mapping's values are Python's (True, not the TOML text "True")."""
    flash = zerosim.load(LLAMA, sets={"training.flash_attention": True,
                                      "training.framework": "fsdp2"})
    assert flash.training.flash_attention is True and flash.training.framework == "fsdp2"


def test_tables_as_keywords_or_a_dict_give_the_files_numbers():
    tables = tomllib.loads(LLAMA.read_text())
    from_file = zerosim.memory(zerosim.load(LLAMA)).to_dict()
    for scenario in (zerosim.load(tables), zerosim.load(**tables)):
        given = zerosim.memory(scenario).to_dict()
        assert given["scenario"] == "(zerosim.load)"
        assert {**given, "scenario": from_file["scenario"]} == from_file


def test_a_preset_is_always_filled_and_never_half_filled():
    """The issue's trap: ClusterConfig(gpu="H100-80GB") kept the A100's figures silently."""
    h100 = zerosim.load(model={"params": 7_000_000_000}, cluster={"gpu": "H100-80GB"})
    assert h100.cluster.peak_tflops == ClusterConfig.preset("H100-80GB").peak_tflops
    assert h100.cluster.peak_tflops != ClusterConfig().peak_tflops
    with pytest.raises(zerosim.InputError, match=r"ClusterConfig.preset\('H100-80GB'"):
        ClusterConfig(gpu="H100-80GB")
    assert ClusterConfig.preset("H100-80GB", peak_tflops=500.0).peak_tflops == 500.0


def test_bad_input_is_one_input_error_naming_the_key():
    with pytest.raises(zerosim.InputError, match="model.hidden = -1 must be > 0"):
        zerosim.load(model={"hidden": -1, "layers": 2, "heads": 2, "vocab": 10})
    with pytest.raises(zerosim.InputError, match="unknown table"):
        zerosim.load({"model": {"params": 10}, "modle": {}})
    with pytest.raises(zerosim.InputError, match="training.zero_stage = 5"):
        zerosim.load(LLAMA, sets={"training.zero_stage": 5})
    with pytest.raises(TypeError, match="not both"):
        zerosim.load(LLAMA, model={"params": 10})


def test_the_package_names_its_api_and_nothing_else():
    assert {"load", "memory", "simulate", "plan", "sweep", "report_page"} <= set(zerosim.__all__)
    with pytest.raises(AttributeError):
        zerosim.no_such_name  # noqa: B018


def test_a_rack_scale_preset_fills_its_nvlink_domain():
    """GB200 NVL72 is one NVLink domain of 72 GPUs: its preset makes the node 72 GPUs, so the
    rack's 2,592 Grace cores are 36 a GPU (review: 8 a node gave 324 and a 9x CPU Adam)."""
    from zerosim.scenario.host import host_of

    gb200 = zerosim.load(model={"params": 7_000_000_000}, cluster={"gpu": "GB200-186GB"})
    assert gb200.cluster.gpus_per_node == 72
    assert host_of(gb200.cluster).adam_elements_per_s == pytest.approx(
        gb200.cluster.cpu_adam_Melements_per_s_per_core * 1e6 * 2592 / 72)
    assert zerosim.load(model={"params": 10}, cluster={"gpu": "B200-180GB"}).cluster \
        .gpus_per_node == 8
    assert zerosim.plan(gb200, allow="offload").to_dict()["stages"]  # a str is one scheme
