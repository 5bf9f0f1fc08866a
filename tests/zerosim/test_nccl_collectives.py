"""NCCL's algorithms against their closed forms, one collective alone (simulate_collective).

Every expected time is written out here by hand from NCCL's formulas (src/graph/tuning.cc of
NVIDIA/nccl 2.30.7, lines 288-434 and 630-653; docs/research/nccl_tuning.md) with NCCL's table
constants typed in below: never with the package's own cost functions. Units: us, GB/s (1e9 B/s),
so S bytes at B GB/s take S / (B * 1e3) us. Latencies are the scenario's own per-hop figures
(a_i = 10 us inside a node, a_e = 20 us between nodes), which replace NCCL's per-hop table for
every algorithm and protocol, unless a test says otherwise.

Channels (k at b GB/s each) are NCCL's topology search (search.cc) done by hand on each preset:
  A100, one node: NVLink C = 300 * 20/25 = 240 (NCCL rates a 25 GB/s link at 20); speed 40 ->
    floor(240/40) = 6 channels = 240 = C, done; 40 >= 25 -> doubled: k = 12 at b = 20.
  H100, one node: C = 450 * 20.6/25 = 370.8; speed 60 -> 6 channels = 360; no lower rung beats
    it before 60 * 0.49; 60 >= 50 -> doubled: k = 12 at b = 30.
  A100, several nodes of 8: NIC = min(25, PCIe Gen4 24) = 24; 8 NICs x floor(24/24) = 8 at 24
    (192); 24 < 25 -> not doubled. 2 nodes of 4: 4 NICs -> 4 at 24 (96).
  H100, several nodes of 8: NIC = min(50, PCIe Gen5 48) = 48; 8 at 48 = 384 >= C, done;
    Hopper below 50 GB/s with more than 4 channels -> not doubled.
"""

import pytest

from zerosim.scenario.load import load_scenario
from zerosim.sim.collective_bench import simulate_collective

from tests.conftest import ZERO_PAPER

A_I, A_E = 10.0, 20.0  # us per hop, inside a node and between nodes
AR, RS, AG = "all_reduce", "reduce_scatter", "all_gather"
# tuning.cc lines 149-155: baseLatencies (us) of Ring and Tree by protocol.
RING_BASE = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
TREE_SIMPLE_BASE = 8.4
# tuning.cc lines 177-183: llMaxBws, one Ampere node 87.7; Intel CPU, 3+ nodes 20.4 GB/s.
LL_MAX_AMPERE_ONE_NODE = 87.7
# llMaxBws at 3+ nodes by the host's CPU vendor (tuning.cc lines 177-183, 269-272)
LL_MAX_3_NODES = {"intel": 20.4, "amd": 19.0}
# tuning.cc lines 184-211: perChMaxRingLL128Bw (Ampere 20) and perChMaxTreeBw (Ampere 23.6 on
# 2 nodes, 17.8 on 3+), perChMaxNVLSTreeBw (Hopper 57.7 on 2 nodes, 45.5 on 3+), GB/s.
RING_LL128_CAP, TREE_CAP = 20.0, {2: 23.6, 3: 17.8}
NVLS_TREE_CAP = {2: 57.7, 4: 45.5}
NVLS_EFFICIENCY_HOPPER = 0.85  # tuning.cc lines 138-144
PLATEAU = 1.4  # tuning.cc line 649: Ring Simple AllReduce latency x1.4 across nodes (SM >= 80)
# getNetOverhead (tuning.cc lines 228-233): 1 us Intel, 2 us AMD; x3 for Simple (lines 405-409)
NET_OVERHEAD = {"intel": {"LL": 1.0, "LL128": 1.0, "Simple": 3.0},
                "amd": {"LL": 2.0, "LL128": 2.0, "Simple": 6.0}}


def scenario(gpu, nodes, ppn, *extra, latencies=True):
    sets = [f"cluster.gpu='{gpu}'", f"cluster.nodes={nodes}", f"cluster.gpus_per_node={ppn}"]
    if latencies:
        sets += [f"cluster.intra_node_latency_us={A_I}", f"cluster.inter_node_latency_us={A_E}"]
    return load_scenario(ZERO_PAPER, [*sets, *extra])


def forced(algorithm, protocol="Simple"):
    return [f"cluster.collective_algorithm='{algorithm}'",
            f"cluster.collective_protocol='{protocol}'"]


def time_us(s, op, size_bytes, algorithm, protocol):
    result = simulate_collective(s, op, size_bytes)
    assert (result["algorithm"], result["protocol"]) == (algorithm, protocol)
    return result["time_s"] * 1e6


