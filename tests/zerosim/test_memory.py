"""The per-stage memory model: the ZeRO paper's formulas for any precision and optimizer, the
buffers of each stage, CPU offload, and properties that must hold for every input."""

import pytest
from hypothesis import given, settings, strategies as st

from zerosim.scenario.config import ClusterConfig, ModelConfig, Scenario, TrainingConfig
from zerosim.scenario.load import load_scenario
from zerosim.analytic.host_memory import deepspeed_zero2_estimate
from zerosim.analytic.memory import memory_table, optimizer_bytes_per_param, stage_memory

from tests.conftest import SCENARIOS, run_zerosim


def bare(psi, nodes=1, per_node=8, **training) -> Scenario:
    return Scenario(model=ModelConfig(params=psi, layers=training.pop("layers", 1)),
                    cluster=ClusterConfig(nodes=nodes, gpus_per_node=per_node),
                    training=TrainingConfig(**training))


def test_fp32_adam_is_16_bytes_per_param_split_4_4_8():
    result = run_zerosim("memory", SCENARIOS / "llama2_7b_64gpu.toml", "--json",
                         "--set", "training.precision=fp32", "--set", "training.optimizer=adam")
    assert result.code == 0, result.stderr
    data = result.json
    psi = data["params"]
    assert psi == 6_738_415_616
    ddp = data["stages"][0]
    assert (ddp["params_bytes"], ddp["grads_bytes"], ddp["optimizer_bytes"]) == (4 * psi, 4 * psi, 8 * psi)
    assert ddp["model_states_bytes"] == 16 * psi
    assert data["optimizer_bytes_per_param"] == 8


@pytest.mark.parametrize("precision, optimizer, k", [
    ("bf16", "adam", 12), ("fp16", "adamw", 12), ("fp32", "adam", 8), ("bf16", "sgd_momentum", 8),
    ("bf16", "sgd", 4), ("fp32", "sgd", 0), ("fp32", "sgd_momentum", 4)])
def test_optimizer_bytes_per_param(precision, optimizer, k):
    assert optimizer_bytes_per_param(TrainingConfig(precision=precision, optimizer=optimizer)) == k


@pytest.mark.parametrize("precision, width", [("fp32", 4), ("bf16", 2)])
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_stage_formulas_with_uneven_sharding(precision, optimizer, width):
    psi, n = 1_000_003, 24  # 1,000,003 = 24 * 41,667 - 5: shards are padded to 41,667 elements
    scenario = bare(psi, nodes=3, per_node=8, precision=precision, optimizer=optimizer)
    assert scenario.world_size == n
    k = optimizer_bytes_per_param(scenario.training)
    shard = 41_667
    rows = memory_table(scenario)
    expected = [(width * psi, width * psi, k * psi), (width * psi, width * psi, k * shard),
                (width * psi, width * shard, k * shard), (width * shard, width * shard, k * shard)]
    assert [(r.params_bytes, r.grads_bytes, r.optimizer_bytes) for r in rows] == expected


# Megatron 7.5B by hand: a GPT layer is 12h^2 + 13h parameters; the first gather unit is the
# token (51200 x 4096) and position (2048 x 4096) embeddings; the last is the final LayerNorm
# (2h) plus the tied head, which gathers the token embedding again.
H = 4096
LAYER = 12 * H * H + 13 * H  # 201,379,840
EMBEDDING = 51200 * H + 2048 * H  # 218,103,808
HEAD = 2 * H + 51200 * H  # 209,723,392


