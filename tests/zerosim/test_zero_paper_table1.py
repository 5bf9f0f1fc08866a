"""The ZeRO paper's numbers (Rajbhandari et al. 2020, §5.1 and Table 1), through the command line."""

import pytest

from tests.conftest import ZERO_PAPER, run_zerosim

PSI = 7_500_000_000

# Table 1, the 7.5B column: per-device model-state memory in GB for Nd devices.
TABLE_1 = {  # Nd: (baseline, P_os, P_os+g, P_os+g+p)
    1: (120, 120, 120, 120),
    4: (120, 52.5, 41.3, 30),
    16: (120, 35.6, 21.6, 7.5),
    64: (120, 31.4, 16.6, 1.88),
    256: (120, 30.4, 15.4, 0.47),
    1024: (120, 30.1, 15.1, 0.12),
}
# (nodes, gpus_per_node) giving each Nd.
LAYOUT = {1: (1, 1), 4: (1, 4), 16: (2, 8), 64: (8, 8), 256: (32, 8), 1024: (128, 8)}


def model_states_GB(nd: int) -> list[float]:
    nodes, per_node = LAYOUT[nd]
    result = run_zerosim("memory", ZERO_PAPER, "--json", "--set", f"cluster.nodes={nodes}",
                         "--set", f"cluster.gpus_per_node={per_node}")
    assert result.code == 0, result.stderr
    data = result.json
    assert data["world_size"] == nd
    assert [s["stage"] for s in data["stages"]] == [0, 1, 2, 3]
    return [s["model_states_bytes"] / 1e9 for s in data["stages"]]


@pytest.mark.parametrize("nd", sorted(TABLE_1))
def test_table1_column_for_7b5(nd):
    ours = model_states_GB(nd)
    for stage, (got, paper) in enumerate(zip(ours, TABLE_1[nd])):
        # The paper prints 2-3 significant digits; agree to half a unit of the last one printed.
        decimals = len(str(paper).split(".")[1]) if "." in str(paper) else 0
        assert abs(got - paper) <= 0.5 * 10**-decimals + 1e-9, (nd, stage, got, paper)


def test_64_gpu_model_states_are_the_papers_formulas_exactly():
    result = run_zerosim("memory", ZERO_PAPER, "--json")
    assert result.code == 0, result.stderr
    data = result.json
    assert data["params"] == PSI and data["world_size"] == 64
    assert data["optimizer_bytes_per_param"] == 12
    states = [s["model_states_bytes"] for s in data["stages"]]
    assert states == [16 * PSI, 4 * PSI + 12 * PSI // 64, 2 * PSI + 14 * PSI // 64, 16 * PSI // 64]
    for stage in data["stages"]:
        assert stage["model_states_bytes"] == (stage["params_bytes"] + stage["grads_bytes"]
                                               + stage["optimizer_bytes"])
        assert all(isinstance(v, int) for k, v in stage.items() if k.endswith("_bytes"))
        assert stage["activations_bytes"] == 0  # a bare Ψ has no shape, hence no activations
        assert stage["host_bytes"] == 0


def test_json_has_the_documented_keys():
    data = run_zerosim("memory", ZERO_PAPER, "--json").json
    assert {"world_size", "params", "stages"} <= set(data)
    keys = {"stage", "params_bytes", "grads_bytes", "optimizer_bytes", "model_states_bytes",
            "activations_bytes", "buffers_bytes", "host_bytes", "peak_bytes"}
    for stage in data["stages"]:
        assert keys <= set(stage)
        # the larger of backward's start and the optimizer step (bare Ψ: no persistent buffers)
        assert stage["peak_bytes"] == max(stage["model_states_bytes"] + stage["activations_bytes"]
                                          + stage["buffers_bytes"],
                                          stage["model_states_bytes"] + stage["step_bytes"])


def test_table_output_shows_both_unit_systems():
    result = run_zerosim("memory", ZERO_PAPER)
    assert result.code == 0
    assert "1 GB = 10^9 bytes" in result.stdout and "1 GiB = 2^30 bytes" in result.stdout
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()
            if line[:1].isdigit() and len(line.split()) > 5}
    # stage 0: 120.00 GB = 111.76 GiB, and does not fit a 32 GiB V100.
    assert rows["0"][2:4] == ["15.00", "15.00"] and "120.00" in rows["0"]
    assert "111.76" in rows["0"] and rows["0"][-1] == "NO"
    assert rows["3"][-1] == "yes"