# ---- ring with channels ---------------------------------------------------------------------

@pytest.mark.parametrize("protocol, busbw", [
    ("Simple", 12 * 20.0),                                # k b = 240
    ("LL", min(LL_MAX_AMPERE_ONE_NODE, 12 * 20.0 / 2)),   # min(87.7, 120) = 87.7
    ("LL128", min(0.92 * 12 * 20.0, 12 * RING_LL128_CAP)),  # min(220.8, 240) = 220.8
])
def test_ring_one_a100_node(protocol, busbw):
    s = scenario("A100-80GB", 1, 8, *forced("ring", protocol))
    size = 1.92e9
    for op, nsteps in ((AR, 14), (RS, 7), (AG, 7)):  # 2(n-1), n-1 at n = 8
        latency = RING_BASE[protocol] + nsteps * A_I  # one node: no network step, no overhead
        algbw = busbw * 8 / nsteps
        expected = latency + size / (algbw * 1e3)
        assert time_us(s, op, size, "ring", protocol) == pytest.approx(expected, rel=1e-9)
    # Simple all_reduce: 8.4 + 140 = 148.4 us, then 1.92e9 B at 240 * 8/14 GB/s = 14000 us
    if protocol == "Simple":
        assert time_us(s, AR, size, "ring", "Simple") == pytest.approx(14148.4, rel=1e-9)


@pytest.mark.parametrize("host", ["intel", "amd"])  # the preset's DGX A100 has AMD EPYC
@pytest.mark.parametrize("protocol, busbw", [
    ("Simple", lambda host: 8 * 24.0),                           # 192
    ("LL", lambda host: min(LL_MAX_3_NODES[host], 8 * 24.0 / 2)),  # min(20.4 or 19.0, 96)
    ("LL128", lambda host: min(0.92 * 8 * 24.0, 8 * RING_LL128_CAP)),  # min(176.64, 160) = 160
])
def test_ring_across_four_a100_nodes(protocol, busbw, host):
    """32 ranks on 4 nodes, a_i = 0 so that the host's network overhead o (1 us per step on
    Intel, 2 on AMD, x3 for Simple) is each intra-node step's latency: max(a_i, o) = o."""
    s = scenario("A100-80GB", 4, 8, *forced("ring", protocol), "cluster.intra_node_latency_us=0",
                 f"cluster.host_cpu='{host}'")
    size, busbw = 1.92e9, busbw(host)
    for op, nsteps, net_steps in ((AR, 62, 6), (RS, 31, 3)):  # s_net = 2(m-1) or m-1, m = 4
        latency = (RING_BASE[protocol] + (nsteps - net_steps) * NET_OVERHEAD[host][protocol]
                   + net_steps * A_E)
        if protocol == "Simple" and op == AR:  # S / (k n) = 1.92e9 / 256 >= 64 B
            latency *= PLATEAU
        expected = latency + size / (busbw * 32 / nsteps * 1e3)
        assert time_us(s, op, size, "ring", protocol) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("nodes, expected", [
    # one node: k b = 12 x 30 = 360; 8.4 + 14 x 10 = 148.4 us + 1.92e9 x 14 / (360 x 8) / 1e3
    (1, 148.4 + 1.92e9 * 14 / (360 * 8 * 1e3)),
    # 2 nodes of 8: k b = 8 x 48 = 384; n = 16, nsteps = 30, s_net = 2;
    # (8.4 + 28 x max(10, 3) + 2 x 20) x 1.4 = 459.76 us
    (2, (8.4 + 28 * 10 + 2 * 20) * 1.4 + 1.92e9 * 30 / (384 * 16 * 1e3)),
])
def test_ring_h100_channels(nodes, expected):
    s = scenario("H100-80GB", nodes, 8, *forced("ring"))
    assert time_us(s, AR, 1.92e9, "ring", "Simple") == pytest.approx(expected, rel=1e-9)


# ---- double binary tree (all_reduce) --------------------------------------------------------

