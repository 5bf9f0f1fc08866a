"""Independent oracles for the times and bytes the ZeRO family adds: hybrid sharding's and
ZeRO++'s groups, offload with gradient accumulation on hybrid groups, NVMe's swap, hpZ's
secondary partition. Every expected value is a hand count written out here, on a cluster whose
numbers make it one: gloo's α-β ring (Thakur, Rabenseifner and Gropp 2005, §4: a walk of k - 1
steps of α + S / (k B) each, paced by the slowest link it crosses), links of 100 GB/s and 1 ms
inside a node and 10 GB/s and 10 ms between nodes, compute at 1 TFLOP/s, a host link of 10 GB/s
each way, one CPU core stepping 10^9 Adam elements per second, NVMe drives at 4 GB/s read and
2 GB/s write per node. Nothing is taken from the module under test."""

import pytest

from zerosim.scenario.load import load_scenario
from zerosim.sim.engine import simulate

PSI = 10**9  # parameters, in one unit per layer
INTRA_BPS, INTRA_S = 100e9, 1e-3
INTER_BPS, INTER_S = 10e9, 10e-3
HBM_BPS = 900e9  # V100-SXM2 data sheet: 900 GB/s HBM2
FORWARD_S, BACKWARD_S = 0.2, 0.4  # 2 Ψ x 100 tokens and twice that, at 10^12 FLOP/s
HOST_BPS, ADAM_PER_S, NVME_READ_BPS, NVME_WRITE_BPS = 10e9, 1e9, 4e9, 2e9
# Mixed-precision Adam over HBM per parameter: the fp16 gradient (2), the fp32 master read and
# written (8), m and v read and written (16), the fp16 weight written (2).
ADAM_HBM_BYTES = 28
# ZeRO++ (DeepSpeed's CUDAQuantizer, partition_parameters.py; all_to_all_quant_reduce,
# coalesced_collectives.py): one fp32 scale per group of at most 8000 elements.
QWZ = 1 + 4 / 8000  # INT8 weights
QGZ = 0.5 + 4 / 8000  # INT4 gradients


def ring_s(k: int, size: float, crosses_nodes: bool, walks: int = 1,
           inter_bps: float = INTER_BPS) -> float:
    """Thakur et al.'s ring: `walks` walks (2 for all-reduce) of k - 1 steps of size / k."""
    latency, bandwidth = (INTER_S, inter_bps) if crosses_nodes else (INTRA_S, INTRA_BPS)
    return walks * (k - 1) * (latency + size / (k * bandwidth))


GLOO = """collective_library = "gloo"
collective_algorithm = "ring"
intra_node_bandwidth_GBps = 100
intra_node_latency_us = 1000
inter_node_latency_us = 10000"""


def case(tmp_path, nodes: int, gpus: int, training: str, layers: int = 1,
         inter_GBps: float = 10, gpu: str = "V100-32GB", links: str = GLOO):
    path = tmp_path / "family.toml"
    path.write_text(f"""
[model]
params = {PSI}
layers = {layers}
[cluster]
nodes = {nodes}
gpus_per_node = {gpus}
gpu = "{gpu}"
peak_tflops = 1
compute_efficiency = 1.0
inter_node_bandwidth_GBps = {inter_GBps}
{links}
host_link_GBps = 10
cpu_cores_per_gpu = 1
cpu_adam_Melements_per_s_per_core = 1000
nvme_read_GBps = 4
nvme_write_GBps = 2
[training]
precision = "fp16"
seq_len = 100
reduce_bucket_MiB = 4096
allgather_bucket_MiB = 4096
{training}
""")
    return load_scenario(path)


def durations(result) -> list[tuple[str, str, float]]:
    """(event name, phase, seconds) of the critical rank's step, in order."""
    return [(e["name"], e["phase"], e["end_s"] - e["start_s"])
            for e in result.ranks[0].state.events]


def assert_timeline(result, expected: list[tuple[str, str, float]]) -> None:
    got = durations(result)
    assert [(n, p) for n, p, _ in got] == [(n, p) for n, p, _ in expected]
    for (name, _, seconds), (_, _, want) in zip(got, expected):
        assert seconds == pytest.approx(want, rel=1e-9), name


# ---- hybrid sharding: each layout's groups in time ---------------------------------------------

