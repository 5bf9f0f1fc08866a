"""The fit (zerosim.calibration.fit), profiles (zerosim.scenario.profile) and their use by the
engine, on synthetic measurements whose true parameters are known (calibration_data.py): the
profile holds the constants the rows were made from, the engine prices compute with the op model
at those constants and memory with the mechanisms' bytes, and the old per-stage fudge factors
(fit.step's compute_scale, collective_scale, other_s; fit.compute's per-unit lines) are gone."""

import ast
import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import assert_one_line_error, run_zerosim
from tests.zerosim.calibration_data import (ALPHA, BETA, MECHANISMS, OPT, SIZES, TINY,
                                            record_by_hand, with_profile)
from zerosim.calibration.fit import fit_line, fit_segments
from zerosim.calibration.fit_memory import DERIVED
from zerosim.hardware import DEVICES
from zerosim.hardware.measured import record_gpu
from zerosim.scenario.load import load_scenario
from zerosim.scenario.profile import load_profile
from zerosim.sim.collective_bench import simulate_collective
from zerosim.sim.engine import simulate
from zerosim.sim.op_costs import OpCosts, unit_seconds

TIGHT = {"rel": 1e-9, "abs": 1e-12}


def test_alpha_beta_recovered_exactly_without_noise():
    segments = fit_segments(SIZES, [ALPHA + BETA * s for s in SIZES])
    assert len(segments) == 1
    assert segments[0]["alpha_s"] == pytest.approx(ALPHA, rel=1e-9)
    assert segments[0]["s_per_byte"] == pytest.approx(BETA, rel=1e-9)
    assert max(abs(r) for r in segments[0]["residuals_pct"]) < 1e-6


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_alpha_beta_within_2_percent_with_1_percent_noise(seed):
    rng = np.random.default_rng(seed)
    times = [(ALPHA + BETA * s) * (1 + 0.01 * rng.standard_normal()) for s in SIZES]
    (segment,) = fit_segments(SIZES, times)
    assert segment["alpha_s"] == pytest.approx(ALPHA, rel=0.02)
    assert segment["s_per_byte"] == pytest.approx(BETA, rel=0.02)


def test_two_protocols_give_two_segments_each_exact():
    # small messages: low latency, poor bandwidth; large: more latency, full bandwidth
    small, large = (5e-6, 1 / 0.5e9), (200e-6, 1 / 5e9)
    times = [(small if s <= 2 ** 16 else large)[0] + (small if s <= 2 ** 16 else large)[1] * s
             for s in SIZES]
    segments = fit_segments(SIZES, times)
    assert len(segments) == 2
    assert (segments[0]["alpha_s"], segments[0]["s_per_byte"]) == pytest.approx(small, rel=1e-6)
    assert (segments[1]["alpha_s"], segments[1]["s_per_byte"]) == pytest.approx(large, rel=1e-6)
    assert 2 ** 16 < segments[0]["max_bytes"] < 2 ** 17  # the cut lies between the two regimes


def test_fit_line_drops_an_unphysical_negative_intercept():
    line = fit_line([1, 2, 4], [0.9, 2.1, 4.0])  # a free fit would give a negative intercept
    assert line["intercept"] == 0.0 and line["slope"] > 0
    assert fit_line([5], [2.0]) == {"intercept": 0.0, "slope": 0.4, "residuals_pct": [0.0]}


# --- a synthetic box: known costs, measured exactly ----------------------------------------------


def _same_numbers(got, expected, where="record"):
    """Every number of `expected` (a record written by hand) in `got`, to 1e-9; the fit's
    residuals and what only the fit writes beside them are not compared."""
    if isinstance(expected, dict):
        for key, value in expected.items():
            assert key in got, f"{where}.{key}"
            _same_numbers(got[key], value, f"{where}.{key}")
    elif isinstance(expected, list):
        assert len(got) == len(expected), where
        for i, (a, b) in enumerate(zip(got, expected)):
            _same_numbers(a, b, f"{where}[{i}]")
    elif isinstance(expected, str):
        assert got == expected, where
    else:
        assert got == pytest.approx(expected, **TIGHT), where


