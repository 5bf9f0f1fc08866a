"""Host and NVMe memory under offload (ZeRO-Offload, ZeRO-Infinity), per rank, and DeepSpeed's
own estimators of it, quoted as a cross-check (deepspeed_zero2_estimate, deepspeed_zero3_estimate,
estimator_lines): what DeepSpeed allocates is the model (offload_bytes, used by
memory.stage_memory); its estimators are what its users plan with, and where they add a safety
factor the report says so.
"""

from __future__ import annotations

from zerosim.analytic.model import max_gather_window, total_params
from zerosim.frameworks import framework_of
from zerosim.units import BYTES_PER_ELEMENT, FP32_BYTES

# DeepSpeed's host buffers for NVMe offload (runtime/zero/offload_config.py defaults): the
# optimizer swaps sub-groups of at most sub_group_size = 1e9 fp32 elements through
# buffer_count = 4 pinned buffers; parameters move through buffer_count = 5 buffers of
# buffer_size = 1e8 elements.
NVME_OPTIMIZER_BUFFERS, NVME_SUB_GROUP = 4, 10**9
NVME_PARAM_BUFFERS, NVME_PARAM_BUFFER = 5, 10**8


def offload_bytes(t, stage: int, shard: int, moments: int) -> tuple[int, int]:
    """(host, NVMe) bytes per rank of an offloaded optimizer (and stage 3's parameters) over a
    shard of `shard` elements, with `moments` fp32 moments per element (memory.MOMENTS).
    ZeRO-Offload (Ren et al. 2021, arXiv:2101.06840) §4.1: the optimizer states and the
    gradient partition they update live off the GPU. As DeepSpeed implements it the host holds
    an fp32 master copy (the GPU keeps its own working parameters), the gradient partition in
    fp32 and the moments: 4 + 4 + 4 x moments bytes per
    element, 16 for Adam, the 16 of estimate_zero3_model_states_mem_needs. DeepSpeed's stages
    1-2 add a pinned 16-bit copy of the partition that the step casts into before copying it up
    (stage_1_and_2.py, param_buffer_of_bit16_for_cpu_offload_groups): 18. Parameter offload adds
    the 16-bit parameter shard: 18, the estimator's figure with offload_param. On NVMe the
    master, the moments (and the offloaded parameters) move to the drives and the host keeps
    the gradient and DeepSpeed's swap buffers (NVME_*)."""
    bp = BYTES_PER_ELEMENT[t.precision]
    states = FP32_BYTES + FP32_BYTES * moments
    host, nvme = FP32_BYTES * shard, 0
    if framework_of(t).pinned_bit16_host_partition(t, stage):
        host += bp * shard
    if t.optimizer_offload == "nvme":
        nvme += states * shard
        host += NVME_OPTIMIZER_BUFFERS * min(NVME_SUB_GROUP, shard) * FP32_BYTES
    else:
        host += states * shard
    if stage == 3 and t.param_offload == "cpu":
        host += bp * shard
    elif stage == 3 and t.param_offload == "nvme":
        nvme += bp * shard
        host += NVME_PARAM_BUFFERS * min(NVME_PARAM_BUFFER, shard) * bp
    return host, nvme


# DeepSpeed's additional_buffer_factor: its estimators multiply the CPU bytes, and only them,
# by it "to be conservative" (docs/code-docs/source/memory.rst).
DEEPSPEED_BUFFER_FACTOR = 1.5


def deepspeed_zero2_estimate(psi: int, gpus_per_node: int, nodes: int,
                             cpu_offload: bool) -> tuple[int, float]:
    """(GPU bytes per GPU, CPU bytes before the 1.5 factor) of DeepSpeed's
    estimate_zero2_model_states_mem_needs (runtime/zero/stage_1_and_2.py at edaa722): offload,
    2 Ψ and Ψ max(4 total GPUs, 16); without, 2 Ψ + int(18 Ψ / total GPUs) and 4 Ψ per GPU
    of the node (each rank's fp32 model built on the host before it is partitioned)."""
    total = gpus_per_node * nodes
    if cpu_offload:
        return 2 * psi, psi * max(4 * total, 16)
    return 2 * psi + int(18 * psi / total), psi * 4 * gpus_per_node


