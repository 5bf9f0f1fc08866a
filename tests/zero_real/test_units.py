"""Pure pieces of zero_real: parameter counts equal zerosim's, and the shard arithmetic."""

import pytest

pytest.importorskip("torch")

from zero_real.parts.flat import Layout, shard_elements  # noqa: E402
from zero_real.parts.model import build_model, count_params  # noqa: E402
from zerosim.scenario.config import ModelConfig  # noqa: E402
from zerosim.scenario.load import load_scenario  # noqa: E402
from zerosim.analytic.model import total_params  # noqa: E402
from tests.conftest import SCENARIOS  # noqa: E402


@pytest.mark.parametrize("model", [
    load_scenario(SCENARIOS / "tiny_gpt_4rank_cpu.toml").model,
    ModelConfig(layers=3, hidden=24, heads=4, kv_heads=2, ffn=40, vocab=51, mlp="swiglu",
                norm="rmsnorm", bias=False, tied_embeddings=False, position="rope"),
    ModelConfig(layers=1, hidden=6, heads=3, ffn=10, vocab=7, max_seq_len=5, norm="rmsnorm"),
])
def test_torch_model_has_exactly_zerosims_parameter_count(model):
    assert count_params(build_model(model)) == total_params(model)


@pytest.mark.parametrize("numel, world", [(3, 4), (10, 4), (12, 4), (1, 1), (7, 2)])
def test_shards_are_contiguous_ceil_slices_covering_the_buffer(numel, world):
    class P:  # only numel and shape are read
        def __init__(self, n):
            self.shape, self._n = (n,), n

        def numel(self):
            return self._n

    layout = Layout.of([("a", P(numel))], world)
    assert layout.shard == shard_elements(numel, world) == -(-numel // world)
    assert layout.padded % world == 0 and layout.padded - numel < world
    owned = [layout.owned(r) for r in range(world)]
    assert owned[0][0] == 0 and owned[-1][1] == layout.padded
    assert all(a[1] == b[0] for a, b in zip(owned, owned[1:]))
    # Any range cut at rank boundaries: pieces sum to it, and a rank owning only padding gets 0.
    for lo, hi in [(0, numel), (numel // 2, numel), (0, 1)]:
        pieces = layout.pieces(lo, hi)
        assert sum(pieces) == hi - lo and len(pieces) == world
    if numel < world:
        assert layout.pieces(0, numel)[world - 1] == 0


def test_rope_with_an_odd_head_dimension_is_refused():
    odd = ModelConfig(layers=1, hidden=15, heads=3, ffn=8, vocab=7, position="rope")
    with pytest.raises(ValueError, match="rope needs an even head dimension"):
        build_model(odd)
