"""Independent oracles for the memory the ZeRO family adds: host and NVMe bytes under offload
against DeepSpeed's documented defaults and code paths, the numbers of the DeepSpeed estimator
line `zerosim memory` prints, gradients reduced in fp32, FSDP2's stage-2 peak. Expected values
are hand counts written out here, never zerosim's own constants."""

import re

import pytest

from tests.conftest import SCENARIOS, run_zerosim
from zerosim.analytic.memory import stage_memory
from zerosim.scenario.load import load_scenario

PSI = 4 * 10**9
LLAMA = SCENARIOS / "llama2_7b_64gpu.toml"
# Llama-2-7B by hand (Touvron et al. 2023, Table 1's 7B: 32 layers, h 4096; SwiGLU of 11008;
# vocabulary 32000, untied head): embeddings and head 2 x 32000 x 4096, per layer attention
# 4 h^2, MLP 3 h f, two RMSNorm weights, one final RMSNorm: 6,738,415,616 (the 7B checkpoint).
LLAMA_PSI = 2 * 32000 * 4096 + 32 * (4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096) + 4096


def bare(tmp_path, gpus: int, training: str, layers: int = 4):
    path = tmp_path / "bare.toml"
    path.write_text(f"""
[model]
params = {PSI}
layers = {layers}
[cluster]
nodes = 1
gpus_per_node = {gpus}
gpu = "V100-32GB"
nvme_read_GBps = 4
nvme_write_GBps = 2
[training]
precision = "fp16"
seq_len = 100
{training}
""")
    return load_scenario(path)


@pytest.mark.parametrize("stage, per_element", [
    # DeepSpeed stage_1_and_2.py under cpu_offload, per element of the rank's partition: the
    # fp32 master (4), its fp32 gradient (4), Adam's m and v (8), and the pinned 16-bit copy the
    # step casts into before copying it up (param_buffer_of_bit16_for_cpu_offload_groups, 2),
    # at stage 1 as at stage 2 (one code path).
    (1, 18), (2, 18),
    # stage3.py keeps no 16-bit staging copy: estimate_zero3_model_states_mem_needs' 16.
    (3, 16),
])
def test_deepspeed_cpu_offload_host_bytes_per_element(tmp_path, stage, per_element):
    s = bare(tmp_path, 8, f"zero_stage = {stage}\nframework = 'deepspeed'\n"
             "optimizer_offload = 'cpu'")
    memory = stage_memory(s, stage)
    assert (memory.host_bytes, memory.nvme_bytes) == (per_element * PSI // 8, 0)


def test_nvme_host_buffers_and_drive_bytes(tmp_path):
    """ZeRO-Infinity with the optimizer and the parameters on NVMe, 8 ranks: a partition of
    5 x 10^8 elements. DeepSpeed's documented defaults (docs/_pages/config-json.md,
    offload_optimizer and offload_param; runtime/zero/offload_config.py): the optimizer swaps
    sub-groups of at most sub_group_size = 10^9 fp32 elements through buffer_count = 4 pinned
    buffers; parameters move through buffer_count = 5 buffers of buffer_size = 10^8 elements
    (16-bit). The host keeps the fp32 gradient partition; the drives hold the fp32 master, m
    and v (12 bytes per element) and the 16-bit parameters (2)."""
    s = bare(tmp_path, 8, "zero_stage = 3\nframework = 'deepspeed'\n"
             "optimizer_offload = 'nvme'\nparam_offload = 'nvme'")
    shard = PSI // 8
    gradient = 4 * shard
    optimizer_buffers = 4 * min(10**9, shard) * 4
    param_buffers = 5 * 10**8 * 2
    memory = stage_memory(s, 3)
    assert memory.host_bytes == gradient + optimizer_buffers + param_buffers == 11 * 10**9
    assert memory.nvme_bytes == (12 + 2) * shard


def test_nvme_optimizer_buffers_hold_a_whole_small_partition(tmp_path):
    """A partition smaller than a sub-group (Ψ / 8 = 5 x 10^8 < 10^9) fills each of the 4
    buffers: stage 2 holds the gradient, the 16-bit staging copy and 4 x 4 bytes per element."""
    s = bare(tmp_path, 8, "zero_stage = 2\nframework = 'deepspeed'\noptimizer_offload = 'nvme'")
    shard = PSI // 8
    memory = stage_memory(s, 2)
    assert memory.host_bytes == (4 + 2 + 4 * 4) * shard
    assert memory.nvme_bytes == 12 * shard


def estimator_numbers() -> list[float]:
    """The GB figures of the DeepSpeed estimator line `zerosim memory` prints for Llama-2-7B,
    64 GPUs on 8 nodes, ZeRO-3 with optimizer offload: DeepSpeed's GPU, its CPU per node, x 1.5,
    and zerosim's host bytes per node."""
    result = run_zerosim("memory", LLAMA, "--set", "training.optimizer_offload='cpu'", "--set",
                         "training.zero_stage=3")
    assert result.code == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("DeepSpeed's estimator"))
    return [float(x) for x in re.findall(r"(\d+\.\d\d) GB", line)]