@pytest.mark.parametrize("g, shard_crosses, replicas", [
    (4, False, 8),   # half a node shards; the 8 replicas of a shard sit 2 per node
    (8, False, 4),   # a node shards; one replica per node
    (16, True, 2),   # two nodes shard: the shard group's ring crosses between them
])
def test_hybrid_stage_2_step_by_hand(tmp_path, g, shard_crosses, replicas):
    """32 ranks on 4 nodes of 8, one bucket: backward, the shard group's reduce-scatter, the
    replica group's all-reduce of the 2Ψ/g shard (every replica ring crosses nodes), Adam on
    Ψ/g, the shard group's all-gather: one after the other."""
    s = case(tmp_path, 4, 8, f"zero_stage = 2\nshard_group = {g}")
    result = simulate(s, 2)
    reduce = ring_s(g, 2 * PSI, shard_crosses)
    replica = ring_s(replicas, 2 * PSI / g, True, walks=2)
    adam = ADAM_HBM_BYTES * PSI / g / HBM_BPS
    assert_timeline(result, [
        ("forward", "forward", FORWARD_S), ("backward", "backward", BACKWARD_S),
        ("gradient bucket", "backward", reduce), ("shard all-reduce", "backward", replica),
        ("optimizer", "step", adam), ("parameter all-gather", "step", reduce)])
    assert result.step_time_s == pytest.approx(
        FORWARD_S + BACKWARD_S + 2 * reduce + replica + adam, rel=1e-12)


def test_hybrid_stage_3_replica_all_reduce_has_its_own_stream(tmp_path):
    """FSDP2's HSDP (all_reduce_stream): layer 1's replica all-reduce (0.27 s over a 1 GB/s
    network) outlasts layer 0's backward (0.2 s); layer 0's reduce-scatter starts when its
    backward ends, not behind that all-reduce. 2 nodes of 4, shard group 4, two layers of Ψ/2."""
    s = case(tmp_path, 2, 4, "zero_stage = 3\nshard_group = 4\nprefetch_layers = 0", layers=2,
             inter_GBps=1)
    unit = 2 * PSI / 2  # bytes of a layer in fp16
    gather = ring_s(4, unit, False)  # 3 x (1 ms + 2.5 ms) = 10.5 ms
    replica = ring_s(2, unit / 4, True, walks=2, inter_bps=1e9)  # 2 x (10 + 125 ms)
    # Layer 1's reduce-scatter and layer 0's backward gather share the node's links: each pays
    # its 3 ms of latency, then both 7.5e8-byte transfers run at half the link's 100 GB/s.
    shared = 3 * INTRA_S + 2 * 0.75 * unit / INTRA_BPS
    t = 2 * (gather + FORWARD_S / 2) + gather + BACKWARD_S / 2  # end of layer 1's backward
    assert t == pytest.approx(0.4315)
    backward0_end = t + shared + BACKWARD_S / 2
    replica1_end = t + shared + replica
    assert replica1_end > backward0_end + gather  # the case the stream is for
    adam = ADAM_HBM_BYTES * PSI / 4 / HBM_BPS
    expected = replica1_end + replica + adam  # layer 0's all-reduce follows layer 1's
    result = simulate(s, 3)
    rs0 = [e for e in result.ranks[0].state.events
           if e["op"] == "reduce_scatter" and e["layer"] == 0]
    assert [e["start_s"] for e in rs0] == [pytest.approx(backward0_end, rel=1e-12)]
    assert result.step_time_s == pytest.approx(expected, rel=1e-12)


def test_zeropp_groups_step_by_hand(tmp_path):
    """ZeRO++ on 2 nodes of 4: qwZ's forward all-gather of INT8 over the world (its ring
    crosses nodes), hpZ's backward all-gather of the same inside the node, dequantizing each
    (read 1 byte, write 2 per element over HBM), qgZ's INT4 all-to-alls: inside the node over
    Ψ elements, then across the 2 nodes over what is left (1/4 of it)."""
    s = case(tmp_path, 2, 4, "zero_stage = 3\nframework = 'deepspeed'\nhpz_partition = 4\n"
             "quantized_weights = true\nquantized_gradients = true")
    result = simulate(s, 3)
    n, world = 4, 8
    dequantize = (1 + 2) * PSI / HBM_BPS
    # quantize fp16 to INT4 (read 2, write q), read the node's n parts and write one (q + q/n),
    # the node-level reduction (q/n), write the rank's fp16 shard (2 / world)
    quantize = ((2 + QGZ) + (QGZ + QGZ / n) + QGZ / n + 2 / world) * PSI / HBM_BPS
    assert_timeline(result, [
        ("parameter all-gather", "forward", ring_s(world, QWZ * PSI, True)),
        ("dequantize", "forward", dequantize), ("forward", "forward", FORWARD_S),
        ("parameter all-gather", "backward", ring_s(n, QWZ * PSI, False)),
        ("dequantize", "backward", dequantize), ("backward", "backward", BACKWARD_S),
        ("quantize", "backward", quantize),
        ("gradient all-to-all (node)", "backward", ring_s(n, QGZ * PSI, False)),
        ("gradient all-to-all (nodes)", "backward", ring_s(2, QGZ * PSI / n, True)),
        ("optimizer", "step", ADAM_HBM_BYTES * PSI / world / HBM_BPS)])
    assert result.comm_bytes_per_rank == pytest.approx({
        "all_gather": QWZ * PSI * 7 / 8, "all_gather (hpz)": QWZ * PSI * 3 / 4,
        "reduce_scatter (node)": QGZ * PSI * 3 / 4, "reduce_scatter (inter)": QGZ * PSI / 4 / 2},
        rel=1e-6)


