"""NCCL's tuner (the least predicted time wins), its overrides (cluster.collective_algorithm and
cluster.collective_protocol, as NCCL_ALGO and NCCL_PROTO), the errors of bad values, the engine's
use of it, and the fabric keys. Each forced (algorithm, protocol) is checked against its closed
form in test_nccl_collectives.py; here "auto" must pick the fastest of them. Expected numbers
are written out by hand from NCCL 2.30.7's tables (src/graph/tuning.cc), never with the
package's cost functions."""

import itertools

import pytest

from zerosim.errors import InputError
from zerosim.scenario.load import load_scenario
from zerosim.sim.collective_bench import simulate_collective
from zerosim.sim.engine import simulate

from tests.conftest import SCENARIOS, ZERO_PAPER, assert_one_line_error, run_zerosim

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
AR, RS, AG = "all_reduce", "reduce_scatter", "all_gather"
ALGORITHMS = ("tree", "ring", "nvls", "nvls_tree", "pat")  # NCCL's own; hierarchical is not
PROTOCOLS = ("LL", "LL128", "Simple")
SIZES = (2**10, 2**20, 2**26, 2**32)  # 1 KiB .. 4 GiB
INTEGER_LATENCIES = ("cluster.intra_node_latency_us=10", "cluster.inter_node_latency_us=20")


def scenario(gpu, nodes, ppn, *extra, base=ZERO_PAPER):
    return load_scenario(base, [f"cluster.gpu='{gpu}'", f"cluster.nodes={nodes}",
                                f"cluster.gpus_per_node={ppn}", *extra])


def forced(algorithm, protocol):
    return (f"cluster.collective_algorithm='{algorithm}'",
            f"cluster.collective_protocol='{protocol}'")


def enabled(gpu, nodes, ppn, op):
    """NCCL's candidates, by hand (tuning.cc lines 294-305 and 495-512, enqueue.cc 1989-2026):
    Tree only for all_reduce; NVLS and NVLSTree Simple only, with NVLink SHARP (H100), NVLS on
    one node, NVLSTree across nodes and for all_reduce; PAT Simple only, reduce_scatter and
    all_gather, one GPU per node."""
    found = {("ring", p) for p in PROTOCOLS}
    if op == AR:
        found |= {("tree", p) for p in PROTOCOLS}
    sharp = gpu.startswith("H100") and ppn > 1
    if sharp and nodes == 1:
        found.add(("nvls", "Simple"))
    if sharp and nodes > 1 and op == AR:
        found.add(("nvls_tree", "Simple"))
    if ppn == 1 and nodes > 1 and op != AR:
        found.add(("pat", "Simple"))
    return found


@pytest.mark.parametrize("gpu, nodes, ppn", [
    *itertools.product(("A100-80GB", "H100-80GB"), (1, 2, 4, 16), (8,)),
    ("A100-80GB", 16, 1), ("H100-80GB", 4, 1)])
def test_auto_picks_the_least_time(gpu, nodes, ppn):
    """NCCL's own per-hop latency tables (no scenario latency), every op and size: "auto" is the
    fastest of every (algorithm, protocol) forced one by one."""
    for op in (AR, RS, AG):
        times = {}
        for algorithm, protocol in itertools.product(ALGORITHMS, PROTOCOLS):
            try:
                s = scenario(gpu, nodes, ppn, *forced(algorithm, protocol))
                result = simulate_collective(s, op, SIZES[0])
            except InputError:
                continue  # runs no op here (nvls on A100, pat at 8 GPUs per node, ...)
            if result["algorithm"] == algorithm:  # not tree's fall back to the tuner (RS, AG)
                times[algorithm, protocol] = s
        assert set(times) == enabled(gpu, nodes, ppn, op), op
        auto = scenario(gpu, nodes, ppn)
        for size in SIZES:
            each = {key: simulate_collective(s, op, size)["time_s"] for key, s in times.items()}
            picked = simulate_collective(auto, op, size)
            key = (picked["algorithm"], picked["protocol"])
            assert picked["time_s"] == pytest.approx(min(each.values()), rel=1e-12), (op, size)
            assert each[key] == pytest.approx(picked["time_s"], rel=1e-12), (op, size, key)