@pytest.mark.parametrize("nodes, log2_nodes", [(2, 1), (3, 1), (4, 2), (8, 3), (16, 4), (64, 6)])
def test_tree_all_reduce(nodes, log2_nodes):
    """A100, 8 GPUs per node: k = 8 channels between nodes at 24 (the ring's); inside nodes the
    tree search raises the speed 24 -> 28 -> 30 (8 x 30 = 240 fits the NVLinks, 8 x 48 does not;
    search.cc lines 1279-1282), which the tuner uses up to 2 nodes. busbw = min(0.92 k b, k
    capTree) = min(220.8, 188.8) = 188.8 on 2 nodes, min(176.64, 142.4) = 142.4 on 3 or more;
    algbw = busbw / 2. 2**30 B is past the tree correction table (c = 1)."""
    s = scenario("A100-80GB", nodes, 8, *forced("tree"))
    speed = 30 if nodes <= 2 else 24
    busbw = min(0.92 * 8 * speed, 8 * TREE_CAP[min(nodes, 3)])
    latency = TREE_SIMPLE_BASE + 2 * ((8 - 1) * A_I + log2_nodes * A_E)
    expected = latency + 2**30 / (busbw / 2 * 1e3)
    assert time_us(s, AR, 2**30, "tree", "Simple") == pytest.approx(expected, rel=1e-9)


def test_tree_ll128_on_one_node():
    """One A100 node, tree LL128: the ring's 12 channels at the fastest rung they fit the
    NVLinks at (12 x 20 = 240 <= 240; 12 x 30 does not), 20 GB/s. busbw = min(0.92 x 12 x 20,
    12 x capTree 24) = 220.8, then LL128 on one node x 7/9 (tuning.cc line 334: 120/128 across
    nodes only), capped at 12 x capTreeLL128 20: 171.73; algbw = busbw / 2. Latency: LL128's
    base 14.0 + 2 x 7 a_i. 512 MiB: no tree correction."""
    s = scenario("A100-80GB", 1, 8, *forced("tree", "LL128"))
    busbw = min(0.92 * 12 * 20 * 7 / 9, 12 * 20.0)
    expected = 14.0 + 2 * 7 * A_I + 2**29 / (busbw / 2 * 1e3)
    assert time_us(s, AR, 2**29, "tree", "LL128") == pytest.approx(expected, rel=1e-9)


def test_tree_correction_for_a_1_mib_message():
    """1 MiB: k = floor(log2(2**20 / 64)) = 14; treeCorrectionFactor[Simple][14] = 0.5
    (tuning.cc lines 623-627): the tree's bandwidth is halved."""
    s = scenario("A100-80GB", 2, 8, *forced("tree"))
    expected = (8.4 + 2 * (7 * 10 + 1 * 20)) + 2**20 / (188.8 / 2 * 0.5 * 1e3)  # 188.4 + 22.21
    assert time_us(s, AR, 2**20, "tree", "Simple") == pytest.approx(expected, rel=1e-9)


def test_no_tree_correction_at_512_mib():
    s = scenario("A100-80GB", 2, 8, *forced("tree"))
    """512 MiB: k = 23, past the last size NCCL corrects (tuning.cc line 640: logSize < 23)."""
    expected = 188.4 + 2**29 / (188.8 / 2 * 1e3)  # c = 1 (busbw min(0.92 x 8 x 30, 8 x 23.6))
    assert time_us(s, AR, 2**29, "tree", "Simple") == pytest.approx(expected, rel=1e-9)


# ---- NVLS and NVLSTree (H100) ---------------------------------------------------------------

def test_nvls_on_one_h100_node():
    """8 heads: the fastest intra rung with 8 x s <= 370.8 is 40 (8 x 50 = 400 > 370.8); the
    speed between heads is raised 40 -> 50 -> 60 (below twice 40). All_reduce per head:
    min(40 x 0.85 x 7/8 x 2, 60) = 59.5, busbw 476, algbw 476 x 8/14 = 272 GB/s; latency: NCCL's
    NVLink NVLS hop, 25 us (tuning.cc line 160), or the scenario's a_i."""
    size = 2.72e9  # 10000 us at 272 GB/s
    s = scenario("H100-80GB", 1, 8, *forced("nvls"), latencies=False)
    assert time_us(s, AR, size, "nvls", "Simple") == pytest.approx(25 + 10000, rel=1e-9)
    s = scenario("H100-80GB", 1, 8, *forced("nvls"))
    assert time_us(s, AR, size, "nvls", "Simple") == pytest.approx(A_I + 10000, rel=1e-9)
    # reduce_scatter / all_gather per head: min(40 x 0.85 x 7/8 x 7/8, 60) = 26.03125;
    # busbw = 208.25 = algbw (NCCL leaves non-ring RS/AG bandwidth as is)
    busbw = 8 * 40 * NVLS_EFFICIENCY_HOPPER * 7 / 8 * 7 / 8
    for op in (RS, AG):
        expected = A_I + size / (busbw * 1e3)
        assert time_us(s, op, size, "nvls", "Simple") == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("nodes, log2_nodes", [(2, 1), (4, 2)])
