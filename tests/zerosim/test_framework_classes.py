"""Frameworks as classes (zerosim/frameworks/): each answers what its framework does, written out
by hand from the sources each method cites, and `training.framework` accepts exactly the
registry's names and stages."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.conftest import ZERO_PAPER, run_zerosim
from zerosim.errors import InputError
from zerosim.frameworks import FRAMEWORKS, REGISTRY, framework_of
from zerosim.scenario.load import load_scenario

T = SimpleNamespace(precision="bf16", optimizer="adam", optimizer_offload="none",
                    gradient_as_bucket_view=False, seq_len=4, micro_batch=2, framework="zero",
                    compute_dtype="bf16")
MODEL = SimpleNamespace(is_bare=False, vocab=10)


def test_the_registry_is_the_five_frameworks_default_first():
    assert FRAMEWORKS == ("zero", "deepspeed", "fsdp2", "ddp", "fsdp1")
    assert {name: REGISTRY[name].stages for name in FRAMEWORKS} == {
        "zero": (0, 1, 2, 3), "deepspeed": (0, 1, 2, 3), "fsdp2": (2, 3), "ddp": (0,),
        "fsdp1": (2, 3)}


@pytest.mark.parametrize("name, stage", [("fsdp2", 1), ("ddp", 2), ("ddp", 3), ("fsdp1", 0)])
def test_a_stage_the_framework_does_not_run_is_refused(name, stage):
    with pytest.raises(InputError, match=f"training.framework = '{name}' runs ZeRO stage"):
        load_scenario(ZERO_PAPER, [f"training.framework={name}", f"training.zero_stage={stage}"])


def test_loss_blocks_are_every_framework_but_the_papers():
    """2 x 4 tokens x 10 entries: bf16 logits 160 B and their fp32 copy 320 B in forward,
    two fp32 gradients of 320 B in backward; "zero" holds none."""
    for name in ("deepspeed", "fsdp2", "ddp", "fsdp1"):
        assert REGISTRY[name].loss_blocks(MODEL, T) == {"forward": [160, 320],
                                                        "backward": [320, 320]}
        assert REGISTRY[name].loss_transient_bytes(MODEL, T) == 640
    assert REGISTRY["zero"].loss_blocks(MODEL, T) == {"forward": [], "backward": []}


def test_step_transients_by_hand():
    """1000 elements: DeepSpeed's fp32 gradient partition (stages 1-3, mixed precision) and foreach
    Adam's square roots (FSDP2, DDP) are 4 B each; none under offload or for "zero"."""
    got = {name: [REGISTRY[name].step_transient_bytes(T, stage, 1000) for stage in range(4)]
           for name in FRAMEWORKS}
    assert got == {"zero": [0, 0, 0, 0], "deepspeed": [0, 4000, 4000, 4000],
                   "fsdp2": [4000] * 4, "ddp": [4000] * 4, "fsdp1": [4000] * 4}
    offloaded = SimpleNamespace(**{**vars(T), "optimizer_offload": "cpu"})
    assert REGISTRY["deepspeed"].step_transient_bytes(offloaded, 2, 1000) == 0
    sgd = SimpleNamespace(**{**vars(T), "optimizer": "sgd"})
    assert REGISTRY["fsdp2"].step_transient_bytes(sgd, 3, 1000) == 0


def test_what_only_fsdp2_ddp_and_deepspeed_do():
    fsdp2, ddp, ds = REGISTRY["fsdp2"], REGISTRY["ddp"], REGISTRY["deepspeed"]
    assert [fsdp2.keeps_gathered_parameters(T, s) for s in range(4)] == [False, False, True, False]
    assert [fsdp2.grads_made_in_backward(T, s) for s in range(4)] == [False, False, True, True]
    assert [fsdp2.copies_through_flat_buffers(T, s) for s in range(4)] == [False, False, True, True]
    assert fsdp2.fp32_shards_are_the_master(T, 3)
    assert not fsdp2.fp32_shards_are_the_master(SimpleNamespace(**{**vars(T), "precision": "fp32"}), 3)
    assert ddp.persistent_buffer_bytes(T, 0, 1000) == 2000  # a bf16 copy of every gradient
    assert ddp.persistent_buffer_bytes(SimpleNamespace(**{**vars(T), "gradient_as_bucket_view": True}),
                                       0, 1000) == 0
    assert [ds.pinned_bit16_host_partition(T, s) for s in range(4)] == [False, True, True, False]
    for other in ("zero", "deepspeed"):
        f = REGISTRY[other]
        assert (f.offloads, f.runs_zeropp) == (True, True)
        assert not any(f.keeps_gathered_parameters(T, s) or f.grads_made_in_backward(T, s)
                       for s in range(4))
    assert (fsdp2.offloads, fsdp2.runs_zeropp, ddp.offloads, ddp.runs_zeropp) == (False,) * 4


def test_framework_of_reads_the_training_table():
    assert framework_of(load_scenario(ZERO_PAPER, ["training.framework=deepspeed"]).training) \
        is REGISTRY["deepspeed"]


@pytest.mark.parametrize("sets", [["training.framework=foo", "training.optimizer_offload=cpu",
                                   "training.zero_stage=2"],
                                  ["training.framework=FSDP2", "training.zero_stage=3",
                                   "training.quantized_weights=true"]])
def test_an_unknown_framework_is_one_line_before_any_class_is_asked(sets):
    out = run_zerosim("memory", str(ZERO_PAPER), *[a for s in sets for a in ("--set", s)])
    assert out.code == 2 and out.stderr.count("\n") == 1 and "training.framework" in out.stderr


def test_which_frameworks_wait_for_their_pipeline_sends():
    """Megatron-LM's non-interleaved schedules wait on their p2p requests (schedules.py refuses
    overlap_p2p_comm there), its interleaved one overlaps them; DeepSpeed's PipelineEngine sends
    with a blocking dist.send; torch.distributed.pipelining's isends are waited later."""
    from zerosim.frameworks import REGISTRY

    blocks = {name: tuple(fw.pipeline_sends_block(s) for s in ("gpipe", "1f1b",
                                                                "interleaved_1f1b"))
              for name, fw in REGISTRY.items()}
    assert blocks == {"zero": (True, True, False), "deepspeed": (True, True, True),
                      "fsdp2": (False, False, False), "ddp": (False, False, False),
                      "fsdp1": (False, False, False)}