@pytest.mark.parametrize("gpu, nodes, size, algorithm, protocol, expected_us", [
    # One A100 node, 1 KiB: ring/LL = 6.6 + 14 x 0.6 (NVLink Ring LL hop) = 15.0 us + 1024 B at
    # min(87.7, 240/2) x 8/14 GB/s; tree/LL 6.8 + 2 x 7 x 0.6 = 15.2, ring/LL128 14 + 14 x 1.9 =
    # 40.6, ring/Simple 8.4 + 14 x 3.4 = 56 us: ring/LL wins.
    ("A100-80GB", 1, 2**10, "ring", "LL", 15.0 + 2**10 * 14 / (87.7 * 8 * 1e3)),
    # One H100 node, 1 GiB: nvls = 25 + 2**30 / 272e3 = 3972.6 us; ring/Simple 56 + 2**30 x 14 /
    # (360 x 8e3) = 5275.6 us; tree/Simple busbw min(0.92 x 360, 12 x 38.7) / 2 = 165.6: 6.5 ms.
    ("H100-80GB", 1, 2**30, "nvls", "Simple", 25 + 2**30 / (272 * 1e3)),
    # 4 A100 nodes (AMD EPYC hosts: 2 us of network overhead, x3 for Simple), 4 GiB: ring/Simple
    # latency (8.4 + 56 x max(3.4, 6) + 6 x 14) x 1.4 = 599.76 us + 2**32 at 192 x 32/62 GB/s =
    # 43.3 ms; tree/Simple at 142.4 / 2 GB/s: 60.3 ms.
    ("A100-80GB", 4, 2**32, "ring", "Simple",
     (8.4 + 56 * 6.0 + 6 * 14.0) * 1.4 + 2**32 * 62 / (192 * 32 * 1e3)),
])
def test_auto_by_hand(gpu, nodes, size, algorithm, protocol, expected_us):
    result = simulate_collective(scenario(gpu, nodes, 8), AR, size)
    assert (result["algorithm"], result["protocol"]) == (algorithm, protocol)
    assert result["time_s"] * 1e6 == pytest.approx(expected_us, rel=1e-9)


# ---- overrides ------------------------------------------------------------------------------

@pytest.mark.parametrize("algorithm, protocol", [
    ("ring", "LL128"), ("tree", "LL"), ("auto", "LL128"), ("tree", "auto")])
def test_forced_algorithm_and_protocol_are_used(algorithm, protocol):
    s = scenario("A100-80GB", 4, 8, *forced(algorithm, protocol))
    result = simulate_collective(s, AR, 2**26)
    if algorithm != "auto":
        assert result["algorithm"] == algorithm
    if protocol != "auto":
        assert result["protocol"] == protocol


def test_tree_forced_leaves_reduce_scatter_to_the_tuner():
    """NCCL_ALGO=allreduce:tree: tree runs all_reduce only; reduce_scatter and all_gather keep
    the tuner's choice (the ring here)."""
    tree = scenario("A100-80GB", 4, 8, "cluster.collective_algorithm='tree'")
    auto = scenario("A100-80GB", 4, 8)
    for op in (RS, AG):
        got, want = simulate_collective(tree, op, 2**26), simulate_collective(auto, op, 2**26)
        assert got["algorithm"] == want["algorithm"] == "ring"
        assert (got["protocol"], got["time_s"]) == (want["protocol"], want["time_s"])
    # the engine too: ZeRO-2 (reduce_scatter, all_gather) as auto, DDP (all_reduce) on trees
    tiny = scenario("A100-80GB", 2, 4, "cluster.collective_algorithm='tree'", base=TINY)
    tiny_auto = scenario("A100-80GB", 2, 4, base=TINY)
    assert simulate(tiny, 2).algorithm == simulate(tiny_auto, 2).algorithm
    assert simulate(tiny, 2).algorithm.startswith("reduce_scatter ring/")
    assert simulate(tiny, 0).algorithm.startswith("all_reduce tree/")


def test_tree_forced_leaves_reduce_scatter_to_the_whole_tuner():
    """NCCL_ALGO=allreduce:tree leaves reduce_scatter to every algorithm the tuner has, not to
    the ring alone: on 16 A100 nodes of one GPU, with a_e = 7 us, a 18 kB reduce_scatter is
    PAT's (8 + log2(16) x 7 / 3.5 + 2.8 x 16 = 60.8 us of latency, tuning.cc lines 429-434, and
    0.75 x 24 GB/s) where the ring pays 15 network steps: 6.6 + 15 x 7 = 111.6 us at best."""
    s = scenario("A100-80GB", 16, 1, "cluster.collective_algorithm='tree'",
                 "cluster.inter_node_latency_us=7")
    result = simulate_collective(s, RS, 1.8e4)
    assert (result["algorithm"], result["protocol"]) == ("pat", "Simple")
    assert result["time_s"] * 1e6 == pytest.approx(8 + 4 * 2 + 2.8 * 16 + 1.8e4 / (18 * 1e3),
                                                   rel=1e-9)


@pytest.mark.parametrize("sets, fragments", [
    (["cluster.collective_protocol='ll128'"], ["cluster.collective_protocol", "'LL128'"]),
    (["cluster.gpu='A100-80GB'", "cluster.collective_algorithm='nvls'"],
     ["'nvls'", "NVLink SHARP"]),
    (["cluster.gpu='A100-80GB'", "cluster.nvlink_sharp=true"], ["cluster.nvlink_sharp", "A100"]),
    (["cluster.gpu='CPU'", "cluster.collective_protocol='LL'"], ["'LL'", "gloo"]),
    (["cluster.oversubscription=0.5"], ["cluster.oversubscription", "0.5"]),
    (["cluster.pcie_gen=7"], ["cluster.pcie_gen", "7"]),
    (["cluster.nics_per_node=0"], ["cluster.nics_per_node", "0"]),
    (["cluster.collective_algorithm='pat'"], ["'pat'", "one GPU per node"]),
    (["cluster.gpu='H100-80GB'", "cluster.nodes=1", "cluster.collective_algorithm='nvls'",
      "cluster.collective_protocol='LL'"], ["'nvls'", "'LL'", "Simple only"]),
])
def test_bad_values_are_one_line(sets, fragments):
    argv = ["collective", ZERO_PAPER, "--op", AR, "--size-bytes", "1e6"]
    for value in sets:
        argv += ["--set", value]
    assert_one_line_error(run_zerosim(*argv), *fragments)


