"""Fixtures shared by the zerosim tests: sweep rows, a simulated trace, a calibration profile
fitted from synthetic measurements, the command line."""

import json

import pytest

from tests.conftest import SCENARIOS, run_zerosim
from tests.zerosim.calibration_data import TINY, synthetic_raw
from tests.zerosim.results import NUMBERS, sweep_row
from zerosim.calibration.fit import build_profile
from zerosim.scenario.load import load_scenario
from zerosim.sim.engine import simulate
from zerosim.sim.trace import chrome_trace


@pytest.fixture
def rows():
    """Sweep rows of stages 0-3 at 4 and 8 GPUs (results.NUMBERS)."""
    return [sweep_row(s, n, *NUMBERS[s, n]) for (s, n) in sorted(NUMBERS, key=lambda k: -k[1])]


@pytest.fixture(scope="module")
def simulated():
    """A trace file's content (through JSON, as read back) of DDP and ZeRO-3, every rank."""
    scenario = load_scenario(SCENARIOS / "tiny_gpt_4rank_cpu.toml")
    results = [simulate(scenario, stage, mode="per_rank", keep_events=True) for stage in (0, 3)]
    return json.loads(json.dumps(chrome_trace(results))), results


@pytest.fixture
def zerosim():
    """`zerosim ARGV` through cli.main."""
    return run_zerosim


@pytest.fixture(scope="module")
def profile_path(tmp_path_factory):
    """A profile fitted from calibration_data.synthetic_raw, written to a file."""
    scenario = load_scenario(TINY)
    profile = build_profile(scenario, synthetic_raw(scenario))
    path = tmp_path_factory.mktemp("profiles") / "box.json"
    path.write_text(json.dumps(profile))
    return path
