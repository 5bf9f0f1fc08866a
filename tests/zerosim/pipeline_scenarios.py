"""The scenarios the pipeline tests share, as TOML text (each test file writes it to a file and
sets what it varies): an 8-layer GPT on 2 nodes x 8 A100s, and the same shape on a cluster whose
links and rates are typed in, so that its times can be counted by hand."""

GPT_8L = """
[model]
name = "GPT 8L"
layers = 8
hidden = 1024
heads = 16
vocab = 32768
max_seq_len = 2048
[cluster]
nodes = 2
gpus_per_node = 8
gpu = "A100-80GB"
[training]
zero_stage = 1
precision = "bf16"
micro_batch = 2
seq_len = 2048
gradient_accumulation = 8
flash_attention = false
[parallelism]
pipeline_parallel = 4
pipeline_schedule = "1f1b"
"""
"""A GPT (learned positions, layer norms and biases, tied head) of 8 layers, h = 1024, a = 16,
v = 32768, positions 2048; 2 nodes x 8 GPUs; b = 2, s = 2048, bf16, Adam; m = 8, p = 4."""


def flat_gpt(layers: int, micro_batches: int, stages: int, extra: str = "") -> str:
    """A GPT of h = 1024, V = 16384, s = 2048 learned positions, b = 1, on 2 nodes x 8 GPUs
    whose links and rates are typed in: NVLink 100 GB/s + 5 us, each GPU's share of the NICs
    25 GB/s + 10 us, 312 TFLOP/s at 50% (the flat compute model), HBM 2000 GB/s."""
    return f"""
[model]
layers = {layers}
hidden = 1024
heads = 16
vocab = 16384
max_seq_len = 2048
[cluster]
nodes = 2
gpus_per_node = 8
gpu = "A100-80GB"
peak_tflops = 312
compute_efficiency = 0.5
hbm_bandwidth_GBps = 2000
intra_node_bandwidth_GBps = 100
intra_node_latency_us = 5
inter_node_bandwidth_GBps = 25
inter_node_latency_us = 10
[training]
zero_stage = 1
precision = "bf16"
micro_batch = 1
seq_len = 2048
gradient_accumulation = {micro_batches}
flash_attention = false
[parallelism]
pipeline_parallel = {stages}
pipeline_schedule = "1f1b"
{extra}"""
