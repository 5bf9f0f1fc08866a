"""Second review of issue 30's pipeline: the review fixes (8a6c298) and the planner over 3-D,
against the frameworks' source and hand counts.

- FSDP2 beside torch.distributed.pipelining accumulates each unit's unsharded gradient in
  MixedPrecisionPolicy's reduce_dtype, not in the parameters' dtype: post_backward without
  reduce_grads calls FSDPParam.to_accumulated_grad_if_needed, which replaces the 16-bit
  unsharded gradient with `unsharded_grad.to(self.reduce_dtype)` (torch/distributed/fsdp/
  _fully_shard/_fsdp_param_group.py, post_backward; _fsdp_param.py,
  to_accumulated_grad_if_needed). With training.reduce_dtype = "fp32" (torchtitan's default)
  the stage's whole gradient is held in 4 bytes an element until perform_reduce_grad.
- plan's largest model beside a scenario's own pipeline (plan.py, _largest_layers) grows the
  model p v layers at a time: its layer count is those steps times p v.
- plan --allow pp's fewest GPUs (plan_space.fewest_gpus) weighs every (t, p, d) on the
  scenario's model, so a world that the scenario's own t0 x p0 does not divide is a layout too.
"""

from zerosim.analytic.memory import pipeline_memory
from zerosim.scenario.load import load_scenario
from zerosim.tradeoffs import plan as plan_module
from zerosim.tradeoffs.plan import largest_model
from zerosim.tradeoffs.plan_limits import fewest_gpus
from tests.zerosim.pipeline_scenarios import GPT_8L, flat_gpt

GiB = 2**30
GPT3 = "scenarios/gpt3_175b_1024gpu_3d.toml"

# flat_gpt: 8 layers, h = 1024, V = 16384, S = 2048 learned positions; p = 2 on 16 GPUs (d = 8)
H, V, S = 1024, 16384, 2048
LAYER = 12 * H * H + 13 * H  # QKV, projection, two MLP matrices, their biases, two layer norms
PSI_STAGE0 = V * H + S * H + 4 * LAYER  # the embedding, positions and layers 1-4
assert PSI_STAGE0 == 69_259_264


def test_fsdp2_accumulates_unsharded_gradients_in_the_reduce_dtype(write):
    """Stage 0 of p = 2 under FSDP2 (zero_stage 2), 1F1B, m = 4: switching reduce_dtype from
    the parameters' bf16 to fp32 turns the accumulated unsharded gradient of Ψ_0 elements from
    2 to 4 bytes each (to_accumulated_grad_if_needed, module docstring), so the buffers held
    beside the model states grow by 2 Ψ_0 = 138,518,528 bytes; nothing else of those buffers
    (the kept bf16 parameters, the p2p buffers, the loss's transient) depends on reduce_dtype."""
    path = write("pp.toml", flat_gpt(8, 4, 2))
    fsdp2 = ["training.framework=fsdp2", "training.zero_stage=2"]
    bf16 = pipeline_memory(load_scenario(path, fsdp2 + ["training.reduce_dtype=param"]), 2)[0]
    fp32 = pipeline_memory(load_scenario(path, fsdp2 + ["training.reduce_dtype=fp32"]), 2)[0]
    assert fp32.buffers_bytes - bf16.buffers_bytes == 2 * PSI_STAGE0, (
        bf16.buffers_bytes, fp32.buffers_bytes)


def test_largest_model_beside_a_pipeline_reports_the_model_s_layers():
    """GPT-3 175B's scenario (t = 8, p = 8, 1F1B, ZeRO-1): the largest model's layer count must
    be the model whose parameters plan reports. A tied GPT of L layers has V h + S h + L (12 h^2
    + 13 h) + 2 h parameters (word and position embeddings, the layers, the final norm), with
    h = 12288, V = 50257, S = 2048; so L = (params - V h - S h - 2 h) / (12 h^2 + 13 h)."""
    h, vocab, positions = 12288, 50257, 2048
    sc = load_scenario(GPT3)
    found = largest_model(sc, 1, 79 * GiB)
    layers = (found["max_params_whole"] - vocab * h - positions * h - 2 * h) / (12 * h * h
                                                                                 + 13 * h)
    assert layers == found["max_layers"], (layers, found)


def test_largest_model_beside_a_pipeline_ends_for_a_small_model(write, monkeypatch):
    """The 8-layer GPT (h = 1024) at p = 4, d = 4 on 80 GiB GPUs: a layer is 12,596,224
    parameters, so a stage under ZeRO-1 holds at least (2 + 2 + 12 / 4) = 7 bytes a parameter
    of its quarter of the layers, and no model past 80 GiB x 4 / (7 x 12,596,224) = 3,900 layers
    fits. A model of a million layers (12.6T parameters) is never worth pricing; plan.py's
    _largest_layers bisects from 2**53 / (a layer x p v), about 178 million layers a chunk,
    and `zerosim plan` of this scenario ran past 60 s (killed) in the memory model's walk of
    every unit. plan_space._most doubles from 1 for this reason."""
    priced = []
    real = plan_module.stage_memory

    def guarded(scenario, stage):
        priced.append(scenario.model.n_layers)
        assert scenario.model.n_layers <= 1_000_000, (
            f"priced a model of {scenario.model.n_layers:,} layers")
        return real(scenario, stage)

    monkeypatch.setattr(plan_module, "stage_memory", guarded)
    found = largest_model(load_scenario(write("gpt8l.toml", GPT_8L)), 1, 80 * GiB)
    assert 0 < found["max_params_whole"] < 3_900 * 12_596_224 + 40 * 10**6, found


def test_fewest_gpus_with_a_pipeline_is_not_tied_to_the_scenario_s_own_t_p():
    """GPT-3 175B (scenario t = 8, p = 8) with --allow pp (t = 8): at t = 8, p = 6, d = 1 (48
    GPUs, 6 nodes), ZeRO-1 holds 16 bytes a parameter of a stage's slice: stage 0 has the
    embedding's slice (50257 x 12288 / 8), the positions (2048 x 12288) and 16 layers of
    (12 h^2 + 13 h) / 8, about 3.7B parameters, 55.5 GiB; 1F1B holds 6 micro-batches of 16
    layers of selective recomputation's 34 s b h / t bytes (Korthikanti et al. 2022, Table 2,
    with sequence parallelism) = 6 x 16 x 34 x 2048 x 12288 / 8 = 9.6 GiB; about 65 GiB in
    79 GiB. Below 48 no world fits: 32 GPUs hold at least 16 bytes x 175B / 32 = 81.5 GiB of
    states each at d = 1 (d = 2 halves the optimizer's 12 bytes but splits the model half as
    many ways: 10 bytes x 175B / 16), and 40 GPUs split it at most 8 ways (t p divides 40,
    p divides 96), 6.4 bytes x 175B / 8 at d = 5. The
    fewest is 48, not the scenario's own 64."""
    sc = load_scenario(GPT3)
    found = fewest_gpus(sc, ("pp",), sc.cluster.hardware.memory_bytes)
    assert found is not None and found["world_size"] == 48, (found or {}).get("label")