def test_the_written_profile_holds_the_constants_the_measurements_were_made_from(profile_path):
    """Read back from the file: every fitted number is the constant calibration_data.py made its
    measurements from, for each process count (a ring of n ranks: (n-1)α and (n-1)β/n per walk;
    the box's record, the optimizer's line and each memory mechanism's bytes)."""
    fit = json.loads(profile_path.read_text())["fit"]
    assert sorted(fit) == ["collectives", "memory", "optimizer", "record"]
    for n in (2, 4):
        for op, walks in (("all_reduce", 2), ("reduce_scatter", 1), ("all_gather", 1)):
            got = fit["collectives"]["native"][op][str(n)]
            (segment,) = got["segments"]
            assert (segment["min_bytes"], segment["last_bytes"]) == (2.0 ** 10, 2.0 ** 28)
            assert segment["alpha_s"] == pytest.approx(walks * (n - 1) * ALPHA, **TIGHT)
            assert segment["s_per_byte"] == pytest.approx(walks * (n - 1) * BETA / n, **TIGHT)
            assert got["busbw_GBps"] == pytest.approx(2.5, rel=1e-9)  # 1 / β, in GB/s
            assert got["max_abs_residual_pct"] < 1e-6
        record = fit["record"][str(n)]
        _same_numbers(record, record_by_hand(n), f"record.{n}")
        assert max(map(abs, record["gemm"]["residuals_pct"])) < 1e-6
        assert "unfitted" not in record
        (segment,) = fit["optimizer"][str(n)]["segments"]
        assert segment["alpha_s"] == pytest.approx(OPT[0], **TIGHT)
        assert segment["s_per_byte"] == pytest.approx(OPT[1], **TIGHT)
        memory = fit["memory"][str(n)]
        assert set(memory) == set(MECHANISMS) | set(DERIVED)
        for name, (fixed, per, ran) in MECHANISMS.items():
            assert memory[name]["how"] == "measured"
            assert memory[name]["fixed_bytes"] == pytest.approx(fixed, abs=1e-6)
            assert memory[name]["per"] == pytest.approx(per, abs=1e-6)
            assert {k: memory[name][k] for k in ran} == ran
        for name, entry in DERIVED.items():
            assert (memory[name]["how"], memory[name]["per"]) == ("derived", entry["per"])


def test_profile_round_trips_and_prices_collectives_exactly(profile_path):
    profile = load_profile(profile_path)
    assert json.loads(profile_path.read_text()) == profile.data
    for n in (2, 4):
        s = with_profile(profile_path, f"cluster.gpus_per_node={n}")
        for op, factor in (("all_reduce", 2.0), ("reduce_scatter", 1.0), ("all_gather", 1.0)):
            for size in (2 ** 12, 2 ** 20, 2 ** 27):
                expected = factor * (n - 1) * (ALPHA + BETA * size / n)
                assert profile.collective_time("native", op, n, size) == pytest.approx(expected)
                got = simulate_collective(s, op, size)["time_s"]
                assert got == pytest.approx(expected, rel=1e-9)


def test_unmeasured_group_size_follows_the_ring_law(profile_path):
    # 3 ranks were not measured: priced from 4 (the nearest, larger on a tie) by per-step
    # latency and bus bandwidth, which is exactly the synthetic ring's law
    s = with_profile(profile_path, "cluster.gpus_per_node=8")
    expected = 2 * 7 * (ALPHA + BETA * 2 ** 24 / 8)
    assert simulate_collective(s, "all_reduce", 2 ** 24)["time_s"] == pytest.approx(expected)


def test_profile_numbers_replace_the_preset_but_not_explicit_keys(profile_path):
    s = with_profile(profile_path)
    busbw = 2 * 3 / 4 / (2 * 3 * BETA / 4) / 1e9
    assert s.cluster.intra_node_bandwidth_GBps == pytest.approx(busbw)
    assert s.cluster.intra_node_latency_us == pytest.approx(ALPHA * 1e6)
    assert with_profile(profile_path, "cluster.intra_node_bandwidth_GBps=7").cluster.\
        intra_node_bandwidth_GBps == 7


