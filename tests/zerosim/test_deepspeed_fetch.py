"""DeepSpeed ZeRO-3's fetch plan against plans derived by hand from its coordinator's algorithm
(docs/research/deepspeed_zero3_fetch.md, "Model for a simulator"), and the step that runs it."""

from __future__ import annotations

import pytest

from zerosim.analytic.fetch import fetches_by_module, module_visits, planned
from zerosim.analytic.memory import stage_memory
from zerosim.errors import InputError
from zerosim.frameworks import REGISTRY
from zerosim.frameworks.deepspeed_fetch import Visit, fetch_plan
from zerosim.scenario.load import load_scenario
from zerosim.sim.engine import simulate

from tests.conftest import SCENARIOS

DS = REGISTRY["deepspeed"]
H, V = 1024, 50304
WTE = V * H  # 51,511,296
WEIGHTS = [3 * H * H, H * H, 4 * H * H, 4 * H * H]  # QKV, out, fc1, fc2


def small(*sets: str):
    """The research note's worked example: h 1024, 2 GELU layers with biases and LayerNorms,
    vocab 50304 tied, no learned positions; 8 ranks of one node."""
    return load_scenario(SCENARIOS / "llama2_7b_64gpu.toml", [
        "model.layers=2", "model.hidden=1024", "model.heads=16", "model.ffn=4096",
        "model.vocab=50304", "model.mlp='gelu'", "model.norm='layernorm'", "model.bias=true",
        "model.tied_embeddings=true", "model.position='rope'", "model.max_seq_len=1024",
        "training.seq_len=1024", "training.framework='deepspeed'", "training.zero_stage=3",
        "training.precision='bf16'", "training.activation_checkpointing='none'",
        "cluster.nodes=1", "cluster.gpus_per_node=8", *sets])


def plan_of(s):
    t = s.training
    return planned(s.model, t, DS, 2)


def test_the_worked_example_by_hand():
    """Persistent: per layer 2 LayerNorms (w, b) and 4 biases = 8 vectors, + the final
    LayerNorm's 2: 18 parameters, 2 x (4 x 1024 + 3072 + 1024 + 4096 + 1024) + 2048 = 28,672.
    Forward: the root's visit prefetches the token table alone (51.5M >= the 5e7 bucket); the
    table's own visit prefetches every other weight in one call (25.2M < 5e7). The whole trace
    is under the 1e9 reuse distance: nothing is released before backward, which gathers none.
    One reduce-scatter of every gradient (76,705,792 < the bucket); 18 re-gathers after the
    step."""
    plan, visits, sizes = plan_of(small("training.reduce_bucket_MiB=953.67431640625"))
    assert len(plan.persistent) == 18
    assert sum(sizes[p] for p in plan.persistent) == 2 * (4 * H + 3 * H + H + 4 * H + H) + 2 * H
    assert [(g.visit, g.elements, g.prefetch) for g in plan.gathers] == [
        (0, WTE, True), (1, 2 * sum(WEIGHTS), True)]
    assert all(visits[g.visit].phase == "forward" for g in plan.gathers)
    assert plan.peak_live_elements == WTE + 2 * sum(WEIGHTS) == 76_677_120
    assert plan.reduce_scatters == ((len(visits) - 1, sum(sizes)),)
    assert sum(sizes) == 76_705_792
    assert sorted(plan.post_step_gathers) == sorted(sizes[p] for p in plan.persistent)
    released_in_forward = [p for s, r in enumerate(plan.releases) for p in r
                           if visits[s].phase == "forward"]
    assert released_in_forward == []


def test_no_prefetch_and_no_reuse_gather_every_module_on_demand_each_pass():
    """Bucket 0, reuse distance 0: each visit gathers its own weights when it needs them and
    releases them after: forward the table, 2 x 4 weights, the head's table again; backward the
    same 10 in reverse (the head's table released after the head, gathered again for the
    embedding)."""
    s = small()
    visits, sizes = module_visits(s.model, s.training)
    plan = fetch_plan(visits, sizes, prefetch_bucket=0, max_reuse=0)
    assert not any(g.prefetch for g in plan.gathers)
    forward = [g.elements for g in plan.gathers if visits[g.visit].phase == "forward"]
    backward = [g.elements for g in plan.gathers if visits[g.visit].phase == "backward"]
    assert forward == [WTE, *WEIGHTS, *WEIGHTS, WTE]
    assert backward == [WTE, *reversed(WEIGHTS), *reversed(WEIGHTS), WTE]
    assert plan.peak_live_elements == WTE  # one module at a time


