"""zero_real's pipeline lines the parity runs leave loose (issue 30's mutation run,
bench/mutations/results-issue30.txt): the boundary tensor a stage passes on, by hand from
Megatron-LM's layout."""

import pytest

pytest.importorskip("torch")  # zero_real.parts.pipeline imports it

from tests.zerosim.pipeline_scenarios import GPT_8L  # noqa: E402
from zero_real.parts.pipeline import boundary_shape  # noqa: E402
from zerosim.scenario.load import load_scenario  # noqa: E402


@pytest.mark.parametrize("sets, shape", [
    ([], (2, 2048, 1024)),  # [b, s, h], as zero_real.parts.model runs
    (["parallelism.tensor_parallel=2"], (2048, 2, 1024)),  # [s, b, h]: Megatron's order
    # Megatron-LM's schedules.py, get_tensor_shapes: seq_length // tp under sequence parallelism
    (["parallelism.tensor_parallel=2", "parallelism.sequence_parallel=true"], (1024, 2, 1024)),
    (["parallelism.tensor_parallel=4", "parallelism.sequence_parallel=true"], (512, 2, 1024)),
])
def test_the_boundary_is_one_micro_batchs_activation(write, sets, shape):
    """GPT_8L: b = 2, s = 2048, h = 1024."""
    assert boundary_shape(load_scenario(write("pp.toml", GPT_8L), sets)) == shape