def deepspeed_zero3_estimate(psi: int, largest_layer: int, gpus_per_node: int, nodes: int,
                             cpu_offload: bool, cpu_offload_params: bool,
                             zero_init: bool = True) -> tuple[int, float]:
    """(GPU bytes per GPU, CPU bytes per node before the 1.5 factor) of DeepSpeed's
    estimate_zero3_model_states_mem_needs (runtime/zero/stage3.py at edaa722): the largest
    layer's 16-bit parameters and gradients on the GPU (4 bytes per parameter), the partitions
    on the host: 18 bytes per parameter with parameter offload, 16 without (split over the
    nodes: gpus_factor = 1 / nodes); without zero_init each rank first builds the fp32 model."""
    total, gpus_factor = gpus_per_node * nodes, 1 / nodes
    largest = 4 * largest_layer
    if cpu_offload and cpu_offload_params:
        gpu, per_param = largest, 18
    elif cpu_offload:
        gpu, per_param = largest + int(2 * psi / total), 16
    else:
        gpu = largest + int(18 * psi / total)
        cpu = largest_layer * 4 * gpus_per_node if zero_init else psi * 4 * gpus_per_node
        return gpu, cpu
    if zero_init:
        return gpu, psi * per_param * gpus_factor
    return gpu, psi * max(4 * gpus_per_node, per_param * gpus_factor)


def largest_module_params(m) -> int:
    """DeepSpeed's largest_layer_params: its model_to_params (runtime/zero/stage3.py) takes the
    most parameters any one module holds itself (`parameters(recurse=False)`), so a linear's
    weight and bias, or the token embedding, never a whole decoder block. A bare Ψ has no
    modules: its one gather unit stands in."""
    if m.is_bare:
        return max_gather_window(m, 1)
    h, f, kv, bias = m.hidden, m.ffn_width, m.kv_width, 1 if m.bias else 0
    q = m.q_width  # a tensor-parallel rank's Q and attention output (h at t = 1)
    qb = 1 if m.qkv_biased else 0
    linears = [out * inp + b * out
               for out, inp, b in ((q, h, qb), (kv, h, qb), (f, h, bias), (h, f, bias),
                                   (h, q, bias))]
    embeddings = [m.vocab * h] + ([m.max_seq_len * h] if m.position == "learned" else [])
    return max(linears + embeddings)


def estimator_lines(scenario, host_bytes_per_rank: int) -> list[str]:
    """DeepSpeed's estimate for the scenario's offload beside zerosim's host bytes per node,
    saying where its 1.5 goes; none without offload or for stages its estimators do not cover."""
    t, c = scenario.training, scenario.cluster
    if t.optimizer_offload == "none" or t.zero_stage == 0:
        return []
    if "nvme" in (t.optimizer_offload, t.param_offload):
        return ["DeepSpeed's estimators cover offload to the CPU only: none is quoted for nvme"]
    tp = scenario.parallelism.tensor_parallel
    if tp > 1:  # their shards are Ψ / (nodes x GPUs per node): every GPU data-parallel
        return [f"DeepSpeed's estimators assume every GPU is data-parallel: none is quoted "
                f"beside parallelism.tensor_parallel = {tp}"]
    m = scenario.model
    psi, n, k = total_params(m), min(c.gpus_per_node, c.world_size), c.nodes
    if t.zero_stage == 3:
        gpu, cpu = deepspeed_zero3_estimate(psi, largest_module_params(m), n, k, True,
                                            t.param_offload != "none")
        where = "stage3.py estimate_zero3_model_states_mem_needs"
    else:
        gpu, cpu = deepspeed_zero2_estimate(psi, n, k, True)
        where = "stage_1_and_2.py estimate_zero2_model_states_mem_needs"
    return [f"DeepSpeed's estimator ({where}): GPU {gpu / 1e9:.2f} GB per GPU, CPU "
            f"{cpu / 1e9:.2f} GB per node, x {DEEPSPEED_BUFFER_FACTOR:g} = "
            f"{cpu * DEEPSPEED_BUFFER_FACTOR / 1e9:.2f} GB (its additional_buffer_factor "
            f"multiplies the CPU bytes only); zerosim's host, stage {t.zero_stage}: "
            f"{host_bytes_per_rank * n / 1e9:.2f} GB per node"]