def test_the_prefetch_stops_at_its_budget_and_the_live_limit():
    """A 5M-element bucket: each visit prefetches along the trace until 5M is reached, at least
    one parameter (every weight here is over 1M); max_live caps the budget."""
    s = small()
    visits, sizes = module_visits(s.model, s.training)
    plan = fetch_plan(visits, sizes, prefetch_bucket=5_000_000, max_reuse=0)
    for g in plan.gathers:
        if g.prefetch and len(g.params) > 1:
            assert g.elements - sizes[g.params[-1]] < 5_000_000
    tight = fetch_plan(visits, sizes, prefetch_bucket=5_000_000, max_live=0, max_reuse=0)
    assert not any(g.prefetch for g in tight.gathers)


def test_a_threshold_of_zero_persists_nothing_and_gathers_the_norms():
    plan, _, _ = plan_of(small("training.param_persistence_threshold=0"))
    assert plan.persistent == frozenset() and plan.post_step_gathers == ()


def test_the_reduce_buckets_flush_before_they_would_overflow():
    """A 4M-element bucket (8 MB of bf16): a bucket is flushed when the next gradient would
    overflow it, so no flush but a lone gradient's exceeds it, and the flushes sum to every
    gradient once."""
    plan, _, sizes = plan_of(small("training.reduce_bucket_MiB=7.62939453125"))
    flushed = [elements for _, elements in plan.reduce_scatters]
    assert sum(flushed) == sum(sizes)
    assert all(e <= 4_000_000 or e in sizes for e in flushed)
    assert len(flushed) > 1


def test_the_step_launches_the_plans_all_gathers_and_reduce_scatters():
    s = small("training.gradient_accumulation=3")
    plan, _, _ = plan_of(s)
    result = simulate(s, 3, keep_events=False)
    assert result.comm_calls_per_rank == {
        "all_gather": 3 * len(plan.gathers) + len(plan.post_step_gathers),
        "reduce_scatter": 3 * len(plan.reduce_scatters)}
    assert result.peak_bytes <= stage_memory(s, 3).peak_bytes


def test_a_70b_model_with_the_defaults_moves_three_times_its_16_bit_bytes():
    """Llama-2-70B shaped (80 layers, 8192 wide, GQA 8, SwiGLU 28672, RMSNorm, untied), DeepSpeed's
    defaults: the RMSNorm weights persist and are never gathered; every other parameter is
    gathered in forward, released when the trace does not reuse it within 1e9 elements and
    gathered again for backward; every gradient is reduced once. So forward, backward and the
    reduction move about 3 x 2 Psi bytes per rank, the ZeRO paper's figure. Exactly: less twice
    the persistent norms and what the reuse distance keeps across the turn, plus what the
    prefetch gathers again right after a release (its queue runs on into backward's entries)."""
    s = load_scenario(SCENARIOS / "llama2_7b_64gpu.toml", [
        "model.layers=80", "model.hidden=8192", "model.heads=64", "model.kv_heads=8",
        "model.ffn=28672", "training.framework='deepspeed'", "training.zero_stage=3"])
    plan, visits, sizes = plan_of(s)
    psi = sum(sizes)
    persistent = sum(sizes[p] for p in plan.persistent)
    assert persistent == (2 * 80 + 1) * 8192  # every RMSNorm weight, nothing else
    gathered = [p for g in plan.gathers for p in g.params]
    forward = {p for g in plan.gathers if visits[g.visit].phase == "forward" for p in g.params}
    assert forward == set(range(len(sizes))) - plan.persistent
    assert max(gathered.count(p) for p in set(gathered)) == 2  # forward, backward at most
    released = [p for r in plan.releases[:-1] for p in r]  # before the micro-step's end
    # each gather but a parameter's first follows one of its releases
    assert len(gathered) - len(forward) == len(released) - _never_regathered(plan, visits)
    moved = 2 * (sum(sizes[p] for p in gathered) + sum(e for _, e in plan.reduce_scatters))
    assert abs(moved / (3 * 2 * psi) - 1) < 0.02


def _never_regathered(plan, visits) -> int:
    """Releases after a parameter's last gather (its final use): nothing gathers it again."""
    last_gather: dict[int, int] = {}
    for g in plan.gathers:
        for p in g.params:
            last_gather[p] = g.visit
    return sum(1 for s, r in enumerate(plan.releases[:-1]) for p in r
               if s >= last_gather.get(p, -1))


def test_the_knobs_are_refused_outside_a_framework_that_fetches_by_module():
    with pytest.raises(InputError, match="training.prefetch_bucket_elements sets how ZeRO-3"):
        load_scenario(SCENARIOS / "llama2_7b_64gpu.toml",
                      ["training.prefetch_bucket_elements=1000"])
    with pytest.raises(InputError, match="whole number"):
        small("training.max_live_parameters=1.5")


