"""The ZeRO family beyond the four stages (issue 18): offload's host memory against DeepSpeed's own
estimators, offload's step time as the sum or maximum of its pieces, hybrid sharding's bytes per
rank, ZeRO++'s bytes against the ZeRO++ paper's volumes, and the memory timeline of each."""

import re

import pytest

from tests.conftest import ROOT, assert_one_line_error, run_zerosim
from zerosim.errors import InputError
from zerosim.analytic.host_memory import (DEEPSPEED_BUFFER_FACTOR, deepspeed_zero2_estimate,
                                 deepspeed_zero3_estimate)
from zerosim.analytic.memory import stage_memory, steady_points
from zerosim.scenario.load import load_scenario
from zerosim.sim.engine import simulate
from zerosim.sim.stages.step_shape import step_shape

SCENARIOS = ROOT / "scenarios"
LLAMA, TINY = SCENARIOS / "llama2_7b_64gpu.toml", SCENARIOS / "tiny_gpt_4rank_cpu.toml"
DS = "training.framework='deepspeed'"
PSI = 1_000_000_000


def bare(tmp_path, nodes: int, gpus: int, extra: str = "", layers: int = 8):
    """A bare Ψ of 10^9 parameters in fp16 with Adam on `nodes` x `gpus` V100s, flat compute at
    1 TFLOP/s (integer-friendly seconds)."""
    path = tmp_path / "bare.toml"
    path.write_text(f"""
[model]
params = {PSI}
layers = {layers}
[cluster]
nodes = {nodes}
gpus_per_node = {gpus}
gpu = "V100-32GB"
peak_tflops = 1
compute_efficiency = 1.0
[training]
precision = "fp16"
seq_len = 100
{extra}
""")
    return path


# ---- host memory: DeepSpeed's estimators ------------------------------------------------------

def test_estimators_reproduce_deepspeeds_worked_example():
    """DeepSpeed's memory.rst: t5-3b (2851M parameters) on one node of 8 GPUs, ZeRO-2 with
    optimizer offload: 5.31 GiB per GPU and 127.4 GiB of CPU memory, the 1.5 factor included."""
    gpu, cpu = deepspeed_zero2_estimate(2_851_000_000, 8, 1, cpu_offload=True)
    assert round(gpu / 2**30, 2) == 5.31
    assert round(cpu * DEEPSPEED_BUFFER_FACTOR / 2**30, 1) == 127.4


