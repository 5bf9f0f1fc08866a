"""A calibration profile prices the box it was measured on: one from another kind of box is
refused in one line, one from another model family is said in a note (scenario/load.py's
check_profile_fits, scenario/defaults.py)."""

from __future__ import annotations

import json

from tests.conftest import ROOT, SCENARIOS, assert_one_line_error, run_zerosim

CPU_PROFILE = ROOT / "profiles/cpu_gloo_tiny.json"
TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
OWN = ("--set", f"cluster.profile='{CPU_PROFILE}'")


def gpu_profile(tmp_path, backend: str, hardware: str = "NVIDIA H100 80GB HBM3 x1") -> str:
    """The committed CPU profile as a GPU's would say where it came from."""
    data = json.loads(CPU_PROFILE.read_text())
    data["provenance"].update(device="cuda", hardware=hardware, backend=backend)
    path = tmp_path / f"{hardware.split()[1]}_{backend}.json"
    path.write_text(json.dumps(data))
    return str(path)


def with_profile(profile, *sets: str):
    argv = [arg for s in (f"cluster.profile='{profile}'", *sets) for arg in ("--set", s)]
    return run_zerosim("simulate", SCENARIOS / "llama2_7b_64gpu.toml", "--stage", "1", *argv)


def test_a_cpu_boxs_profile_under_an_h100_scenario_is_one_line():
    shown = with_profile(CPU_PROFILE, "cluster.gpu='H100-80GB'")
    assert_one_line_error(shown, "cpu_gloo_tiny.json was measured on cpu", "H100-80GB")


def test_an_h100s_profile_under_an_a100_scenario_is_one_line(tmp_path):
    shown = with_profile(gpu_profile(tmp_path, "nccl"), "cluster.gpu='A100-80GB'")
    assert_one_line_error(shown, "was measured on NVIDIA H100 80GB HBM3 x1, an H100-80GB",
                          "cluster is A100-80GB")
    assert with_profile(gpu_profile(tmp_path, "nccl"), "cluster.gpu='H100-80GB'").code == 0
    # a GPU the catalogue lacks is its own: its profile prices it under any GPU's figures
    l40s = gpu_profile(tmp_path, "nccl", "NVIDIA L40S x1")
    assert with_profile(l40s, "cluster.gpu='A100-80GB'").code == 0


def test_a_gloo_profile_under_nccl_is_one_line(tmp_path):
    shown = with_profile(gpu_profile(tmp_path, "gloo"), "cluster.gpu='H100-80GB'")
    assert_one_line_error(shown, "measured gloo's collectives", "with nccl")


def test_a_profile_of_another_family_is_a_note_and_its_own_family_none():
    llama = ("model.mlp='swiglu'", "model.norm='rmsnorm'", "model.position='rope'",
             "model.bias=false")
    shown = run_zerosim("memory", TINY, *OWN, *[a for s in llama for a in ("--set", s)],
                        "--json")
    assert shown.code == 0, shown.stderr
    said = [n for n in shown.json.get("notes", []) if n.startswith("cluster.profile")]
    assert len(said) == 1 and "gelu/layernorm/learned model and this one is " \
        "swiglu/rmsnorm/rope" in said[0]
    same = run_zerosim("memory", TINY, *OWN, "--json")
    assert same.code == 0, same.stderr
    assert not [n for n in same.json.get("notes", []) if n.startswith("cluster.profile")]


def test_validate_simulates_the_gpu_the_runs_ran_on():
    """The H100 runs of 2026-11-24 name a V100 scenario file (their shape's): validate takes
    the GPU from the runs' hardware, so their H100 profile fits, and says so."""
    from zerosim.scenario.presets import preset_of_hardware

    assert [preset_of_hardware(h) for h in (
        "NVIDIA H100 80GB HBM3 x1", "NVIDIA A100-SXM4-40GB x8", "NVIDIA H200",
        "Tesla V100-SXM2-32GB", "NVIDIA B200 x8", "NVIDIA GB200", "x86_64, 2 CPUs", "NVIDIA A100",
        None, "NVIDIA GH200 480GB", "NVIDIA H100 PCIe", "NVIDIA H100 NVL")] == [
        "H100-80GB", "A100-40GB", "H200-141GB", "V100-32GB", "B200-180GB", "GB200-186GB", None,
        None, None, None, None, None]  # whole words; another form factor is not the record
    shown = run_zerosim("validate", ROOT / "profiles/measurements/h100_2026-11-24/"
                        "gpt350m_s1_w8.json", "--profile",
                        ROOT / "profiles/h100_record_2026-11-24.json", "--json")
    assert shown.code in (0, 1), shown.stderr
    assert "simulated on cluster.gpu = 'H100-80GB', the GPU the runs ran on (NVIDIA H100 80GB " \
           "HBM3 x1)" in shown.json["notes"]
