"""Ring collectives against their closed forms (Thakur et al. 2005; nccl-tests PERFORMANCE.md),
with integer-friendly inputs: per-step latency α = 1 s, link bandwidth B = 1 byte/s. Expected
numbers are derived here by hand, never with the program's own formulas (busbw_factor)."""

import pytest
import simpy

from zerosim.sim.collective_bench import simulate_collective
from zerosim.sim.collectives.ring import Group, StepRecord, ring_phases, run_phases
from zerosim.scenario.load import load_scenario
from zerosim.sim.network import Cluster, Link

from tests.conftest import SCENARIOS, ZERO_PAPER, assert_one_line_error, run_zerosim

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
ONE_SECOND = ["cluster.intra_node_latency_us=1e6", "cluster.intra_node_bandwidth_GBps=1e-9",
              "cluster.inter_node_latency_us=1e6", "cluster.inter_node_bandwidth_GBps=1e-9"]
WALKS = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1, "broadcast": 2, "reduce": 2}
GB = 1e9


def nccl_tests_busbw(op, n, algbw):
    """nccl-tests PERFORMANCE.md, written out: busbw = algbw * 2(n-1)/n for all_reduce,
    * (n-1)/n for reduce_scatter and all_gather, * 1 for broadcast and reduce."""
    factor = {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n,
              "all_gather": (n - 1) / n, "broadcast": 1, "reduce": 1}[op]
    return algbw * factor


def scenario(nodes=1, gpus=4, extra=()):
    return load_scenario(TINY, [f"cluster.nodes={nodes}", f"cluster.gpus_per_node={gpus}",
                                *ONE_SECOND, *extra])


@pytest.mark.parametrize("n", [2, 3, 4, 8, 64])
@pytest.mark.parametrize("op", sorted(WALKS))
@pytest.mark.parametrize("every_rank", [False, True])
def test_ring_matches_closed_form(n, op, every_rank):
    s = scenario(gpus=n)
    size = 5 * n  # 5 bytes per chunk: one step takes α + S/(nB) = 1 + 5 = 6 s
    result = simulate_collective(s, op, size, mode="per_rank" if every_rank else "auto")
    walks = WALKS[op]
    time_s = 6 * walks * (n - 1)  # walks x (n - 1) steps of 6 s
    assert result["time_s"] == time_s
    assert result["bytes_sent_per_rank"] == 5 * walks * (n - 1)
    assert result["ranks_simulated"] == (n if every_rank else 1)
    assert result["algbw_GBps"] == pytest.approx(size / time_s / GB, rel=1e-12)
    assert result["busbw_GBps"] == pytest.approx(nccl_tests_busbw(op, n, size / time_s) / GB,
                                                 rel=1e-12)
    if op in ("all_reduce", "reduce_scatter", "all_gather"):
        # busbw is what each link carried per second: a 5-byte chunk per 6 s step, whatever n
        assert result["busbw_GBps"] == pytest.approx(5 / 6 / GB, rel=1e-12)


def test_exact_event_log_of_a_4_rank_all_reduce():
    s = scenario()
    log = []
    simulate_collective(s, "all_reduce", 8, log=log, mode="per_rank")  # chunks of 2 bytes: each step 1 + 2 = 3 s
    expected = [StepRecord(rank, walk, step, "intra", 2.0, 3.0 * k, 3.0 * (k + 1))
                for k, (walk, step) in enumerate([("reduce_scatter", 0), ("reduce_scatter", 1),
                                                  ("reduce_scatter", 2), ("all_gather", 0),
                                                  ("all_gather", 1), ("all_gather", 2)])
                for rank in range(4)]
    assert log == expected


