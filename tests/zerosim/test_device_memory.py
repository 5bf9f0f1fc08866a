"""Memory as users read it: the caching allocator's allocated and reserved bytes over the step's
real sequence of buffers, and the device figure (nvidia-smi): reserved + the CUDA context +
NCCL's connection buffers. Expected overheads are counted by hand from NCCL's and the presets'
constants."""

import pytest

from zerosim.scenario.load import load_scenario
from zerosim.sim.engine import simulate

from tests.conftest import SCENARIOS, ZERO_PAPER, run_zerosim

# One connection's buffers (NCCL src/init.cc lines 810-824): LL 8 x 512 x 8 x 16 B, LL128
# 120 x 640 x 8 x 8 B, Simple 4 MiB.
CONNECTION = 524_288 + 4_915_200 + 4_194_304
CONTEXT = 723 * 2**20  # hardware.gpus.CUDA_CONTEXT_MIB: the measured CUDA context


def a100(nodes, *extra):
    return load_scenario(ZERO_PAPER, ["cluster.gpu='A100-80GB'", f"cluster.nodes={nodes}", *extra])


@pytest.mark.parametrize("nodes, connections", [
    # one node: the ring graph's 12 channels, set up twice over: 24, one receiving peer each
    (1, 24 * 1),
    # several nodes: 8 channels (one per NIC) -> 16; the ring's peer and the tree's three
    (2, 16 * 4),
])
def test_device_is_reserved_plus_the_context_plus_nccl_buffers(nodes, connections):
    for stage in (0, 3):
        r = simulate(a100(nodes), stage, keep_events=False)
        assert r.device_bytes - r.peak_reserved_bytes == CONTEXT + connections * CONNECTION
        assert r.peak_reserved_bytes >= r.peak_allocated_bytes >= r.peak_bytes


def test_the_context_can_be_set_and_a_cpu_process_has_none():
    r = simulate(a100(1, "cluster.cuda_context_MiB=100"), 3, keep_events=False)
    assert r.device_bytes - r.peak_reserved_bytes == 100 * 2**20 + 24 * CONNECTION
    cpu = simulate(load_scenario(SCENARIOS / "tiny_gpt_4rank_cpu.toml"), 1, keep_events=False)
    assert cpu.device_bytes == cpu.peak_reserved_bytes  # gloo: no NCCL buffers, no context


def test_fits_is_judged_on_the_device_figure():
    """Just enough memory for the buffers' peak, not for what the device holds: NO."""
    r = simulate(a100(1), 3, keep_events=False)
    tight = a100(1, f"cluster.hbm_GiB={r.peak_bytes / 2**30}")
    assert simulate(tight, 3, keep_events=False).device_bytes > tight.cluster.hbm_GiB * 2**30
    from zerosim.report import format_simulation_table
    table = format_simulation_table(tight, [simulate(tight, 3, keep_events=False)]).splitlines()
    row = next(line for line in table if line.startswith("3 ZeRO-3"))
    assert " NO " in row, row


def test_reserved_rounds_every_buffer():
    """Stage 3 of the tiny CPU model: every buffer is small, so each sits in 2 MiB segments or
    rounds up to 512 bytes; reserved is a multiple of 2 MiB and allocated of 512 bytes."""
    r = simulate(load_scenario(SCENARIOS / "tiny_gpt_4rank_cpu.toml"), 3, keep_events=False)
    assert r.peak_reserved_bytes % (2 * 2**20) == 0
    assert r.peak_allocated_bytes % 512 == 0
    assert r.peak_allocated_bytes >= r.peak_bytes


def test_memory_and_plan_leave_the_overhead_aside():
    """ZeRO-1's 31.40625 GB (29.25 GiB) fits 29.5 GiB by itself, not beside the CUDA context and
    NCCL's buffers (0.99 GiB on 8 V100 nodes): `memory` says NO, and its JSON gives the overhead."""
    data = run_zerosim("memory", str(ZERO_PAPER), "--set", "cluster.hbm_GiB=29.5", "--json").json
    assert data["overhead_bytes"] == CONTEXT + 8 * 4 * CONNECTION
    zero1 = data["stages"][1]
    assert zero1["peak_bytes"] == 31_406_250_000 < 29.5 * 2**30
    assert zero1["fits_gpu_memory"] is False
    assert run_zerosim("memory", str(ZERO_PAPER), "--set", "cluster.hbm_GiB=30.5",
                       "--json").json["stages"][1]["fits_gpu_memory"] is True