def test_buffers_per_stage():
    scenario = load_scenario(SCENARIOS / "megatron_7b5_64gpu.toml")
    rows = memory_table(scenario)
    assert rows[0].buffers_bytes == rows[1].buffers_bytes == 0  # in place on the flat gradient
    # Stage 2's buckets hold what is made into them, at most two 25 MiB (filling + reducing).
    # Under full checkpointing the peak is the last layer's recomputation beside every stored
    # input, and its gradient (a layer is 8x a bucket) fills both buckets then.
    assert rows[2].buffers_bytes == 2 * 25 * 2**20
    # Without checkpointing the peak is the head's backward, every activation alive: beside it
    # only the tied head's own gradient, its final LayerNorm (2h fp16); the layers fill theirs
    # as their activations go.
    kept = load_scenario(SCENARIOS / "megatron_7b5_64gpu.toml",
                         ["training.activation_checkpointing=none"])
    assert stage_memory(kept, 2).buffers_bytes == 2 * 2 * H
    # Prefetch 1: two consecutive units gathered, fp16 (embedding + layer 1 is the largest pair),
    # and two units of full fp16 gradients (one produced, one being reduce-scattered).
    pair = max(EMBEDDING + LAYER, 2 * LAYER, LAYER + HEAD)
    assert pair == EMBEDDING + LAYER
    assert rows[3].buffers_bytes == 2 * pair + 2 * pair
    deeper = load_scenario(SCENARIOS / "megatron_7b5_64gpu.toml", ["training.prefetch_layers=3"])
    assert stage_memory(deeper, 3).buffers_bytes == 2 * (EMBEDDING + 3 * LAYER) + 2 * pair
    everything = load_scenario(SCENARIOS / "megatron_7b5_64gpu.toml", ["training.prefetch_layers=99"])
    total = EMBEDDING + 36 * LAYER + 2 * H  # the tied head's matrix is the embedding, gathered once
    assert total == 7_467_786_240
    assert stage_memory(everything, 3).buffers_bytes == 2 * total + 2 * pair


def test_stage2_buckets_never_exceed_the_gradients():
    tiny = bare(1000, per_node=2, layers=1, reduce_bucket_MiB=25.0)
    assert stage_memory(tiny, 2).buffers_bytes == 2 * 1000  # bf16 gradients of 1000 params


@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_cpu_offload_stage2_matches_deepspeeds_estimator(gpus):
    psi = 1_000_000_000
    row = stage_memory(bare(psi, 1, gpus, optimizer_offload="cpu", zero_stage=2), 2)
    # DeepSpeed's estimate_zero2_model_states_mem_needs(cpu_offload=True), before its 1.5: its CPU
    # term Ψ max(4 total GPUs, 16) is the model states up to 4 GPUs (past that, each process
    # loading the fp32 model at start-up, which zerosim does not count)
    gpu_per_rank, cpu_total = deepspeed_zero2_estimate(psi, gpus, 1, cpu_offload=True)
    assert gpus * row.host_bytes == cpu_total
    assert row.model_states_bytes == gpu_per_rank


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_cpu_offload_moves_optimizer_and_gradient_partition_to_host(precision):
    psi, n = 7_500_000_000, 64
    base = bare(psi, nodes=8, layers=36, precision=precision)
    off = bare(psi, nodes=8, layers=36, precision=precision, optimizer_offload="cpu",
               zero_stage=3)
    assert stage_memory(off, 0) == stage_memory(base, 0)  # DeepSpeed offloads ZeRO's partitions
    for stage in range(1, 4):
        on_gpu, offloaded = stage_memory(base, stage), stage_memory(off, stage)
        numel = psi // n
        assert offloaded.optimizer_bytes == 0 and on_gpu.host_bytes == 0
        # fp32 master + Adam's two fp32 moments + fp32 gradient partition, whatever the precision
        assert offloaded.host_bytes == 16 * numel
        assert offloaded.params_bytes == on_gpu.params_bytes
        assert offloaded.grads_bytes == (0 if stage >= 2 else on_gpu.grads_bytes)


def test_peak_is_states_plus_activations_plus_buffers():
    scenario = load_scenario(SCENARIOS / "llama2_7b_64gpu.toml")
    for row in memory_table(scenario):
        assert row.peak_bytes == row.model_states_bytes + row.activations_bytes + row.buffers_bytes
        assert row.activations_bytes > 0


@settings(max_examples=200, deadline=None)
@given(psi=st.integers(1, 10**13), nodes=st.integers(1, 256), per_node=st.integers(1, 16),
       precision=st.sampled_from(["fp32", "bf16", "fp16"]),
       optimizer=st.sampled_from(["adam", "adamw", "sgd", "sgd_momentum"]))
