"""PyTorch's FSDP1 (`framework = "fsdp1"`, FullyShardedDataParallel; fairscale's FSDP before
it): one flat parameter per wrapped unit, the root unit kept gathered from forward through
backward, fp32 shards under its MixedPrecision, SHARD_GRAD_OP as stage 2."""

from __future__ import annotations

from zerosim.frameworks.fsdp2 import FSDP2


class FSDP1(FSDP2):
    """FSDP1 with each block wrapped (transformer_auto_wrap_policy) and the model's root around
    them: what it does as FSDP2 does (fp32 shards stepped as the master, gradients made by
    each unit's reduce-scatter, SHARD_GRAD_OP keeping every unit gathered), and what it does
    differently."""

    name = "fsdp1"
    pipeline_stages = ()
    pipeline_refusal = ("FSDP1 beside a pipeline is not modelled (torchtitan and Megatron-LM "
                        "pair pipelines with FSDP2 or their own data parallelism)")

    def keeps_root_gathered(self, t, stage: int) -> bool:
        """FULL_SHARD does not reshard the root unit after forward: its post-forward reshard
        frees the unsharded flat parameter only for a unit that is not the root
        (torch/distributed/fsdp/_runtime_utils.py, _post_forward_reshard: `not state._is_root
        and handle._sharding_strategy in RESHARD_AFTER_FORWARD_HANDLE_STRATEGIES`). The root
        holds what no wrapped block does (embeddings, final norm, head) in one flat parameter,
        gathered once in forward and freed after its backward."""
        return stage == 3

    def copies_through_flat_buffers(self, t, stage: int) -> bool:
        """No: the all-gather writes the unit's unsharded flat parameter itself, whose views are
        the module's parameters, and the unsharded flat gradient is reduce-scattered as it is
        (torch/distributed/fsdp/_flat_param.py, _all_gather_flat_param; _runtime_utils.py,
        _reduce_grad): no per-tensor copy kernels as FSDP2's."""
        return False

    def autocast_caches_weights(self, t) -> bool:
        """No: with use_orig_params=False (its default) the module's parameters are views into
        the unsharded flat parameter, not leaves, which autocast's cache skips
        (aten/src/ATen/autocast_mode.cpp, cached_cast)."""
        return False