@pytest.mark.parametrize("sets", [["parallelism.tensor_parallel=2"], ["model.layers=4097"],
                                  ["training.optimizer_offload='cpu'"]])
def test_what_it_cannot_plan_is_gathered_unit_by_unit(sets):
    """Tensor parallelism, offload, and models past MAX_PLANNED_LAYERS blocks stay ZeRO-3 unit by
    unit: no plan, the memory model and the step alike (review: two of them crashed)."""
    s = small(*sets)
    assert not fetches_by_module(s, 3)
    assert simulate(s, 3, keep_events=False).peak_bytes <= stage_memory(s, 3).peak_bytes


def test_the_step_never_holds_more_than_the_memory_model_says():
    """Gathers held until their last parameter is released, in the plan and the step alike
    (review: a coalesced gather's buffer outlived the plan's count); the largest flush copied."""
    for sets in (["training.max_reuse_distance=0"],
                 ["training.max_reuse_distance=0", "training.prefetch_bucket_elements=5000000"],
                 ["model.tied_embeddings=false", "model.hidden=512", "model.heads=8"],
                 ["training.activation_checkpointing='full'", "training.gradient_accumulation=2"]):
        s = small(*sets)
        assert simulate(s, 3, keep_events=False).peak_bytes <= stage_memory(s, 3).peak_bytes, sets


@pytest.mark.parametrize("bucket", [5_000_000, 30_000_000])
def test_a_gathers_buffer_lives_until_its_last_parameter_is_released(bucket):
    """Counted apart from the plan: each visit's gathers added before its compute, each gather
    dropped once every parameter it brought is released; the most held is the plan's peak (a
    coalesced prefetch whose parameters are released one by one holds its buffer whole)."""
    s = small()
    visits, sizes = module_visits(s.model, s.training)
    plan = fetch_plan(visits, sizes, prefetch_bucket=bucket, max_reuse=0)
    waiting: dict[int, set[int]] = {}  # gather -> its parameters not yet released
    peak = 0
    for v in range(len(visits)):
        waiting.update((g, set(gather.params)) for g, gather in enumerate(plan.gathers)
                       if gather.visit == v)
        peak = max(peak, sum(plan.gathers[g].elements for g in waiting))
        for p in plan.releases[v]:
            g = max(g for g in waiting if p in waiting[g])  # its latest gather
            waiting[g].discard(p)
        waiting = {g: left for g, left in waiting.items() if left}
    assert peak == plan.peak_live_elements
    assert any(len(g.params) > 1 for g in plan.gathers)


def test_a_batch_is_held_whole_until_its_last_parameter_goes_by_hand():
    """Four parameters A, B (10 each), C, D (100 each) used by four visits after a root's, bucket
    15, no reuse: the root prefetches A and B in one gather (20); A's visit prefetches C (held
    120: A's batch waits for B); A is released, the batch stays whole; B's visit prefetches D:
    220 held at once, where counting parameters one by one would say 210."""
    visits = [Visit(0, "forward", ()), *(Visit(0, "forward", (p,), 0.25) for p in range(4))]
    plan = fetch_plan(visits, [10, 10, 100, 100], prefetch_bucket=15, max_reuse=0, threshold=0)
    assert [(g.visit, g.params) for g in plan.gathers] == [(0, (0, 1)), (1, (2,)), (2, (3,))]
    assert plan.peak_live_elements == 220


def test_a_one_element_bucket_still_prefetches_one_parameter():
    """The prefetch pops while what it gathers is under the budget: with a budget of one element
    it takes the next parameter not gathered, whatever its size."""
    s = small()
    visits, sizes = module_visits(s.model, s.training)
    plan = fetch_plan(visits, sizes, prefetch_bucket=1, max_reuse=0)
    prefetched = [g for g in plan.gathers if g.prefetch]
    assert prefetched and all(len(g.params) == 1 for g in prefetched)


def test_the_persistence_threshold_is_inclusive():
    """DeepSpeed keeps a parameter of exactly the threshold's elements (ds_numel <= threshold):
    at 1024, the LayerNorms' and the 1024-wide biases (out, fc2), 6 per layer and the final
    norm's 2 persist; the 3072- and 4096-wide biases do not."""
    plan, _, sizes = plan_of(small("training.param_persistence_threshold=1024"))
    assert len(plan.persistent) == 2 * 6 + 2
    assert {sizes[p] for p in plan.persistent} == {H}