def test_busbw_equals_link_bandwidth_without_latency():
    """nccl-tests' point of busbw: with α = 0 it is the link bandwidth, whatever n and op."""
    s = load_scenario(TINY, ["cluster.gpus_per_node=8", "cluster.intra_node_latency_us=0",
                             "cluster.intra_node_bandwidth_GBps=100"])
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        assert simulate_collective(s, op, 2**30)["busbw_GBps"] == pytest.approx(100, rel=1e-12)


def test_flat_ring_across_nodes_runs_at_its_slowest_link():
    s = load_scenario(TINY, ["cluster.nodes=2", "cluster.gpus_per_node=4",
                             "cluster.collective_algorithm='ring'",
                             "cluster.intra_node_latency_us=0", "cluster.intra_node_bandwidth_GBps=1e-9",
                             "cluster.inter_node_latency_us=1e6", "cluster.inter_node_bandwidth_GBps=0.25e-9"])
    result = simulate_collective(s, "all_reduce", 8 * 4)  # chunk 4 bytes: inter step 1 + 16 s
    assert result["algorithm"] == "ring"
    assert result["time_s"] == 2 * 7 * (1 + 4 / 0.25)
    assert result["ranks_simulated"] == 2  # rank 0 (intra link) and rank 3 (to the next node)


def test_hierarchical_all_reduce_closed_form_and_flat_ring_bytes():
    g, m = 4, 3
    n = g * m
    s = load_scenario(TINY, [f"cluster.nodes={m}", f"cluster.gpus_per_node={g}",
                             "cluster.intra_node_latency_us=1e6", "cluster.intra_node_bandwidth_GBps=2e-9",
                             "cluster.inter_node_latency_us=3e6", "cluster.inter_node_bandwidth_GBps=1e-9"])
    size = 6 * n
    result = simulate_collective(s, "all_reduce", size)
    assert result["algorithm"] == "hierarchical"
    intra = 2 * (g - 1) * (1 + size / g / 2)
    inter = 2 * (m - 1) * (3 + size / n / 1)
    assert result["time_s"] == intra + inter
    assert result["bytes_sent_per_rank"] == 2 * (n - 1) * size / n  # as a flat ring


@pytest.mark.parametrize("op, walks", [("reduce_scatter", ("intra", "inter")),
                                       ("all_gather", ("inter", "intra"))])
def test_hierarchical_reduce_scatter_and_all_gather_closed_form(op, walks):
    g, m = 4, 3
    s = load_scenario(TINY, [f"cluster.nodes={m}", f"cluster.gpus_per_node={g}",
                             "cluster.intra_node_latency_us=1e6", "cluster.intra_node_bandwidth_GBps=2e-9",
                             "cluster.inter_node_latency_us=3e6", "cluster.inter_node_bandwidth_GBps=1e-9"])
    size = 6 * g * m
    result = simulate_collective(s, op, size)
    assert result["time_s"] == (g - 1) * (1 + size / g / 2) + (m - 1) * (3 + size / (g * m))
    assert result["bytes_sent_per_rank"] == (g * m - 1) * size / (g * m)


@pytest.mark.parametrize("algorithm", ["ring", "hierarchical"])
def test_a_degraded_link_paces_the_ring_and_every_rank_is_simulated(algorithm):
    """Rank 5's links at half bandwidth: each walk runs at the slowest link of its ring."""
    g, m = 4, 2
    n = g * m
    s = load_scenario(TINY, [f"cluster.nodes={m}", f"cluster.gpus_per_node={g}", *ONE_SECOND,
                             f"cluster.collective_algorithm='{algorithm}'",
                             "variation.degraded_links=[5]", "variation.link_bandwidth_factor=0.5"])
    size = 4 * n
    result = simulate_collective(s, "all_reduce", size)
    assert result["ranks_simulated"] == n
    if algorithm == "ring":
        assert result["time_s"] == 2 * (n - 1) * (1 + size / n / 0.5)
    else:
        intra = 2 * (g - 1) * (1 + size / g / 0.5)
        inter = 2 * (m - 1) * (1 + size / n / 0.5)
        assert result["time_s"] == intra + inter