def test_nvls_tree_across_h100_nodes(nodes, log2_nodes):
    """8 heads at 45 (8 x 48 = 384 > 370.8; 45 <= NIC 48), between heads 48 (the NIC caps the
    raise). Per head: min(45 x 0.85 x 7/8 x 2 = 66.94, 48 x (2 on 2 nodes), capNVLSTree) =
    57.7 on 2 nodes, 45.5 on 4; algbw = 8 x per head x n / (2(n-1)); latency = base 0 + a_i
    + 2 log2(m) a_e (NCCL's tables: 25 us + 2 log2(m) x 20.9 us)."""
    n = 8 * nodes
    algbw = 8 * NVLS_TREE_CAP[nodes] * n / (2 * (n - 1))
    size = 2**30
    s = scenario("H100-80GB", nodes, 8, *forced("nvls_tree"))
    expected = A_I + 2 * log2_nodes * A_E + size / (algbw * 1e3)
    assert time_us(s, AR, size, "nvls_tree", "Simple") == pytest.approx(expected, rel=1e-9)
    s = scenario("H100-80GB", nodes, 8, *forced("nvls_tree"), latencies=False)
    expected = 25 + 2 * log2_nodes * 20.9 + size / (algbw * 1e3)
    assert time_us(s, AR, size, "nvls_tree", "Simple") == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("nodes, log2_nodes", [(4, 2), (8, 3)])
def test_nvls_tree_between_nodes_on_a_slow_network(nodes, log2_nodes):
    """H100 nodes of 8 with 8 NICs of 5 GB/s (5 per GPU): 8 heads at the fastest rung the NIC
    carries, 3 GB/s (6 > 5), and the raise between heads stops there (its next rung, 6, is above
    the NIC). Per head (tuning.cc lines 307-323): min(3 x 0.85 x 7/8 x 2 = 4.4625, 3 x 1 (the
    x2 is for 2 nodes only), capNVLSTree 45.5) = 3: the network binds, not NVLink nor the cap.
    busbw = 8 x 3 = 24, algbw x n / (2(n-1)); latency a_i + 2 log2(m) a_e."""
    n = 8 * nodes
    s = scenario("H100-80GB", nodes, 8, *forced("nvls_tree"), "cluster.inter_node_bandwidth_GBps=5")
    expected = A_I + 2 * log2_nodes * A_E + 1e9 / (8 * 3.0 * n / (2 * (n - 1)) * 1e3)
    assert time_us(s, AR, 1e9, "nvls_tree", "Simple") == pytest.approx(expected, rel=1e-9)


# ---- PAT (one GPU per node) -----------------------------------------------------------------

@pytest.mark.parametrize("nodes, log2_nodes", [(4, 2), (16, 4)])
def test_pat_one_gpu_per_node(nodes, log2_nodes):
    """A100, 1 GPU and 1 NIC per node: 1 channel at 24 (12 x 2 = 24 is no better); busbw =
    0.75 x 24 = 18 = algbw; latency = 8 + log2(m) x a_e / 3.5 + 2.8 x n (tuning.cc 429-434),
    a_e = 7 us so that a_e / 3.5 = 2."""
    s = scenario("A100-80GB", nodes, 1, *forced("pat"), "cluster.inter_node_latency_us=7")
    size = 1.8e7  # 1000 us at 18 GB/s
    for op in (RS, AG):
        expected = 8 + log2_nodes * 2 + 2.8 * nodes + 1000
        assert time_us(s, op, size, "pat", "Simple") == pytest.approx(expected, rel=1e-9)


# ---- pipelined hierarchical ring (forced) ---------------------------------------------------

@pytest.mark.parametrize("extra, transfer_us", [
    # NIC 24: B_e = 24 x 8 NICs / 8 GPUs = 24; inter 2 x 3/4 x (S/8) / 24 = 10000 us beats
    # intra 2 x 7/8 x S / 240 = 9333.3 us
    ((), 2 * 3 / 4 * (1.28e9 / 8) / (24 * 1e3)),
    # PCIe Gen5 and 50 GB/s NICs: B_e = 48, inter 5000 us; intra 9333.3 us is the longer
    (("cluster.pcie_gen=5", "cluster.inter_node_bandwidth_GBps=50"),
     2 * 7 / 8 * 1.28e9 / (240 * 1e3)),
])
def test_pipelined_hierarchical_all_reduce(extra, transfer_us):
    """A100, 4 nodes of 8: L_intra = one-node ring, 8.4 + 14 x 10 = 148.4 us; L_inter = ring
    over 4 nodes of one rank, s_net = 6 steps: (8.4 + 6 x 20) x 1.4 (plateau) = 179.76 us;
    then both tiers' transfers overlap: the longer one counts."""
    s = scenario("A100-80GB", 4, 8, *forced("hierarchical"), *extra)
    expected = 148.4 + 128.4 * 1.4 + transfer_us
    assert time_us(s, AR, 1.28e9, "hierarchical", "Simple") == pytest.approx(expected, rel=1e-9)