def test_what_a_prefetch_claimed_is_not_released_before_its_use():
    """A bucket as large as the model prefetches the whole trace at the root's visit, claiming
    every entry: no parameter is released before its last use, so each is gathered once in the
    micro-batch even with no reuse distance."""
    s = small()
    visits, sizes = module_visits(s.model, s.training)
    plan = fetch_plan(visits, sizes, prefetch_bucket=10**9, max_reuse=0)
    gathered = [p for g in plan.gathers for p in g.params]
    assert sorted(gathered) == sorted(set(range(len(sizes))) - plan.persistent)


def test_a_checkpointed_block_recomputes_its_forward_visits_before_its_backward():
    """Under full checkpointing each block's backward visits its modules' forward again (the
    recomputation: a third of the pass's compute), then backward's reversed order (two thirds)."""
    s = small("training.activation_checkpointing='full'")
    visits, _ = module_visits(s.model, s.training)
    block = [v for v in visits if v.unit == 1]
    forward = [v.params for v in block if v.phase == "forward"]
    recompute = [v.params for v in block if v.recompute]
    assert recompute == forward
    back = [v for v in block if v.phase == "backward"]
    assert [v.recompute for v in back] == [True] * len(forward) + [False] * len(forward)
    assert sum(v.share for v in back if v.recompute) == pytest.approx(1 / 3)
    assert sum(v.share for v in back) == pytest.approx(1.0)


def test_without_overlap_comm_each_prefetch_completes_before_the_visit_computes():
    """overlap_comm = false: DeepSpeed gathers on the compute stream, so the prefetch of the
    weights at the token table's visit is waited for there: the step is longer by about that
    gather's time, which overlap_comm hides behind the embedding's and the first layers' compute."""
    on, off = small(), small("training.overlap_comm=false")
    fast, slow = (simulate(s, 3, keep_events=False) for s in (on, off))
    assert slow.compute_s == pytest.approx(fast.compute_s, rel=1e-3)  # SMs NCCL takes aside
    assert slow.exposed_comm_s > fast.exposed_comm_s


def visit_sizes(s, unit: int = 1, phase: str = "forward"):
    """One block's forward visits, each as the elements of the parameters it owns."""
    visits, sizes = module_visits(s.model, s.training)
    return [tuple(sizes[p] for p in v.params) for v in visits
            if v.unit == unit and v.phase == phase]


def test_q_and_k_norms_are_visited_after_q_and_k():
    """Qwen3's attention calls q_proj then q_norm, k_proj then k_norm, then v_proj and o_proj
    (transformers' modeling_qwen3.py, Qwen3Attention.forward): 15 visits a block, by hand:
    the layer, its norm, the attention container and its six, the second norm, the MLP
    container and gate, the activation, up, down."""
    s = small("model.qk_norm=true", "model.mlp='swiglu'", "model.bias=false",
              "model.norm='rmsnorm'", "model.head_size=64")
    assert fetches_by_module(s, 3)
    d, f = 64, 4096
    assert visit_sizes(s) == [(), (H,), (), (H * H,), (d,), (H * H,), (d,), (H * H,), (H * H,),
                              (H,), (), (f * H,), (), (f * H,), (H * f,)]


def test_four_norms_a_layer_sit_around_attention_and_mlp():
    """Gemma-2: input, post-attention, pre-feedforward and post-feedforward norms
    (modeling_gemma2.py, Gemma2DecoderLayer.forward), 15 visits a block by hand."""
    s = small("model.layer_norms=4", "model.mlp='swiglu'", "model.bias=false",
              "model.norm='rmsnorm'")
    assert fetches_by_module(s, 3)
    f = 4096
    assert visit_sizes(s) == [(), (H,), (), (H * H,), (H * H,), (H * H,), (H * H,), (H,), (H,),
                              (), (f * H,), (), (f * H,), (H * f,), (H,)]


def test_one_norm_before_parallel_attention_and_mlp():
    """Falcon-7B: one input_layernorm (weight and bias), the fused query_key_value and dense,
    then the MLP's dense_h_to_4h, GELU, dense_4h_to_h (modeling_falcon.py): 9 visits."""
    s = small("model.layer_norms=1")  # a GELU GPT: one QKV module by default
    assert fetches_by_module(s, 3)
    assert visit_sizes(s) == [(), (H, H), (), (3 * H * H, 3 * H), (H * H, H), (),
                              (4 * H * H, 4 * H), (), (H * 4 * H, H)]
    backward = visit_sizes(s, phase="backward")
    assert backward == [(), (), (H * 4 * H, H), (), (4 * H * H, 4 * H), (), (H * H, H),
                        (3 * H * H, 3 * H), (H, H)]  # a container before its children
    assert simulate(s, 3, keep_events=False).peak_bytes <= stage_memory(s, 3).peak_bytes