@pytest.mark.parametrize("n", [2, 4, 8])
def test_phase_granularity_equals_step_granularity(n):
    """What the engine uses (one transfer per walk) against chunk by chunk, uncontended."""
    s = scenario(gpus=n)
    group = Group(n, n)
    times = {}
    for granularity in ("step", "phase"):
        env = simpy.Environment()
        cluster = Cluster(env, s)
        env.process(run_phases(env, cluster, group, ring_phases("all_reduce", 3 * n, group),
                               list(range(n)), granularity))
        env.run()
        times[granularity] = env.now
    assert times["step"] == times["phase"] == 2 * (n - 1) * 4


def test_transfers_on_one_link_share_its_bandwidth():
    env = simpy.Environment()
    link = Link(env, "l", bandwidth_bytes_per_s=1.0, latency_s=0.0)
    finished = {}

    def send(name, start_s, size):
        yield env.timeout(start_s)
        yield link.transfer(size)
        finished[name] = env.now

    env.process(send("a", 0, 10))
    env.process(send("b", 5, 10))
    env.process(send("c", 30, 4))
    env.run()
    # a alone for 5 s (5 bytes), then a and b at 0.5 byte/s each: a ends at 15, b alone again
    assert finished == {"a": 15.0, "b": 20.0, "c": 34.0}


def test_collective_cli_json():
    one_second = [arg for key in ONE_SECOND for arg in ("--set", key)]
    result = run_zerosim("collective", TINY, "--op", "reduce_scatter", "--size-bytes", "4e6",
                         *one_second, "--json")
    assert result.code == 0, result.stderr
    data = result.json
    # 4 ranks, chunks of 1e6 bytes: 3 steps of 1 + 1e6 s; algbw = S / t; busbw = algbw x 3/4
    assert data["time_s"] == 3 * (1 + 1e6)
    assert data["algbw_GBps"] == pytest.approx(4e6 / 3_000_003 / GB, rel=1e-12)
    assert data["busbw_GBps"] == pytest.approx(3e6 / 3_000_003 / GB, rel=1e-12)
    assert data["bytes_sent_per_rank"] == 3 * 1e6
    assert data["ranks"] == 4


@pytest.mark.parametrize("argv, fragment", [
    (["--op", "all_reduce", "--size-bytes", "0"], "--size-bytes"),
    (["--op", "all_reduce", "--size-bytes", "lots"], "--size-bytes"),
    (["--op", "all_reduce", "--size-bytes", "inf"], "--size-bytes"),
    (["--op", "all_reduce", "--size-bytes", "8", "--set", "cluster.gpus_per_node=1"], "single rank"),
    (["--op", "alltoall", "--size-bytes", "8"], "--op"),
    (["--op", "all_reduce", "--size-bytes", "8", "--ranks", "5"], "--ranks 5"),
    (["--op", "all_reduce", "--size-bytes", "8", "--ranks", "1"], "--ranks 1"),
    (["--op", "all_reduce", "--size-bytes", "8", "--set", "cluster.collective_algorithm=hierarchical"],
     "hierarchical"),
])
def test_collective_bad_input(argv, fragment):
    assert_one_line_error(run_zerosim("collective", TINY, *argv), fragment)


def test_stragglers_and_jitter_do_not_touch_a_collective():
    uniform = simulate_collective(scenario(gpus=8), "all_reduce", 80)
    varied = simulate_collective(scenario(gpus=8, extra=["variation.slow_ranks=[3]",
                                                         "variation.jitter_pct=10"]), "all_reduce", 80)
    assert varied == uniform and varied["ranks_simulated"] == 1