def test_properties_of_model_states(psi, nodes, per_node, precision, optimizer):
    scenario = bare(psi, nodes, per_node, precision=precision, optimizer=optimizer)
    n = nodes * per_node
    rows = memory_table(scenario)
    states = [r.model_states_bytes for r in rows]
    per_param = states[0] // psi
    assert states[0] == per_param * psi  # DDP replicates everything
    assert states == sorted(states, reverse=True)  # each stage shards more
    # ZeRO-3 is 1/N of DDP, up to the padding of the flat buffer to a multiple of N.
    assert states[0] <= n * states[3] < states[0] + n * per_param
    if n > 1:  # one more GPU never needs more memory per rank
        fewer = bare(psi, 1, n - 1, precision=precision, optimizer=optimizer)
        assert all(a.model_states_bytes >= b.model_states_bytes
                   for a, b in zip(memory_table(fewer), rows))


def test_gpu_presets_fill_the_cluster_and_single_keys_override():
    scenario = load_scenario(SCENARIOS / "llama2_7b_64gpu.toml",
                             ["cluster.gpu=H100-80GB", "cluster.hbm_GiB=94"])
    c = scenario.cluster
    assert (c.gpu, c.hbm_GiB, c.peak_tflops, c.hbm_bandwidth_GBps) == ("H100-80GB", 94.0, 989.4, 3350.0)
    assert ClusterConfig() == load_scenario(SCENARIOS / "zero_paper_7b5_64gpu.toml",
                                            ["cluster.gpu=A100-80GB", "cluster.nodes=1"]).cluster


# Review I5: s = 2048, b = 1, h = 32, a = 2, 16-bit, GeLU MLP of 4h, dropout, flash attention,
# full recomputation. Korthikanti et al. 2022 by hand, sbh = 65,536: each layer keeps its input,
# 2sbh = 131,072 (x 3 layers); recomputing one takes 34sbh + the fp32 log-sum-exp 4asb =
# 2,244,608; outside the layers the embedding's mask sbh = 65,536, the final-norm and head inputs
# 4sbh and the fp32 logits 4sbv (§4.3). The head's backward frees its part before the first
# layer recomputes, so the activations peak at the larger of forward's end and that recompute.
@pytest.mark.parametrize("vocab, activations", [
    (256, 3 * 131_072 + 65_536 + 262_144 + 4 * 2048 * 256),  # the logits outweigh a layer
    (64, 3 * 131_072 + 65_536 + 2_244_608)])                 # a recomputed layer outweighs them
def test_full_recomputation_peaks_at_forwards_end_or_at_the_first_recomputed_layer(
        write, vocab, activations):
    from zerosim.sim.engine import simulate

    path = write("i5.toml", f'[model]\nlayers = 3\nheads = 2\nhidden = 32\nvocab = {vocab}\n'
                            'position = "rope"\n[training]\nseq_len = 2048\n'
                            'activation_checkpointing = "full"\nflash_attention = true\n')
    s = load_scenario(path, [])
    row = stage_memory(s, 0)
    assert row.activations_bytes == activations
    assert row.peak_bytes == row.model_states_bytes + activations  # DDP: no buffers in flight
    assert simulate(s, 0, keep_events=False).peak_bytes == row.peak_bytes


def test_the_memory_table_says_reduce_dtype_is_stage_2_and_3s():
    """Review finding I9: with reduce_dtype = "fp32" ZeRO-2/3's rows hold fp32 gradients and
    ZeRO-0/1's 16-bit ones, so stage 2's model states can exceed stage 1's; the table says why."""
    note = 'reduce_dtype = "fp32" applies to stages 2-3'
    shown = run_zerosim("memory", SCENARIOS / "llama2_7b_64gpu.toml", "--set", "training.reduce_dtype=fp32")
    assert shown.code == 0 and note in shown.stdout
    for extra in ([], ["--set", "training.precision=fp32", "--set", "training.reduce_dtype=fp32"]):
        quiet = run_zerosim("memory", SCENARIOS / "llama2_7b_64gpu.toml", *extra)
        assert quiet.code == 0 and note not in quiet.stdout
