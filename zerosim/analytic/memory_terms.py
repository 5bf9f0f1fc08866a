"""What frameworks hold beyond the ZeRO paper's accounting (training.framework, reduce_dtype,
gradient_as_bucket_view): the loss's fp32 transients, DDP's bucket copies, the optimizer step's
temporaries, FSDP2's fp32 shards and gradients made in backward. memory.py adds them to the
stages' model states (and re-exports them)."""

from __future__ import annotations

from zerosim.contract import PASSES
from zerosim.scenario.config import TrainingConfig
from zerosim.units import BYTES_PER_ELEMENT, FP32_BYTES


def loss_blocks(m, t: TrainingConfig) -> dict[str, list[int]]:
    """The tensors fp32 cross-entropy over the vocabulary allocates beside the activations, per
    phase in order, as torchtitan and Hugging Face compute it (logits.float(), log_softmax,
    nll_loss); not under "zero", whose accounting keeps only the log-probabilities activations()
    counts. Forward: the 16-bit logits and their fp32 copy (under fp32 the logits alone).
    Backward: nll_loss's and log_softmax's fp32 gradients. Read off an H100 FSDP2 trace
    (profiles/h100/allocator_trace_llama_1b_*.json.gz, events 1396-1415): 2, 4, [4 kept], 4, 4
    bytes per token and vocabulary entry."""
    if m.is_bare or t.seq_len is None or t.framework == "zero":
        return {phase: [] for phase in PASSES}
    w = BYTES_PER_ELEMENT[t.precision]  # activations are in the compute dtype
    entries = t.micro_batch * t.seq_len * m.vocab
    forward = [w * entries] + ([FP32_BYTES * entries] if w != FP32_BYTES else [])
    return dict(zip(PASSES, (forward, [FP32_BYTES * entries, FP32_BYTES * entries])))


def loss_transient_bytes(m, t: TrainingConfig) -> int:
    """The most loss_blocks holds at once, every layer's activations alive: (w + 4) tokens V
    bytes in forward, 8 tokens V in backward (w = 2 or 4: backward's is the larger)."""
    return max((sum(blocks) for blocks in loss_blocks(m, t).values()), default=0)


def persistent_buffer_bytes(t: TrainingConfig, stage: int, psi: int) -> int:
    """Buffers alive all step beyond the model states: DDP's gradient buckets, a second copy of
    every gradient unless gradient_as_bucket_view (torch.nn.parallel.DistributedDataParallel)."""
    if t.framework == "ddp" and stage == 0 and not t.gradient_as_bucket_view:
        return BYTES_PER_ELEMENT[t.precision] * psi
    return 0


def step_transient_bytes(t: TrainingConfig, stage: int, elements: int) -> int:
    """What the optimizer step holds beyond the states, over the `elements` it updates:
    - DeepSpeed under mixed precision converts the rank's reduced gradient partition to fp32
      (stage_1_and_2.py and stage3.py: the fp32 partition's .grad), 4 bytes per element, for the
      step's duration (on the host under offload);
    - foreach_adam takes the square root of every second moment into new tensors
      (torch/optim/adam.py, _multi_tensor_adam: _foreach_sqrt), 4 bytes per element: on an H100
      4,000,002,048 bytes for 10^9 elements, none fused (profiles/h100/microbench_2026-11-24.json)."""
    if t.optimizer_offload != "none":
        return 0
    if t.framework == "deepspeed" and stage >= 1 and t.precision != "fp32":
        return FP32_BYTES * elements
    if foreach_adam(t):
        return FP32_BYTES * elements
    return 0


def foreach_adam(t: TrainingConfig) -> bool:
    """torch.optim's Adam/AdamW, foreach (CUDA's default), as FSDP2 and DDP runs step it."""
    return t.framework in ("fsdp2", "ddp") and t.optimizer in ("adam", "adamw")


def fp32_shards_are_the_master(t: TrainingConfig, stage: int) -> bool:
    """FSDP2 (fully_shard, MixedPrecisionPolicy) keeps each parameter shard in fp32 and casts
    it only into the all-gather's input; the optimizer steps those shards, and their gradients
    are fp32 whatever reduce_dtype (_fully_shard/_fsdp_param.py, _fsdp_collectives.py): 4 + 4
    + 4 x moments bytes per shard element, 16 for Adam, not 2 + 2 + 12. On an H100 (profiles/
    h100/fsdp2_memory_2026-11-24.json, Llama-2-7B, 8-way): 12.67 GiB after the step, 16 x
    842,301,952 bytes = 12.55 GiB."""
    return (t.framework == "fsdp2" and stage >= 2 and t.precision != "fp32"
            and t.optimizer_offload == "none")  # offload: the (DeepSpeed) accounting below


def grads_made_in_backward(t: TrainingConfig, stage: int) -> bool:
    """FSDP2 makes each sharded gradient as its unit's reduce-scatter completes; zero_grad
    (set_to_none, torch's default since 2.0) frees them before the next forward. The others keep
    a persistent gradient buffer. On an H100 (profiles/h100/fsdp2_memory_*.json) forward's end
    held the fp32 shard, the moments and the activations: no gradient."""
    return t.framework == "fsdp2" and stage >= 2


def keeps_gathered_parameters(t: TrainingConfig, stage: int) -> bool:
    """FSDP2's stage 2, reshard_after_forward=False (SHARD_GRAD_OP): each unit gathered before
    its forward stays, 16-bit, to the end of its backward (which gathers nothing)."""
    return t.framework == "fsdp2" and stage == 2