def test_pipelined_hierarchical_pays_the_protocol_between_nodes():
    """LL128 on the network tier: the ring between 4 nodes of one rank (8 channels at 24) has
    bus bandwidth min(0.92 x 192, 8 x 20) = 160 against Simple's 192, so B_e = 24 x 160/192 = 20:
    inter 2 x 3/4 x (S/8) / 20 = 12000 us. Latencies: LL128 base 14 on both tiers, one node
    14 + 14 x 10 = 154 us, between nodes 14 + 6 x 20 = 134 us (no plateau: it is Simple's)."""
    s = scenario("A100-80GB", 4, 8, *forced("hierarchical", "LL128"))
    expected = 154 + 134 + 2 * 3 / 4 * (1.28e9 / 8) / (20 * 1e3)
    assert time_us(s, AR, 1.28e9, "hierarchical", "LL128") == pytest.approx(expected, rel=1e-9)


# ---- the corners of NCCL's search (search.cc) ------------------------------------------------

def test_nvls_heads_charge_their_own_gpu_twice():
    """6 H100s: h heads at s need (h + 1) s of a GPU's 370.8 GB/s (search.cc lines 416, 424):
    7 x 60 = 420 does not fit, 7 x 50 = 350 does; between heads 50 -> 60. reduce_scatter per head
    min(50 x 0.85 x 5/6 x 5/6, 60) = 29.51; busbw = algbw = 6 x that = 177.08 GB/s."""
    s = scenario("H100-80GB", 1, 6, *forced("nvls"))
    busbw = 6 * 50 * NVLS_EFFICIENCY_HOPPER * 5 / 6 * 5 / 6
    assert time_us(s, RS, 1e9, "nvls", "Simple") == pytest.approx(A_I + 1e9 / (busbw * 1e3),
                                                                   rel=1e-9)


def test_nvls_tree_has_one_head_per_nic():
    """2 H100 nodes with 4 NICs of 50 GB/s (25 per GPU): 4 heads (search.cc lines 754-772) at 48
    (the PCIe Gen5 cap; 5 x 48 = 240 fits the NVLinks). Per head min(48 x 0.85 x 3/4 x 2, 48 x 2,
    57.7) = 57.7: busbw 4 x 57.7 = 230.8, algbw x 16/30; latency a_i + 2 x 1 x a_e."""
    s = scenario("H100-80GB", 2, 8, *forced("nvls_tree"), "cluster.nics_per_node=4",
                 "cluster.inter_node_bandwidth_GBps=25")
    expected = A_I + 2 * A_E + 1e9 / (4 * 57.7 * 16 / 30 * 1e3)
    assert time_us(s, AR, 1e9, "nvls_tree", "Simple") == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("size, plateau", [(8192, 1.0), (16384, PLATEAU)])
def test_ring_plateau_counts_the_channels_nccl_sets_up(size, plateau):
    """2 A100 nodes: the ring graph's 8 channels become 16 (connect.cc line 460); the x1.4 starts
    once S / (16 x 16 ranks) >= 64, at 16 KiB (8 KiB would pass with the graph's 8).
    Latency (8.4 + 28 x max(10, 6) + 2 x 20) = 328.4 us; busbw 192, algbw 192 x 16/30."""
    s = scenario("A100-80GB", 2, 8, *forced("ring"))
    expected = 328.4 * plateau + size / (192 * 16 / 30 * 1e3)
    assert time_us(s, AR, size, "ring", "Simple") == pytest.approx(expected, rel=1e-9)


def test_ring_broadcast_reads_the_ring_row_at_one_gpu_per_node():
    """4 A100 nodes of one GPU, NCCL's tables: broadcast latency = Ring LL base 6.6 + the NET
    Ring LL hop 2.7 (tuning.cc line 395; not the Tree row's 5.0 the other ops read at one GPU
    per node). One NIC (24 GB/s through PCIe Gen4): 1 channel at 24; LL: min(19.0, 24/2) = 12
    GB/s, algbw = busbw for broadcast."""
    s = scenario("A100-80GB", 4, 1, *forced("ring", "LL"), latencies=False)
    expected = 6.6 + 2.7 + 1.2e6 / (12 * 1e3)
    assert time_us(s, "broadcast", 1.2e6, "ring", "LL") == pytest.approx(expected, rel=1e-9)