@pytest.mark.parametrize("ranks, world", [(2, 2), (4, 4), (3, 4)])
def test_simulated_compute_is_the_op_model_at_the_records_constants(profile_path, ranks, world):
    """Micro-batch 3, which no whole unit was timed at: each unit's forward and backward is
    op_costs.unit_seconds on the record written by hand (its GEMM law, linears, math attention,
    memory-bound ops and unit overheads) of the world of as many ranks, or the nearest (3: 4, the
    larger on a tie), summed over the units as the engine does, plus the optimizer's line over
    the shard: the fit, the file and the engine add nothing and lose nothing."""
    s = with_profile(profile_path, f"cluster.gpus_per_node={ranks}", "training.micro_batch=3")
    record = record_by_hand(world)
    costs = OpCosts(record_gpu(record, DEVICES["CPU"]), record["bandwidth_GBps"])
    forward, backward = unit_seconds(costs, s.model, s.training)
    assert len(forward) == len(backward) == s.model.layers + 2
    shard = -(-118_528 // ranks)  # the tiny GPT's parameters over the ranks (stage 1)
    assert simulate(s, 1).compute_s == pytest.approx(
        sum(forward) + sum(backward) + OPT[0] + OPT[1] * shard, rel=1e-12)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_memory_mechanisms_priced_by_hand_on_the_step(profile_path, stage):
    """4 ranks, fp32, micro-batch 3 (96 tokens of a 2-layer GPT, hidden 64, vocab 256) beyond
    the step without a profile: activations = saved ids (16 + 16 x 96 + 8 x 32 learned
    positions = 1,808) + LayerNorm's 8 bytes per token over 5 norms (3,840) = 5,648 (math
    attention's copies and scores at 4 bytes are what the analytic model counts at fp32: no
    excess); residue = the head's kept input and gradient (2 x 96 x 64 x 4) + ids and targets
    (16 x 96) + 8 = 50,696; backward's workspace = the loss's 4 + 8 x 96 x 256 = 196,612.
    zero_real's own: at stage 2 its pool of two 64 KiB buckets (131,072) from the step's start;
    at stage 3 the head's unit kept gathered after forward (128 + 256 x 64 elements: 66,048)
    and, in backward, the tied matrix's gradient (65,536) until the embedding's."""
    sets = ("cluster.gpus_per_node=4", "training.micro_batch=3", "training.overlap_comm=false")
    bare = simulate(load_scenario(TINY, list(sets)), stage)
    r = simulate(with_profile(profile_path, *sets), stage)
    activations, residue, workspace = 5_648, 50_696, 196_612
    pool = 131_072 if stage == 2 else 0
    kept, tied = (66_048, 65_536) if stage == 3 else (0, 0)
    assert r.memory_at["after_init"] == bare.memory_at["after_init"]
    assert r.memory_at["after_forward"] == pytest.approx(
        bare.memory_at["after_forward"] + activations + pool + kept, abs=8)  # per-unit rounding
    assert r.memory_at["after_step"] == bare.memory_at["after_step"] + residue + pool
    if stage < 2:  # both on top of the bare step's peak (at stages 2-3 within the bound below)
        assert r.peak_bytes == pytest.approx(bare.peak_bytes + activations + workspace, abs=8)
    assert bare.peak_bytes + workspace < r.peak_bytes <= (
        bare.peak_bytes + activations + workspace + pool + kept + tied + 8)


@pytest.mark.parametrize("content, fragment", [
    (None, "profile not found"),
    ("{not json", "invalid JSON"),
    ('{"format": "other", "version": 2}', "not a zerosim profile"),
    ('{"format": "zerosim-profile", "version": 7}', "version 7"),
    ('{"format": "zerosim-profile", "version": 1, "fit": {}}',
     "version 1 is not supported (this zerosim reads version 2: re-run zero-real calibrate"),
    ('{"format": "zerosim-profile", "version": 2}', "no 'fit'"),
    ('{"format": "zerosim-profile", "version": 2, "fit": {"optimizer": {"2": {"segments": '
     '[{"alpha_s": NaN, "s_per_byte": 1, "max_bytes": 9}]}}}}', "fit.optimizer.2.segments[0]"),
    ('{"format": "zerosim-profile", "version": 2, "fit": {"record": {"2": {"gemm": {}}}}}',
     "malformed fit.record.2"),
    ('{"format": "zerosim-profile", "version": 2, "fit": {"collectives": {"native": '
     '{"all_reduce": {"1": {"segments": []}}}}}}', "whole number >= 2"),
    ('{"format": "zerosim-profile", "version": 2, "fit": {"collectives": {"native": '
     '{"broadcast": {}}}}}', "prices only all_reduce"),
    ('{"format": "zerosim-profile", "version": 2, "fit": {"optimizer": {"2": {"segments": '
     '[{"alpha_s": -1, "s_per_byte": 1, "max_bytes": 9}]}}}}', "must be >= 0"),
    ('{"format": "zerosim-profile", "version": 2, "fit": {"optimizer": []}}', "malformed"),
    ('{"format": "zerosim-profile", "version": 2, "fit": {"memory": {"2": {"0": {}}}}}',
     "fit.memory.2: key '0' is not a memory mechanism"),
])
def test_missing_or_malformed_profile_is_one_line_exit_2(write, tmp_path, content, fragment):
    profile = tmp_path / "p.json"
    if content is not None:
        profile.write_text(content)
    scenario = write("s.toml", TINY.read_text().replace('gpu = "CPU"',
                                                        f'gpu = "CPU"\nprofile = "{profile}"'))
    assert_one_line_error(run_zerosim("simulate", str(scenario)), fragment)
    assert_one_line_error(run_zerosim("memory", str(TINY), "--set",
                                      f'cluster.profile="{profile}"'), fragment)


def test_a_relative_profile_path_resolves_against_the_scenario_file(write, tmp_path,
                                                                    profile_path):
    (tmp_path / "box.json").write_text(profile_path.read_text())
    scenario = write("s.toml", TINY.read_text().replace('gpu = "CPU"',
                                                        'gpu = "CPU"\nprofile = "box.json"'))
    assert load_scenario(scenario).profile.data == load_profile(profile_path).data



def test_a_size_between_two_regimes_is_bridged_not_extrapolated():
    from zerosim.scenario.profile import segment_line

    fast, slow = (1e-3, 1e-9), (0.0, 4e-9)  # 4x slower per byte from 32 MiB on
    sizes = [2.0 ** k for k in range(20, 28)]
    times = [(fast if s < 2 ** 25 else slow)[0] + (fast if s < 2 ** 25 else slow)[1] * s
             for s in sizes]
    segments = fit_segments(sizes, times)
    assert [seg["last_bytes"] for seg in segments] == [2.0 ** 24, 2.0 ** 27]
    # 24 MiB lies between the last fast point (16 MiB) and the first slow one (32 MiB): on the
    # straight line joining the two measured values
    a, b = segment_line(segments, 1.5 * 2 ** 24)
    expected = (times[4] + times[5]) / 2
    assert a + b * 1.5 * 2 ** 24 == pytest.approx(expected)
    for size, t in zip(sizes, times):  # measured sizes: their own segment, exactly
        a, b = segment_line(segments, size)
        assert a + b * size == pytest.approx(t)


# --- the old per-stage fudge factors change no prediction ----------------------------------------

# What version 1 fitted to the real stages' own steps: in-step scales and bookkeeping time per
# stage (fit.step), and per-unit lines of overhead + slope x FLOPs (fit.compute).
FUDGES = {"step": {"2": {"impl": "native", "compute_scale": {"0": 1.3},
                         "collective_scale": {"0": {"all_reduce": 1.2}}, "other_s": {"0": 5e-4}}},
          "compute": {"2": {"block": {"forward": {"overhead_s": 5e-4, "slope": 5e-11,
                                                  "per": "flop"}}}}}


@pytest.mark.parametrize("section", sorted(FUDGES))
def test_a_profile_carrying_the_old_fudge_factors_is_refused(tmp_path, profile_path, section):
    """A version-2 profile with fit.step or fit.compute beside its record is refused, one line
    naming the key, by every command that reads it: no prediction can use them."""
    data = json.loads(profile_path.read_text())
    data["fit"][section] = FUDGES[section]
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps(data))
    for command in ("simulate", "memory"):
        assert_one_line_error(run_zerosim(command, str(TINY), "--set",
                                          f'cluster.profile="{bad}"'),
                              f"profile {bad}: malformed fit: unknown key {section!r}")


def _names_read(tree: ast.AST) -> set[str]:
    """Every identifier, attribute and whole string constant in a module (a docstring is a
    sentence, never equal to a key)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.add(node.value)
        elif isinstance(node, (ast.FunctionDef, ast.arg, ast.keyword)):
            out.add(getattr(node, "name", None) or getattr(node, "arg", None))
    return out


def test_no_module_of_zerosim_reads_the_old_fudge_factors():
    """Nothing under zerosim/ names compute_scale, collective_scale or other_s, as a key, an
    attribute, a function or a variable: the per-stage corrections are gone, not unused."""
    root = Path(__file__).resolve().parents[2] / "zerosim"
    modules = sorted(root.rglob("*.py"))
    assert len(modules) > 50  # the package, not an empty folder
    assert "compute_seconds" in _names_read(ast.parse((root / "sim" / "costs.py").read_text()))
    fudges = {"compute_scale", "collective_scale", "other_s", "fit_step"}
    found = {str(path.relative_to(root)): sorted(fudges & _names_read(ast.parse(path.read_text())))
             for path in modules}
    assert {path: names for path, names in found.items() if names} == {}