def test_hpz_secondary_partition_is_one_hpz_group_share(tmp_path):
    """hpz_partition = 2 on nodes of 4: forward leaves each layer's fp16 secondary shard over 2
    ranks (not over the node's 4) until backward gathers from it."""
    s = case(tmp_path, 2, 4, "zero_stage = 3\nframework = 'deepspeed'\nhpz_partition = 2",
             layers=2)
    at = simulate(s, 3).memory_at
    assert at["after_forward"] - at["after_init"] == 2 * 2 * (PSI // 2 // 2)  # fp16, 2 layers
    assert at["after_backward"] == at["after_init"]


def test_hpz_fetches_parameters_from_the_host_in_forward_only(tmp_path):
    """Parameter offload under hpZ: forward copies each layer's shard up before its all-gather;
    backward gathers from the secondary partition on the GPU and copies nothing."""
    s = case(tmp_path, 2, 4, "zero_stage = 3\nframework = 'deepspeed'\nhpz_partition = 4\n"
             "optimizer_offload = 'cpu'\nparam_offload = 'cpu'", layers=2)
    copies = [(e["phase"], e["layer"], e["bytes"]) for e in simulate(s, 3).ranks[0].state.events
              if e["op"] == "h2d" and e["phase"] != "step"]
    assert copies == [("forward", 0, 2 * PSI // 2 // 8), ("forward", 1, 2 * PSI // 2 // 8)]


# ---- offload: accumulation and hybrid groups ---------------------------------------------------

@pytest.mark.parametrize("stage", [2, 3])
def test_offload_on_hybrid_groups_with_accumulation_by_hand(tmp_path, stage):
    """2 nodes of 4, shard group 4 (2 replicas), 2 micro-steps, CPU Adam: every micro-step's
    reduced shard (Ψ/4 elements) is all-reduced across the 2 replicas and copied down in fp32
    (4 Ψ/4 bytes at 10 GB/s); the CPU steps Ψ/4 elements, the fp16 shard goes up."""
    s = case(tmp_path, 2, 4, f"zero_stage = {stage}\nshard_group = 4\ngradient_accumulation = 2\n"
             "optimizer_offload = 'cpu'")
    result = simulate(s, stage)
    shard = PSI // 4
    reduce, gather = ring_s(4, 2 * PSI, False), ring_s(4, 2 * PSI, False)
    replica, down = ring_s(2, 2 * shard, True, walks=2), 4 * shard / HOST_BPS
    cpu, up = shard / ADAM_PER_S, 2 * shard / HOST_BPS
    micro = FORWARD_S + BACKWARD_S + reduce + replica + down
    if stage == 3:  # each micro-step gathers for forward and for backward; no post-step gather
        micro += 2 * gather
    post = 0.0 if stage == 3 else gather
    assert result.host_bytes_per_rank == {"d2h": 2 * 4 * shard, "h2d": 2 * shard}
    assert result.host_time_s == pytest.approx(2 * down + cpu + up, rel=1e-12)
    assert result.step_time_s == pytest.approx(2 * micro + cpu + up + post, rel=1e-12)


def test_nvme_swaps_master_and_moments_and_parameters_by_hand(tmp_path):
    """ZeRO-Infinity, both offloads on NVMe, stage 3, shard group 4 of 8, 2 micro-steps. The
    step reads and writes each rank's fp32 master, m and v (12 bytes x Ψ/4) and writes its fp16
    parameters (2 x Ψ/4); every gather first reads the rank's fp16 shard (2 x Ψ/4) from NVMe
    and copies it up. A node's drives are shared by its 4 GPUs: 1 GB/s read, 0.5 GB/s write."""
    s = case(tmp_path, 2, 4, "zero_stage = 3\nframework = 'deepspeed'\nshard_group = 4\n"
             "gradient_accumulation = 2\noptimizer_offload = 'nvme'\nparam_offload = 'nvme'")
    result = simulate(s, 3)
    shard, gathers = PSI // 4, 2 * 2  # forward and backward, 2 micro-steps
    read, write = NVME_READ_BPS / 4, NVME_WRITE_BPS / 4
    assert result.host_bytes_per_rank == {
        "nvme_read": 12 * shard + gathers * 2 * shard, "nvme_write": 12 * shard + 2 * shard,
        "h2d": gathers * 2 * shard, "d2h": 2 * 4 * shard}
    fetch = 2 * shard / read + 2 * shard / HOST_BPS + ring_s(4, 2 * PSI, False)
    micro = (2 * fetch + FORWARD_S + BACKWARD_S + ring_s(4, 2 * PSI, False)
             + ring_s(2, 2 * shard, True, walks=2) + 4 * shard / HOST_BPS)
    step = 12 * shard / read + shard / ADAM_PER_S + 12 * shard / write + 2 * shard / write
    assert result.step_time_s == pytest.approx(2 * micro + step, rel=1e-12)  # 14.098 s


# ---- hybrid sharding under NCCL: each group's share of the node's NICs -------------------------

NCCL = """collective_library = "nccl"
collective_algorithm = "ring"
collective_protocol = "Simple"
host_cpu = "intel"
intra_node_bandwidth_GBps = 300
intra_node_latency_us = 5
inter_node_latency_us = 10"""


def nccl_ring_s(size: float, n: int, nodes: int, channels: int, speed_GBps: float,
                all_reduce: bool) -> float:
    """NCCL's ring, Simple (tuning.cc lines 288-412 at NCCL 2.30.7): busbw = channels x speed,
    algbw = busbw n / nsteps; latency = 8.4 us + each intra-node step at max(5 us, the Intel
    host's 1 us x 3 across nodes) + each network step at 10 us, x 1.4 for a big all-reduce
    across nodes (Ampere's ring plateau, lines 647-650)."""
    nsteps = 2 * (n - 1) if all_reduce else n - 1
    net = 0 if nodes == 1 else (2 if all_reduce else 1) * (nodes - 1)
    latency_us = 8.4 + (nsteps - net) * 5 + net * 10
    if all_reduce and nodes > 1:
        latency_us *= 1.4
    return latency_us * 1e-6 + size * nsteps / (channels * speed_GBps * 1e9 * n)


@pytest.mark.parametrize("g, shard, replica", [
    # One node's 4 GPUs: NVLink at 240 GB/s as NCCL rates A100's 12 links (20 GB/s each): 6
    # channels at 40, doubled to 12 at 20. The replicas: 8 ranks, 2 per node on 4 nodes, with
    # 2 of the node's 8 NICs (12 GB/s each): 2 channels at 12 GB/s.
    (4, dict(n=4, nodes=1, channels=12, speed_GBps=20), dict(n=8, nodes=4, channels=2,
                                                              speed_GBps=12)),
    # Two nodes' 16 GPUs: all 8 NICs, 8 channels at 12. The replicas: 2 ranks, one per node,
    # with 1 NIC: 1 channel at 12.
    (16, dict(n=16, nodes=2, channels=8, speed_GBps=12), dict(n=2, nodes=2, channels=1,
                                                              speed_GBps=12)),
])
def test_hybrid_groups_under_nccl_by_hand(tmp_path, g, shard, replica):
    """32 A100s on 4 DGX A100 nodes, NCCL's ring forced: the shard group's reduce-scatter and
    all-gather, and the replica group's all-reduce, each at its own hand-counted channels."""
    s = case(tmp_path, 4, 8, f"zero_stage = 2\nshard_group = {g}", inter_GBps=12,
             gpu="A100-80GB", links=NCCL)
    got = {e["name"]: e["end_s"] - e["start_s"] for e in simulate(s, 2).ranks[0].state.events
           if e["op"]}
    assert got["gradient bucket"] == pytest.approx(
        nccl_ring_s(2 * PSI, all_reduce=False, **shard), rel=1e-9)
    assert got["parameter all-gather"] == pytest.approx(got["gradient bucket"], rel=1e-12)
    assert got["shard all-reduce"] == pytest.approx(
        nccl_ring_s(2 * PSI / g, all_reduce=True, **replica), rel=1e-9)
