"""Review of issue 30's pipeline (sim/pipeline/, analytic/memory.py's pipeline_memory): when a
pipeline stage's data-parallel gradient reduction may start, and what FSDP2 beside a pipeline
holds, against the frameworks' source.

- Megatron-LM without --overlap-grad-reduce reduces every model chunk's gradients after the
  whole schedule: megatron/core/distributed/finalize_model_grads.py, finalize_model_grads calls
  each chunk's finish_grad_sync once forward_backward_func has returned, and
  megatron/core/distributed/distributed_data_parallel.py, finish_grad_sync, starts the
  reduction there when overlap_grad_reduce is False. So with training.overlap_comm = false no
  chunk's reduction may start before the stage's last forward or backward has ended, however
  many chunks the interleaved schedule gives a stage.
- torch.distributed.pipelining runs every backward of an FSDP2 stage with gradient sync off
  (torch/distributed/pipelining/stage.py, backward_maybe_with_nosync:
  set_requires_gradient_sync(False) on every micro-batch, the last included) and reduces in
  _PipelineStageBase.perform_reduce_grad, "scheduled after all microbatches W, B actions"
  (PyTorch 2.5's backward_maybe_with_nosync ran the same post_backward after the last backward's
  autograd call returned). So (a) no reduce-scatter starts before the stage's last backward has
  ended, and (b) between micro-batches FSDP2 accumulates each parameter's *unsharded* gradient
  (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py, post_backward: without
  reduce_grads it keeps the unsharded gradient and returns): from the first backward on, a rank
  holds its stage's whole gradient, at least 2 bytes an element in bf16, beside its kept bf16
  parameters (reshard_after_forward=False: 2 bytes an element).
"""

from zerosim.analytic.memory import pipeline_memory
from zerosim.scenario.load import load_scenario
from zerosim.sim.pipeline.step import simulate_pipeline
from tests.zerosim.pipeline_scenarios import flat_gpt

# 8 layers, h = 1024, V = 16384, s = 2048 learned positions; 16 GPUs, p = 2 (d = 8 at t = 1).
BASE = flat_gpt(8, 4, 2)

H, V, S = 1024, 16384, 2048
LAYER = 12 * H * H + 13 * H  # QKV, projection, two MLP matrices, their biases, two layer norms
EMBEDDING = V * H + S * H  # word + learned positions
PSI_STAGE0 = EMBEDDING + 4 * LAYER  # the embedding and layers 1-4
assert PSI_STAGE0 == 69_259_264


def scenario(write, *sets: str):
    return load_scenario(write("pp.toml", BASE), list(sets))


def reductions_and_last_op(run) -> tuple[list[float], float]:
    """(start of each data-parallel gradient reduction, end of the stage's last forward or
    backward) of one stage's simulated step."""
    starts = [e[2] for e in run.events if e[0] == "comm" and e[1] == "reduce"]
    last = max(e[3] for e in run.events if e[0] == "compute" and e[1] in ("forward", "backward"))
    return starts, last


def assert_reduced_after_the_schedule(result) -> None:
    """Every stage reduces something, and no reduction starts before its last op has ended."""
    for stage, run in enumerate(result.pipeline_runs):
        starts, last = reductions_and_last_op(run)
        assert starts, f"stage {stage} reduces nothing"
        early = [s for s in starts if s < last - 1e-12]
        assert not early, (f"stage {stage}: reductions start at {early}, before its last op "
                           f"ends at {last}")


def test_interleaved_chunks_reduce_after_the_schedule_without_overlap(write):
    """p = 2, v = 2, m = 4, overlap_comm = false: Megatron's finalize_model_grads reduces every
    chunk after the schedule, so each reduction starts at or after the stage's last op."""
    sc = scenario(write, "training.overlap_comm=false",
                  "parallelism.pipeline_schedule=interleaved_1f1b", "parallelism.virtual_stages=2")
    assert_reduced_after_the_schedule(simulate_pipeline(sc, 1))


def test_fsdp2_reduce_scatters_after_the_last_backward(write):
    """FSDP2 (zero_stage 2, reshard_after_forward=False) beside a 1F1B pipeline:
    torch.distributed.pipelining's perform_reduce_grad runs after every backward, so no
    reduce-scatter starts before the stage's last backward has ended."""
    sc = scenario(write, "training.framework=fsdp2", "training.zero_stage=2")
    assert_reduced_after_the_schedule(simulate_pipeline(sc, 2))


def test_fsdp2_beside_a_pipeline_holds_the_stage_s_unsharded_gradients(write):
    """Stage 0 of p = 2 (Ψ_0 = 69,259,264, d = 8), 1F1B, m = 4: its order F0 F1 B0 F2 B1 F3 B2
    B3 holds two micro-batches' activations at B1's start, after B0 made every unsharded
    gradient. What is held beside the activations then is at least the parameter and optimizer
    shards, the kept bf16 parameters (2 Ψ_0) and the accumulated bf16 gradients (2 Ψ_0)."""
    sc = scenario(write, "training.framework=fsdp2", "training.zero_stage=2")
    row = pipeline_memory(sc, 2)[0]
    beside_activations = row.peak_bytes - row.activations_bytes
    least = row.params_bytes + row.optimizer_bytes + 2 * PSI_STAGE0 + 2 * PSI_STAGE0
    assert beside_activations >= least, (beside_activations, least)


def test_deepspeed_runs_only_its_1f1b_schedule_beside_a_pipeline(write):
    """DeepSpeed's PipelineEngine.train_batch always runs schedule.TrainSchedule (deepspeed/
    runtime/pipe/engine.py; deepspeed/runtime/pipe/schedule.py: TrainSchedule is its one
    training schedule, 1F1B, with no model chunks): an interleaved schedule under
    training.framework = "deepspeed" is a combination the framework cannot run, one line and
    exit 2 (issue 30: "A combination a framework refuses ... is one line and exit 2")."""
    from tests.conftest import run_zerosim
    path = write("pp.toml", BASE)
    result = run_zerosim("memory", str(path), "--set", "training.framework=deepspeed",
                         "--set", "parallelism.pipeline_schedule=interleaved_1f1b",
                         "--set", "parallelism.virtual_stages=2")
    assert result.code == 2, result.stdout[:300]
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_hierarchical_collective_counts_both_tiers_bytes(write):
    """4 nodes x 8 GPUs, p = 2: stage 0's d = 16 ranks span two nodes, and NCCL's hierarchical
    algorithm moves a node's rings and the rings across nodes at once (collectives.Phase.
    alongside). Each rank still sends the flat ring's (n - 1)/n of the buffer per walk
    (hierarchical.py's closed form): ZeRO-1's reduce-scatter and all-gather of stage 0's bf16
    gradients, 15/16 x 2 x 69,259,264 = 129,861,120 bytes each; counting the node's tier alone
    (its 7/8 and the inter tier left out) said 121,203,712."""
    sc = load_scenario(write("pp.toml", BASE.replace("nodes = 2", "nodes = 4")),
                       ["cluster.collective_algorithm=hierarchical"])
    sent = simulate_pipeline(sc, 1).pipeline[0]["comm_bytes_per_rank"]
    expected = 15 * 2 * PSI_STAGE0 // 16
    assert sent["reduce_scatter"] == sent["all_gather"] == expected