@pytest.mark.parametrize("nodes, gpus", [(1, 8), (2, 8), (4, 4)])
@pytest.mark.parametrize("params_off, per_param", [("none", 16), ("cpu", 18)])
def test_zero3_offload_host_bytes_are_deepspeeds_estimate(tmp_path, nodes, gpus, params_off,
                                                          per_param):
    """estimate_zero3_model_states_mem_needs (zero_init): 16 Ψ / nodes per node, 18 with
    parameter offload, before its 1.5; zerosim's host bytes per node are exactly that."""
    path = bare(tmp_path, nodes, gpus, f"zero_stage = 3\nframework = 'deepspeed'\n"
                f"optimizer_offload = 'cpu'\nparam_offload = '{params_off}'")
    s = load_scenario(path)
    host_per_node = stage_memory(s, 3).host_bytes * gpus
    _, cpu = deepspeed_zero3_estimate(PSI, PSI // 8, gpus, nodes, True, params_off == "cpu")
    assert host_per_node == cpu == per_param * PSI // nodes


@pytest.mark.parametrize("framework, extra_bytes", [("zero", 0), ("deepspeed", 2)])
def test_zero2_offload_host_bytes_against_the_estimate(tmp_path, framework, extra_bytes):
    """estimate_zero2_model_states_mem_needs: Ψ max(4 total GPUs, 16) on a node of 4: 16 Ψ.
    DeepSpeed's code holds 2 bytes more per element than its estimator: the 16-bit staging
    copy of the partition (stage_1_and_2.py)."""
    s = load_scenario(bare(tmp_path, 1, 4, f"zero_stage = 2\nframework = '{framework}'\n"
                           f"optimizer_offload = 'cpu'"))
    _, cpu = deepspeed_zero2_estimate(PSI, 4, 1, cpu_offload=True)
    assert stage_memory(s, 2).host_bytes * 4 == cpu + extra_bytes * PSI


def test_memory_says_where_deepspeeds_factor_goes():
    """The factor multiplies DeepSpeed's CPU bytes per node (16 Ψ / 8 nodes for Llama-2-7B's
    6,738,415,616 parameters: 13.48 GB, x 1.5 = 20.22) and nothing else: zerosim's host bytes
    per node, 8 ranks of 16 Ψ / 64, are the same 13.48 GB without it."""
    result = run_zerosim("memory", LLAMA, "--set", "training.optimizer_offload='cpu'", "--set",
                         "training.zero_stage=3")
    line = next(x for x in result.stdout.splitlines() if x.startswith("DeepSpeed's estimator"))
    assert "x 1.5" in line and "multiplies the CPU bytes only" in line
    cpu, factored, ours = (float(x) for x in re.findall(r"(\d+\.\d\d) GB", line)[1:])
    assert (cpu, factored, ours) == (13.48, 20.22, 13.48)


# ---- offload in time ---------------------------------------------------------------------------

OFFLOAD = ("zero_stage = 2\noptimizer_offload = 'cpu'\nreduce_bucket_MiB = {bucket}\n{more}\n"
           "[cluster]\n")


def offload_case(tmp_path, bucket: float, more: str = ""):
    """One V100, Ψ = 10^9: the host link at 10 GB/s each way, one core at 10^9 Adam elements/s,
    so the fp32 gradients go down in 0.4 s, the CPU steps in 1 s, fp16 goes up in 0.2 s."""
    path = bare(tmp_path, 1, 1, f"zero_stage = 2\noptimizer_offload = 'cpu'\n"
                f"reduce_bucket_MiB = {bucket}\n{more}", layers=1)
    text = path.read_text().replace("compute_efficiency = 1.0\n", "compute_efficiency = 1.0\n"
                                    "host_link_GBps = 10\ncpu_cores_per_gpu = 1\n"
                                    "cpu_adam_Melements_per_s_per_core = 1000\n")
    path.write_text(text)
    s = load_scenario(path)
    shape = step_shape(s, 2)
    return s, sum(shape.forward_s) + sum(shape.backward_s)


def test_offload_step_is_the_sum_of_its_serial_pieces(tmp_path):
    """One bucket, reduced at the end of backward: its copy down, the CPU step and the copy up
    follow compute one after the other."""
    s, compute = offload_case(tmp_path, bucket=4096)
    result = simulate(s, 2)
    assert result.step_time_s == pytest.approx(compute + 0.4 + 1.0 + 0.2, rel=1e-12)
    assert result.host_bytes_per_rank == {"d2h": 4 * PSI, "h2d": 2 * PSI}


def test_offload_copies_down_behind_backward(tmp_path):
    """Two buckets (10^9 bytes each): the first one's copy (0.2 s) runs while backward makes the
    second; only the last one's is exposed."""
    s, compute = offload_case(tmp_path, bucket=1e9 / 2**20)
    assert compute / 2 > 0.2  # the half of backward left covers the first copy
    assert simulate(s, 2).step_time_s == pytest.approx(compute + 0.2 + 1.0 + 0.2, rel=1e-12)


@pytest.mark.parametrize("seq_len", [50, 500])
def test_delayed_update_is_the_longer_of_compute_and_the_cpu_step(tmp_path, seq_len):
    """ZeRO-Offload's delayed parameter update: the CPU step and the copy up (1.2 s) run beside
    forward, backward and the copy down (compute + 0.4 s)."""
    s, compute = offload_case(tmp_path, bucket=4096, more="delayed_update = true")
    s = load_scenario(s.source, [f"training.seq_len={seq_len}"])
    compute = sum(step_shape(s, 2).forward_s) + sum(step_shape(s, 2).backward_s)
    assert simulate(s, 2).step_time_s == pytest.approx(max(compute + 0.4, 1.2), rel=1e-12)


# ---- hybrid sharding ---------------------------------------------------------------------------

@pytest.mark.parametrize("stage", [1, 2, 3])
@pytest.mark.parametrize("when, reductions", [("every_micro_step", 2), ("once_per_step", 1)])
def test_hybrid_bytes_per_rank(tmp_path, stage, when, reductions):
    """g = 8 of N = 32 ranks shard (r = 4 replicas), 2 micro-steps: reduce-scatters and
    all-gathers inside the group send (g - 1) / g of their buffer, the replica all-reduce of the
    shard 2 (r - 1) / r of Ψ / g, at every reduction or once (MiCS)."""
    s = load_scenario(bare(tmp_path, 4, 8, f"zero_stage = {stage}\nshard_group = 8\n"
                           f"gradient_accumulation = 2\nreplica_allreduce = '{when}'"))
    g, r, b = 8, 4, 2
    sent = simulate(s, stage, keep_events=False).comm_bytes_per_rank
    micro = 2 if stage >= 2 else 1  # stage 1 reduces in the last micro-step only
    gathers = 2 * 2 if stage == 3 else 1  # forward and backward per micro-step, or post-step
    assert sent["reduce_scatter (shard)"] == micro * b * PSI * (g - 1) // g
    assert sent["all_gather (shard)"] == gathers * b * PSI * (g - 1) // g
    replica = (min(micro, reductions)) * 2 * b * (PSI // g) * (r - 1) // r
    assert sent["all_reduce (replica)"] == pytest.approx(replica, rel=1e-12)
    assert not set(sent) - {"reduce_scatter (shard)", "all_gather (shard)", "all_reduce (replica)"}


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_hybrid_memory_is_zero_on_the_shard_group(tmp_path, stage):
    """A rank of 32 sharding over 8 holds what a rank of an 8-rank world holds."""
    hybrid = stage_memory(load_scenario(bare(tmp_path, 4, 8, "zero_stage = 3\nshard_group = 8")),
                          stage)
    alone = stage_memory(load_scenario(bare(tmp_path, 1, 8)), stage)
    assert (hybrid.params_bytes, hybrid.grads_bytes, hybrid.optimizer_bytes) == (
        alone.params_bytes, alone.grads_bytes, alone.optimizer_bytes)


@pytest.mark.parametrize("value, why", [("3", "must divide the world size"),
                                        ("12", "must divide the world size"),
                                        ("16", "")])
def test_shard_group_must_follow_nodes(value, why):
    """64 ranks, 8 per node: 16 is two whole nodes (fine); 3 and 12 are refused in one line."""
    result = run_zerosim("memory", LLAMA, "--set", f"training.shard_group={value}")
    if why:
        assert_one_line_error(result)
        assert why in result.stderr
    else:
        assert result.code == 0


# ---- ZeRO++ ------------------------------------------------------------------------------------

def test_zeropp_bytes_and_its_4x_cross_node_volume(tmp_path):
    """ZeRO++ on 64 nodes of 8: qwZ's forward all-gather carries INT8 over the world, hpZ's
    backward one stays in the node, qgZ's INT4 all-to-alls go inside the node and then across.
    Crossing nodes per node: ZeRO-3's 3M (M = 2Ψ) against 0.75M, the ZeRO++ blog's 4x."""
    zero3 = f"zero_stage = 3\nframework = 'deepspeed'"
    plain = simulate(load_scenario(bare(tmp_path, 64, 8, zero3)), 3, keep_events=False)
    s = load_scenario(bare(tmp_path, 64, 8, zero3 + "\nhpz_partition = 8\nquantized_weights = "
                           "true\nquantized_gradients = true"))
    sent = simulate(s, 3, keep_events=False).comm_bytes_per_rank
    n, k, world = 8, 64, 512
    # DeepSpeed's quantizers send one fp32 scale per group of at most 8000 elements: INT8
    # weights 1 + 4/8000 bytes per element, INT4 gradients 0.5 + 4/8000
    qwz, qgz = 1 + 4 / 8000, 0.5 + 4 / 8000  # (bytes are counted whole: abs=1)
    assert sent["all_gather"] == pytest.approx(qwz * PSI * (world - 1) / world, abs=1)
    assert sent["all_gather (hpz)"] == pytest.approx(qwz * PSI * (n - 1) / n, abs=1)
    assert sent["reduce_scatter (node)"] == pytest.approx(qgz * PSI * (n - 1) / n, abs=1)
    assert sent["reduce_scatter (inter)"] == pytest.approx(qgz * PSI / n * (k - 1) / k, abs=1)
    zero3_cross = sum(plain.comm_bytes_per_rank.values())  # every ring crosses nodes
    zeropp_cross = sent["all_gather"] + n * sent["reduce_scatter (inter)"]  # per node
    assert zero3_cross == pytest.approx(3 * 2 * PSI * (world - 1) / world)
    # the blog's 4x is 3M over 0.75M; the scales and the (k - 1)/k factors make it 4.016
    assert zero3_cross / zeropp_cross == pytest.approx(
        3 * 2 * (world - 1) / world / (qwz * (world - 1) / world + qgz * (k - 1) / k), rel=1e-7)
    assert zero3_cross / zeropp_cross == pytest.approx(4, rel=0.005)


def test_hpz_keeps_a_secondary_partition_until_backward(tmp_path):
    s = load_scenario(bare(tmp_path, 2, 8, f"zero_stage = 3\n{DS.split('.')[1]}\nhpz_partition = 4"))
    plain = load_scenario(bare(tmp_path, 2, 8, f"zero_stage = 3\n{DS.split('.')[1]}"))
    added = stage_memory(s, 3).buffers_bytes - stage_memory(plain, 3).buffers_bytes
    assert added == 2 * 8 * -(-(PSI // 8) // 4)  # fp16, 8 units of Ψ / 8, each over 4 ranks


@pytest.mark.parametrize("key", ["training.quantized_weights=true", "training.hpz_partition=8",
                                 "training.param_offload='cpu'"])
def test_stage_three_schemes_refused_elsewhere(key):
    assert_one_line_error(run_zerosim("memory", LLAMA, "--set", "training.zero_stage=2", "--set",
                                      key, "--set", "training.optimizer_offload='cpu'"))


def test_nvme_needs_its_rates():
    with pytest.raises(InputError, match="nvme_read_GBps"):
        load_scenario(LLAMA, ["training.zero_stage=3", "training.optimizer_offload='nvme'"])


# ---- the memory timeline -----------------------------------------------------------------------

FAMILY = [
    (LLAMA, ["cluster.nodes=2", "training.zero_stage=3", DS, "training.optimizer_offload='cpu'",
             "training.param_offload='cpu'", "training.gradient_accumulation=2"]),
    (LLAMA, ["cluster.nodes=2", "training.shard_group=8", "training.gradient_accumulation=2"]),
    (LLAMA, ["cluster.nodes=2", "training.zero_stage=3", DS, "training.hpz_partition=8",
             "training.quantized_weights=true", "training.quantized_gradients=true"]),
    (LLAMA, ["cluster.nodes=2", "training.zero_stage=2", DS, "training.optimizer_offload='nvme'",
             "cluster.nvme_read_GBps=10", "cluster.nvme_write_GBps=5",
             "training.delayed_update=true"]),
    (TINY, ["training.shard_group=2", "training.optimizer_offload='cpu'",
            "training.replica_allreduce='once_per_step'", "training.gradient_accumulation=3"]),
]


@pytest.mark.parametrize("path, overrides", FAMILY)
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_family_timeline_passes_through_the_analytic_steady_points(path, overrides, stage):
    s = load_scenario(path, overrides)
    result = simulate(s, stage, keep_events=False)
    expected = steady_points(s, stage)
    assert {k: result.memory_at[k] for k in expected} == expected
    assert expected["after_forward"] <= result.peak_bytes <= stage_memory(s, stage).peak_bytes


@pytest.mark.parametrize("path, overrides", FAMILY)
def test_family_per_rank_matches_the_phase_reference(path, overrides):
    """Under jitter the lockstep run gives the event-by-event reference's times to the bit."""
    s = load_scenario(path, [*overrides, "variation.jitter_pct=5", "cluster.nodes=1"]
                      if path == LLAMA else [*overrides, "variation.jitter_pct=5"])
    fast = simulate(s, 3, keep_events=False)
    slow = simulate(s, 3, keep_events=False, granularity="phase")
    assert fast.step_time_s == slow.step_time_s
    assert fast.comm_bytes_per_rank == slow.comm_bytes_per_rank
    assert fast.host_bytes_per_rank == slow.host_bytes_per_rank


def test_host_constants_are_the_sources_figures():
    """Gen5's pinned fraction from our H100 run (profiles/), CPU-Adam's rate per core from
    ZeRO-Offload Table 4 (a least-squares line through the origin over the DGX-2's 48 cores)."""
    import json

    from zerosim.hardware.pcie import PCIE_X16_GBPS, PINNED_FRACTION
    from zerosim.scenario.host import CPU_ADAM_MELEMENTS_PER_S_PER_CORE

    run = json.loads((ROOT / "profiles/h100/offload_microbench_2026-11-26.json").read_text())
    h2d = next(r["GBps"] for r in run["host_link"]["pinned"]
               if r["direction"] == "H2D" and r["bytes"] == 2**30)
    assert round(h2d / PCIE_X16_GBPS[5], 2) == PINNED_FRACTION[5]
    params, seconds = [1, 2, 4, 8, 10], [0.22, 0.51, 1.03, 2.41, 2.57]
    slope = sum(p * s for p, s in zip(params, seconds)) / sum(p * p for p in params)
    assert round(1e9 / slope / 48 / 1e6, 1) == CPU_ADAM_MELEMENTS_PER_S_PER_CORE


def test_review_fixes(tmp_path):
    """A world all-reduce under hybrid sharding sums the replicas itself (no replica all-reduce
    after it); hpZ's backward gathers need no copy up under parameter offload; a delayed update
    under jitter runs (event by event); a host rate that underflows is one line."""
    s = load_scenario(bare(tmp_path, 4, 8, "zero_stage = 2\nshard_group = 8\n"
                           "gradient_reduction = 'all_reduce'"))
    sent = simulate(s, 2, keep_events=False).comm_bytes_per_rank
    assert "all_reduce (replica)" not in sent and sent["all_reduce"] > 0
    common = "zero_stage = 3\nframework = 'deepspeed'\noptimizer_offload = 'cpu'\nparam_offload = 'cpu'"
    plain = simulate(load_scenario(bare(tmp_path, 2, 8, common)), 3, keep_events=False)
    hpz = simulate(load_scenario(bare(tmp_path, 2, 8, common + "\nhpz_partition = 8")), 3,
                   keep_events=False)
    assert hpz.host_bytes_per_rank["h2d"] == plain.host_bytes_per_rank["h2d"] - 2 * PSI // 16
    s = load_scenario(LLAMA, ["model.layers=4", "cluster.nodes=2", DS, "training.zero_stage=2",
                              "training.optimizer_offload='cpu'", "training.delayed_update=true",
                              "variation.jitter_pct=5"])
    fast = simulate(s, 2, keep_events=False)
    assert fast.step_time_s == simulate(s, 2, keep_events=False, granularity="phase").step_time_s
    # Llama-2-7B cut to 4 layers: 2 x 32000 x 4096 + 4 x 202,383,360 + 4096 parameters, 1/16 a
    # rank's: its fp32 gradient down, its fp16 parameters up
    shard = (2 * 32000 * 4096 + 4 * 202_383_360 + 4096) // 16
    assert fast.host_bytes_per_rank == {"d2h": 4 * shard, "h2d": 2 * shard}
    assert_one_line_error(run_zerosim("simulate", LLAMA, "--set", "training.zero_stage=3", "--set",
                                      "training.optimizer_offload='cpu'", "--set",
                                      "cluster.cpu_cores_per_gpu=1e-300", "--set",
                                      "cluster.cpu_adam_Melements_per_s_per_core=1e-300"),
                          "must be a positive finite number")


def test_sweep_counts_subgroup_and_host_bytes(tmp_path):
    """A sweep's per-op columns add the subgroups' bytes (the replica all-reduce is an
    all-reduce), and its host columns carry offload's."""
    import json

    out = tmp_path / "s.json"
    result = run_zerosim("sweep", LLAMA, "--vary", "training.shard_group=0,8", "--vary",
                         "training.zero_stage=3", "--set", "training.optimizer_offload=cpu",
                         "--set", "model.layers=4", "--out", out, "--quiet")
    assert result.code == 0, result.stderr
    rows = {row["parallelism.shard_group"]: row for row in json.loads(out.read_text())["rows"]}
    hybrid = simulate(load_scenario(LLAMA, ["training.shard_group=8", "model.layers=4",
                                            "training.optimizer_offload=cpu"]), 3,
                      keep_events=False)
    assert rows[8]["comm_bytes_all_reduce"] == hybrid.comm_bytes_per_rank["all_reduce (replica)"]
    assert rows[0]["comm_bytes_all_reduce"] == 0
    assert rows[8]["host_bytes_per_rank_total"] == sum(hybrid.host_bytes_per_rank.values()) > 0
