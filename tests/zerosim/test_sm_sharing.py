"""Compute slowed by communication kernels (cluster.compute_model = "op"): while a collective is in
flight, NCCL's thread blocks hold one SM per channel, and compute runs on the rest."""

import pytest

from zerosim.scenario.load import load_scenario
from zerosim.sim.engine import Engine, simulate
from zerosim.sim.rank import RankContext

from tests.conftest import SCENARIOS

LLAMA = SCENARIOS / "llama2_7b_64gpu.toml"
ONE_NODE = ["cluster.nodes=1", "cluster.gpus_per_node=8"]


def engine(*extra):
    return Engine(load_scenario(LLAMA, [*ONE_NODE, *extra]), 3)


def test_the_share_is_nccls_channels_over_the_sms():
    """One A100 node: the ring graph's 12 channels, set up twice over = 24 thread blocks, of the
    A100's 108 SMs. The flat model already stands for every loss: no share there."""
    assert engine("cluster.compute_model='op'").sm_share == 24 / 108
    assert engine().sm_share == 24 / 108  # "op" is the default
    assert engine("cluster.compute_model='flat'").sm_share == 0.0
    assert engine("cluster.compute_efficiency=0.5").sm_share == 0.0


@pytest.mark.parametrize("overlap_s, busy, expected_s", [
    # 10 s of work, 4 s of it beside one collective: 4 s at (1 - s), the rest at full speed
    (4.0, 1, lambda s: 10.0 + 4.0 * s),
    # beside two collectives at once: (1 - 2s) for 4 s
    (4.0, 2, lambda s: 10.0 + 4.0 * 2 * s),
    # a collective longer than the work: all of it at (1 - s)
    (100.0, 1, lambda s: 10.0 / (1 - s)),
])
def test_compute_runs_on_the_sms_left(overlap_s, busy, expected_s):
    e = engine("cluster.compute_model='op'")
    ctx = RankContext(e, 0)
    ended = {}

    def communicate():
        for _ in range(busy):
            ctx._communication(+1)
        yield e.env.timeout(overlap_s)
        for _ in range(busy):
            ctx._communication(-1)

    def work():
        yield from ctx.compute(10.0, "forward", "forward", 0)
        ended["at"] = e.env.now

    e.env.process(communicate())
    e.env.process(work())
    e.env.run()
    assert ended["at"] == pytest.approx(expected_s(e.sm_share), rel=1e-12)
    assert ctx.state.compute_s == pytest.approx(ended["at"], rel=1e-12)  # the stream was busy


def test_a_step_with_overlapped_communication_computes_longer(monkeypatch):
    s = load_scenario(LLAMA, [*ONE_NODE, "cluster.compute_model='op'"])
    shared = simulate(s, 3)
    monkeypatch.setattr("zerosim.sim.engine.sm_share", lambda scenario, library: 0.0)
    alone = simulate(s, 3)
    # the same kernels; ZeRO-3's gathers and reduce-scatters run beside most of them
    assert shared.compute_s > alone.compute_s * 1.01
    assert shared.compute_s < alone.compute_s / (1 - 24 / 108)  # never slower than all beside