# ---- the engine ------------------------------------------------------------------------------

def test_engine_modes_agree_on_a_uniform_nccl_cluster():
    s = scenario("A100-80GB", 2, 4, base=TINY)
    for stage in range(4):
        symmetric = simulate(s, stage, mode="symmetric")
        per_rank = simulate(s, stage, mode="per_rank")
        assert (symmetric.mode, per_rank.mode) == ("symmetric", "per_rank")
        assert symmetric.step_time_s == pytest.approx(per_rank.step_time_s, rel=1e-12)
        assert symmetric.algorithm == per_rank.algorithm
        assert "/" in symmetric.algorithm  # NCCL's algorithm/protocol per op


def test_engine_degraded_link_slows_an_nccl_all_reduce():
    uniform = simulate(scenario("A100-80GB", 2, 4, base=TINY), 0)
    degraded = simulate(scenario("A100-80GB", 2, 4, "variation.degraded_links=[3]",
                                 "variation.link_bandwidth_factor=0.5", base=TINY), 0)
    assert (uniform.mode, degraded.mode) == ("symmetric", "classes")
    assert degraded.algorithm == uniform.algorithm
    assert degraded.algorithm.startswith("all_reduce ")
    assert degraded.comm_time_s > uniform.comm_time_s
    assert degraded.step_time_s > uniform.step_time_s


def test_degraded_link_doubles_the_ring_transfer_time():
    """2 nodes x 4 A100: 4 NICs -> 4 channels at 24, busbw 96; all_reduce n = 8: latency
    (8.4 + 12 x 10 + 2 x 20) x 1.4 = 235.76 us, 7.68e8 B at 96 x 8/14 GB/s = 14000 us. Rank 3's
    links at half speed hold every ring step back: 28000 us."""
    extra = ("cluster.collective_algorithm='ring'", *INTEGER_LATENCIES)
    uniform = simulate_collective(scenario("A100-80GB", 2, 4, *extra), AR, 7.68e8)
    slow_rank_3 = ("variation.degraded_links=[3]", "variation.link_bandwidth_factor=0.5")
    degraded = simulate_collective(scenario("A100-80GB", 2, 4, *extra, *slow_rank_3), AR, 7.68e8)
    assert (uniform["protocol"], degraded["protocol"]) == ("Simple", "Simple")
    assert uniform["time_s"] * 1e6 == pytest.approx(235.76 + 14000, rel=1e-9)
    assert degraded["time_s"] * 1e6 == pytest.approx(235.76 + 28000, rel=1e-9)
    assert degraded["ranks_simulated"] == 8


# ---- fabric keys -----------------------------------------------------------------------------

def ring_4x8_us(*extra):
    s = scenario("A100-80GB", 4, 8, *forced("ring", "Simple"), *INTEGER_LATENCIES, *extra)
    return simulate_collective(s, AR, 1.92e9)


def test_off_rail_oversubscription_halves_the_inter_node_bandwidth():
    """Off-rail, 2:1 up to the spine: each GPU's 25 GB/s becomes 12.5, the NIC 12.5 (under PCIe's
    24): 8 channels at 12 (a rung of the ladder; 6 x 16 = 96 is no better), busbw 96 = 192 / 2.
    Latency (8.4 + 56 x 10 + 6 x 20) x 1.4 = 963.76 us either way."""
    latency = (8.4 + 56 * 10 + 6 * 20) * 1.4
    on_rail = ring_4x8_us()["time_s"] * 1e6
    off_rail = ring_4x8_us("cluster.rail_optimized=false", "cluster.oversubscription=2")
    assert on_rail == pytest.approx(latency + 1.92e9 * 62 / (192 * 32 * 1e3), rel=1e-9)
    assert off_rail["time_s"] * 1e6 == pytest.approx(latency + 1.92e9 * 62 / (96 * 32 * 1e3),
                                                     rel=1e-9)
    assert off_rail["time_s"] * 1e6 - latency == pytest.approx(2 * (on_rail - latency), rel=1e-9)
    assert off_rail["notes"] == []


def test_oversubscription_on_rails_changes_nothing_and_says_so():
    plain = ring_4x8_us()
    railed = ring_4x8_us("cluster.rail_optimized=true", "cluster.oversubscription=2")
    assert railed["time_s"] == plain["time_s"]
    assert plain["notes"] == []
    assert len(railed["notes"]) == 1 and "oversubscription" in railed["notes"][0]
    assert "rail" in railed["notes"][0]
    step = simulate(scenario("A100-80GB", 2, 4, "cluster.oversubscription=2", base=TINY), 0)
    assert any("oversubscription" in note for note in step.notes)