def test_the_deepspeed_estimator_line_reads_right():
    """estimate_zero3_model_states_mem_needs (zero_init, no parameter offload): 16 Ψ / 8 nodes
    on the host, x 1.5; zerosim's host bytes per node: 16 Ψ / 64 per rank x 8 ranks (the same
    bytes, without the factor)."""
    cpu = 16 * LLAMA_PSI / 8
    assert estimator_numbers()[1:] == [round(cpu / 1e9, 2), round(1.5 * cpu / 1e9, 2),
                                       round(16 * (LLAMA_PSI // 64) * 8 / 1e9, 2)]
    assert estimator_numbers()[1:] == [13.48, 20.22, 13.48]


def test_the_deepspeed_estimator_gpu_figure_is_deepspeeds():
    """DeepSpeed's GPU figure: 4 bytes x its largest_layer_params plus 2 Ψ / 64. model_to_params
    counts each module's own parameters (recurse=False), so Llama's largest "layer" is an
    embedding (32000 x 4096), not a decoder block."""
    gpu = 4 * 32000 * 4096 + 2 * LLAMA_PSI // 64
    assert estimator_numbers()[0] == round(gpu / 1e9, 2) == 0.73


@pytest.mark.parametrize("stage, grads", [
    (1, 2 * PSI),          # stage 1 keeps every gradient in fp16; reduce_dtype is stage 2-3's
    (2, 4 * PSI // 8),     # stage 2 keeps its partition, reduced in fp32
    (3, 4 * PSI // 8),
])
def test_gradients_reduced_in_fp32(tmp_path, stage, grads):
    s = bare(tmp_path, 8, f"zero_stage = {stage}\nreduce_dtype = 'fp32'")
    assert stage_memory(s, stage).grads_bytes == grads


def test_fsdp2_stage_2_peak_by_hand(tmp_path):
    """FSDP2 at stage 2 (reshard_after_forward=False) on 8 ranks, Ψ = 4 x 10^9 in 4 layers, a
    bare model (no activations): at the start of backward each rank holds its fp32 parameter
    shard (4 Ψ/8) and Adam's moments (8 Ψ/8), every unit gathered in fp16 (2 Ψ), the gradients
    of two layers in flight (2 x 2 Ψ/4) and no gradient shard yet. By the end of backward the
    gathered units are freed and the fp32 gradient shard (4 Ψ/8) exists: 16 Ψ/8 + 2 x 2 Ψ/4,
    less. The peak is the first."""
    s = bare(tmp_path, 8, "zero_stage = 2\nframework = 'fsdp2'\nactivation_checkpointing = 'full'")
    start_of_backward = 12 * PSI // 8 + 2 * PSI + 2 * 2 * PSI // 4
    end_of_backward = 16 * PSI // 8 + 2 * 2 * PSI // 4
    assert start_of_backward > end_of_backward
    assert stage_memory(s, 2).peak_bytes == start_of_backward == 18 * 10**9