def test_collective_shows_its_ring_steps_once_it_runs_long(monkeypatch):
    """Past the progress delay, `collective` counts ring steps on stderr: 2(n-1) for a ring
    all_reduce on n ranks (nccl-tests' count of steps), and stdout stays the same."""
    from zerosim.cli import progress

    argv = ("collective", ZERO_PAPER, "--op", "all_reduce", "--size-bytes", "1e6", "--ranks", "16",
            "--set", "cluster.collective_algorithm=ring", "--mode", "per_rank", "--json")
    quiet = run_zerosim(*argv)
    monkeypatch.setattr(progress, "PROGRESS_AFTER_S", 0.0)
    shown = run_zerosim(*argv)
    assert quiet.code == shown.code == 0 and quiet.stderr == "" and shown.stdout == quiet.stdout
    lines = shown.stderr.splitlines()
    assert lines and all(line.startswith("zerosim collective: all_reduce [") for line in lines)
    assert "] 30/30 ring steps" in lines[-1]


def test_size_bytes_past_2_53_is_refused_not_rounded():
    """9007199254740993 through a float was 2**53 and accepted; read as an integer it is over."""
    argv = ("collective", ZERO_PAPER, "--op", "all_gather", "--json", "--size-bytes")
    assert run_zerosim(*argv, str(2**53)).json["size_bytes"] == 2**53
    assert_one_line_error(run_zerosim(*argv, str(2**53 + 1)), "--size-bytes", "1..2**53")


def test_sweep_sizes_follow_nccl_tests_b_e_f():
    """nccl-tests' -b 8 -e 8G -f 2: 8, 16, ... 8 GiB (K, M, G are powers of 1024 there)."""
    from zerosim.cli.common import size_sweep

    assert size_sweep("8:8G:2") == [8 * 2**k for k in range(31)]
    assert size_sweep("1K:1M:4") == [2**10, 2**12, 2**14, 2**16, 2**18, 2**20]
    assert size_sweep("1e3:1e4:3") == [1000, 3000, 9000]
    assert size_sweep("1:9007199254740992:2")[-1] == 2**53


@pytest.mark.parametrize("text,fragment", [
    ("8:8G", "MIN:MAX:FACTOR"), ("8:4:2", "MIN is larger than MAX"), ("8:8G:1", "FACTOR"),
    ("8:8G:x", "FACTOR"), ("8X:8G:2", "not a number of bytes"), ("8:9000000G:2", "1..2**53"),
])
def test_bad_sweeps_are_one_line(text, fragment):
    assert_one_line_error(run_zerosim("collective", ZERO_PAPER, "--op", "all_reduce", "--sweep",
                                      text), "--sweep", fragment)


def test_sweep_table_rows_are_the_single_size_results():
    """Each size's row is what `--size-bytes` of that size gives; count = bytes / 4 (float),
    redop sum for the ops that reduce, none for all_gather."""
    for op, redop in (("all_reduce", "sum"), ("all_gather", "none")):
        swept = run_zerosim("collective", ZERO_PAPER, "--op", op, "--sweep", "1M:64M:8", "--json")
        sizes = [2**20, 2**23, 2**26]
        assert [r["size_bytes"] for r in swept.json] == sizes
        for row, size in zip(swept.json, sizes):
            alone = run_zerosim("collective", ZERO_PAPER, "--op", op, "--size-bytes", str(size),
                                "--json").json
            assert row == alone
        table = run_zerosim("collective", ZERO_PAPER, "--op", op, "--sweep", "1M:64M:8").stdout
        lines = table.splitlines()
        assert lines[1].split()[:4] == ["size", "(B)", "count", "type"]
        for line, row in zip(lines[2:], swept.json):
            cells = line.split()
            assert cells[:4] == [f"{row['size_bytes']:,}", f"{row['size_bytes'] // 4:,}", "float",
                                 redop]
            assert float(cells[4]) == pytest.approx(row["time_s"] * 1e6, abs=0.006)
            assert float(cells[6]) == pytest.approx(row["busbw_GBps"], abs=0.006)
            assert cells[7] == row["algorithm"]
