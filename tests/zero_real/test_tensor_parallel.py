"""Tensor parallelism for real: a 2 x 2 gloo mesh (TP 2 within consecutive ranks, data-parallel
2 over the ranks 2 apart) at stages 0-3, with and without sequence parallelism, against one
plain PyTorch process (torch.optim.Adam on the whole model and the global batch); each rank's
slice and ledger against hand counts and zerosim's memory with tensor_parallel = 2; the TP
collectives of a step counted and sized by hand from Megatron's layout, and zerosim's list of
them (analytic/tensor_comm.py) against the same runs; SP's column-parallel linear saving the
sequence shard; a rank dying or hanging inside a TP group; the flags.

One spawned group of 4 runs every training the module checks (a module fixture). Bounded at
every level: 30 s per collective and init, 240 s for the group, 60 s for each faulty run.
"""

import pytest

torch = pytest.importorskip("torch")

from collections import Counter  # noqa: E402
from functools import partial  # noqa: E402

from tests.conftest import SCENARIOS, assert_one_line_error  # noqa: E402
from tests.procs import gone  # noqa: E402
from tests.zero_real.helpers import (assemble_tensor_parallel, reference_train,  # noqa: E402
                                     train_dying, train_hanging, train_worker)
from tests.zero_real.test_parity import assert_parity  # noqa: E402
from zerosim.analytic.memory import stage_memory  # noqa: E402
from zerosim.analytic.model import param_counts  # noqa: E402
from zerosim.parallel.tensor import tp_slice  # noqa: E402
from zerosim.scenario.config import (ClusterConfig, ModelConfig, ParallelismConfig,  # noqa: E402
                                     Scenario, TrainingConfig)
from zerosim.scenario.load import load_scenario  # noqa: E402

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
WORLD, TP, STEPS = 4, 2, 3
DP = WORLD // TP
STAGES = (0, 1, 2, 3)

# GPT-2 style: MHA, tied head, learned positions, biases, layer norms; a vocabulary of 37 is
# padded to 2 x 19 rows, so the last rank holds a row that is no entry.
GPT = ModelConfig(name="gpt", layers=2, hidden=16, heads=4, ffn=24, vocab=37, max_seq_len=8)
# Llama style with one key/value head for 2 ranks (kv < t: the QKV output is gathered), SwiGLU,
# RMSNorm, RoPE, an untied head; vocabulary 29 (padded to 30).
GQA = ModelConfig(name="gqa", layers=2, hidden=16, heads=4, kv_heads=1, ffn=24, vocab=29,
                  mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False,
                  position="rope")
# Two key/value heads, one per rank (kv = t: whole groups split).
GQA2 = ModelConfig(name="gqa2", layers=1, hidden=16, heads=4, kv_heads=2, ffn=24, vocab=29,
                   mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False,
                   position="rope")


def scenario(model, sp: bool):
    return Scenario(model=model, cluster=ClusterConfig(nodes=1, gpus_per_node=WORLD),
                    training=TrainingConfig(precision="fp32", micro_batch=2, seq_len=8,
                                            reduce_bucket_MiB=0.0005),  # 524-byte buckets
                    parallelism=ParallelismConfig(tensor_parallel=TP, sequence_parallel=sp))


def tiny(stage: int, *more: str):
    return load_scenario(TINY, [f"cluster.gpus_per_node={WORLD}", f"training.zero_stage={stage}",
                                f"parallelism.tensor_parallel={TP}", *more])


def cases() -> dict:
    """key -> (stage, collectives, scenario)."""
    out = {}
    for model in (GPT, GQA):
        for sp in (False, True):
            for stage in STAGES:
                out["parity", model.name, sp, stage] = (stage, "native", scenario(model, sp))
    out["parity", GQA2.name, True, 2] = (2, "native", scenario(GQA2, True))
    for stage in (1, 3):  # the ring of send/recv on the TP and data-parallel subgroups
        out["ring", GPT.name, True, stage] = (stage, "ring", scenario(GPT, True))
    for stage in STAGES:
        out["tiny", stage] = (stage, "native", tiny(stage))
    out["tiny sp", 1] = (1, "native", tiny(1, "parallelism.sequence_parallel=true"))
    return out


@pytest.fixture(scope="module")
def results():
    from zero_real.run.launch import spawn
    from zero_real.run.runconfig import RankSetup

    runs = [(key, stage, mode, sc) for key, (stage, mode, sc) in cases().items()]
    worker = partial(train_worker, runs=runs, steps=STEPS)
    return spawn(worker, WORLD, RankSetup(backend="gloo", nproc=WORLD, timeout_s=30),
                 timeout_s=240)


def test_tp_by_dp_matches_one_process_adam(results):
    """Every stage, with and without SP, kv < t and kv = t: the t slices of each parameter put
    back together (by hand, helpers.assemble_tensor_parallel) equal the single-process model's
    after 3 Adam steps, on both data-parallel ranks; the losses equal its losses."""
    references = {}
    for key, (stage, mode, sc) in cases().items():
        if key[0] not in ("parity", "ring"):
            continue
        m = sc.model
        if m.name not in references:
            references[m.name] = reference_train(sc, DP, STEPS)  # the global batch: DP x b rows
        want, want_losses = references[m.name]
        for dp in range(DP):
            ranks = [results[dp * TP + r][key] for r in range(TP)]  # a TP group: consecutive
            for name in want:
                got = assemble_tensor_parallel(name, [r["params"][name] for r in ranks], m)
                assert_parity(name, got, want[name], m)
            for r in ranks:
                assert r["losses"] == pytest.approx(want_losses, rel=1e-5), key


TINY_SLICE = (2 * (64 * 96 + 96 + 32 * 64 + 64 + 64 * 128 + 128 + 128 * 64 + 64 + 2 * 128)
              + 128 * 64 + 32 * 64 + 128)
"""The tiny GPT's parameters on one rank of t = 2, by hand (h 64, 4 heads, ffn 256, vocab 256,
32 positions, biases, layer norms, tied head): per layer QKV 64 x 96 + 96 bias, attention output
32 x 64 + its whole bias 64, MLP up 64 x 128 + 128, down 128 x 64 + 64, two norms 2 x 128; the
token embedding's 128 rows x 64, 32 x 64 positions, the final norm 128: 60,736 of 118,528."""


def test_a_rank_holds_exactly_zerosims_slice_and_its_ledger_is_zerosims_memory(results):
    """Parameters held per rank: the hand count, which is zerosim's tp_slice count; the
    ledger's model states per category equal zerosim's stage_memory with tensor_parallel = 2,
    and the ZeRO paper's Table 1 with N_d = N / t = 2 (fp32 Adam: 4 + 4 + 8 bytes)."""
    assert TINY_SLICE == 60_736
    assert param_counts(tp_slice(tiny(0).model, TP)).total == TINY_SLICE
    psi = TINY_SLICE
    table1 = {0: (4 * psi, 4 * psi, 8 * psi), 1: (4 * psi, 4 * psi, 8 * psi // DP),
              2: (4 * psi, 4 * psi // DP, 8 * psi // DP),
              3: (4 * psi // DP, 4 * psi // DP, 8 * psi // DP)}
    for rank_result in results:
        for stage in STAGES:
            got = rank_result["tiny", stage]
            held = sum(p.numel() for p in got["params"].values())
            assert held == TINY_SLICE, (stage, held)
            ledger, analytic = got["ledger"], stage_memory(tiny(stage), stage)
            states = (ledger["params"], ledger["grads"], ledger["master"] + ledger["moments"])
            assert states == (analytic.params_bytes, analytic.grads_bytes,
                              analytic.optimizer_bytes), (stage, ledger, analytic)
            assert states == table1[stage], stage


def tp_events(result, step=0) -> Counter:
    """(name, op, bytes) of each TP collective of one step, counted (gloo's note on a
    reduce-scatter run as an all-reduce left off the name)."""
    return Counter((e["name"].split(" (gloo")[0], e["op"], e["bytes"]) for e in result["events"]
                   if e["stream"] == "comm" and e["step"] == step and e["name"].startswith("tp "))


def test_tp_collectives_of_a_step_are_megatrons(results):
    """Rank 0's TP collectives in one step of the tiny GPT (2 layers, s 32, b 2, h 64, fp32), by
    hand. Without SP (Shoeybi et al. §3): per layer two all-reduces of s b h forward (after the
    row-parallel attention output and MLP) and two backward (before the column-parallel QKV and
    MLP); the embedding's forward all-reduce, the head's backward one, the loss's three
    (max, target logit, sum of exps: s b each). With SP (Korthikanti et al. §4.2.2), per
    column-parallel linear (QKV, the MLP's first, the output layer) an all-gather of its input
    forward, and in backward its saved shard gathered again for the weight gradient and the
    input gradient reduce-scattered (Megatron's LinearWithGradAccumulationAndAsyncCommunication);
    per row-parallel one (attention output, the MLP's second) a reduce-scatter forward and an
    all-gather backward: per layer and family 3 all-gathers and 2 reduce-scatters of the whole
    buffer. The embedding's output is split after its all-reduce (gathered back). The 14
    replicated parameters of h each (per layer two layer norms' weight and bias, two
    row-parallel biases; the final norm's two) have their gradients all-reduced once, together,
    before the optimizer step (finalize_model_grads): 14 h fp32 in one all-reduce."""
    s, b, h, layers = 32, 2, 64, 2
    activation, per_token = s * b * h * 4, s * b * 4
    loss = {("tp loss " + part, "all_reduce", per_token): 1
            for part in ("max", "target", "sum-exp")}
    assert tp_events(results[0]["tiny", 1]) == {
        ("tp attention", "all_reduce", activation): 2 * layers,
        ("tp mlp", "all_reduce", activation): 2 * layers,
        ("tp embedding", "all_reduce", activation): 1, ("tp head", "all_reduce", activation): 1,
        **loss}
    assert tp_events(results[0]["tiny sp", 1]) == {
        ("tp attention", "all_gather", activation): 3 * layers,
        ("tp attention", "reduce_scatter", activation): 2 * layers,
        ("tp mlp", "all_gather", activation): 3 * layers,
        ("tp mlp", "reduce_scatter", activation): 2 * layers,
        ("tp embedding", "all_reduce", activation): 1,
        ("tp embedding", "all_gather", activation): 1,
        ("tp head", "all_gather", activation): 2, ("tp head", "reduce_scatter", activation): 1,
        ("tp sp grads", "all_reduce", 4 * h * (2 * 3 * layers + 2)): 1, **loss}
    # The data-parallel collectives are the stage's, over 2 ranks: ZeRO-1's buckets and gather.
    dp = {e["op"] for e in results[0]["tiny", 1]["events"]
          if e["stream"] == "comm" and not e["name"].startswith("tp ")}
    assert dp == {"reduce_scatter", "all_gather"}


class MirrorGroup:
    """A TP group of 2 in one process whose other rank holds exactly this rank's tensors: an
    all-gather repeats rank 0's piece, a reduce-scatter doubles it. Records each call."""

    rank, world_size = 0, 2

    def __init__(self):
        self.calls = []

    def all_gather(self, t, sizes, name):
        self.calls.append(("all_gather", name))
        t[sizes[0]:].copy_(t[:sizes[0]])

    def reduce_scatter(self, t, sizes, name):
        self.calls.append(("reduce_scatter", name))
        t[:sizes[0]].mul_(2)


def test_an_sp_column_linear_saves_the_sequence_shard_and_gathers_it_again_in_backward():
    """Megatron's LinearWithGradAccumulationAndAsyncCommunication under SP: autograd keeps the
    rank's [s/t, b, h] input shard (and the weights), not the gathered [s, b, h] input; backward
    all-gathers the shard again for the weight gradients, then reduce-scatters the input
    gradient. Two linears on one input (SwiGLU's gate and up) share one gather. The gradients
    equal plain autograd's on the gathered input [x; x] (the mirror rank's shard is x too): each
    weight's from the whole sequence, the input's summed over the 2 ranks' (twice rank 0's
    half)."""
    from zero_real.parts.tensor import TensorGroup

    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)  # s/t = 2 of s = 4
    w1, b1, w2 = (torch.randn(*shape, dtype=torch.float64, requires_grad=True)
                  for shape in ((6, 5), (6,), (6, 5)))
    comm, saved = MirrorGroup(), []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.shape) or t,
                                                  lambda t: t):
        y1, y2 = TensorGroup(comm, True).column(x, [(w1, b1), (w2, None)], "mlp")
    assert saved == [(2, 3, 5), (6, 5), (6, 5)]
    assert comm.calls == [("all_gather", "tp mlp")]
    (y1.square().sum() + (3 * y2).sum()).backward()
    assert comm.calls == [("all_gather", "tp mlp")] * 2 + [("reduce_scatter", "tp mlp")]

    ref = x.detach().clone().requires_grad_()
    rw1, rb1, rw2 = (t.detach().clone().requires_grad_() for t in (w1, b1, w2))
    whole = torch.cat([ref, x.detach()])  # the other rank's shard: the same values
    (torch.nn.functional.linear(whole, rw1, rb1).square().sum()
     + (3 * torch.nn.functional.linear(whole, rw2)).sum()).backward()
    for got, want in ((w1, rw1), (b1, rb1), (w2, rw2)):
        torch.testing.assert_close(got.grad, want.grad)
    torch.testing.assert_close(x.grad, 2 * ref.grad)


def family(name: str, unit: str) -> str:
    """The name zero_real records a zerosim TP collective under (less "tp "): by the unit, and
    in a layer by the linear Megatron places it at (QKV and the attention output: attention;
    fc1 and fc2: mlp)."""
    if "loss" in name:
        return "loss"
    if "replicated" in name:
        return "sp grads"
    if "kv < t" in name:
        return "qkv (kv < t)"
    if unit != "layer":
        return unit
    return "attention" if "QKV" in name or "attention" in name else "mlp"


def zerosim_events(sc) -> Counter:
    """(family, op, bytes) of zerosim's TP collectives for one step of `sc` (one micro-step)."""
    from zerosim.analytic.tensor_comm import tensor_collectives

    m = sc.model
    listed = tensor_collectives(m, sc.training, sc.parallelism, grad_bytes_per_element=4)
    units = ["embedding"] + ["layer"] * m.layers + ["head"]
    out = Counter()
    for unit, forward, backward in zip(units, listed.forward, listed.backward):
        out.update((family(c.name, unit), c.op, c.size_bytes) for c in forward + backward)
    out.update((family(c.name, "step"), c.op, c.size_bytes) for c in listed.step)
    return out


@pytest.mark.parametrize("key", [("tiny", 1), ("tiny sp", 1), ("parity", GQA.name, False, 1),
                                 ("parity", GQA.name, True, 0), ("parity", GPT.name, True, 1)])
def test_zerosims_tp_collectives_are_the_ones_zero_real_runs(results, key):
    """A shared oracle: zerosim's list (analytic/tensor_comm.py) names, per family, the same
    collectives of the same sizes as rank 0 runs in a step, where the tiny GPT's are counted by
    hand above; with SP and without, learned positions and RoPE, kv < t (the QKV output
    gathered), at stages 0 and 1 (which all-reduce the replicated gradients whole, as Megatron's
    distributed optimizer does from its whole gradient buffer)."""
    got = Counter()
    for (name, op, size), n in tp_events(results[0][key]).items():
        got["loss" if name.startswith("tp loss") else name.removeprefix("tp "), op, size] += n
    assert got == zerosim_events(cases()[key][2])


def test_stages_2_and_3_sum_the_replicated_gradients_of_their_shard(results):
    """ZeRO-2 and 3 keep no whole gradient: each rank all-reduces over its TP group the part of
    the replicated parameters' gradients its data-parallel shard holds, so the 2 data-parallel
    ranks' all-reduces together carry them all once: the small GPT's 2 layers x (2 layer norms'
    weight and bias, 2 row biases) + the final norm's 2, of h = 16 each, fp32."""
    whole = (2 * 6 + 2) * 16 * 4
    for stage in (2, 3):
        for tp_rank in range(TP):
            sizes = [size for dp in range(DP)
                     for (name, _, size), n in tp_events(
                         results[dp * TP + tp_rank]["parity", GPT.name, True, stage]).items()
                     for _ in range(n) if name == "tp sp grads"]
            assert sum(sizes) == whole and len(sizes) <= DP, (stage, sizes)


def _faulty(fault, *, stage: int, collectives: str, timeout_s: float, match: str):
    from zero_real.run.launch import RankFailed, spawn
    from zero_real.run.runconfig import RunConfig

    cfg = RunConfig(scenario=tiny(stage), stage=stage, collectives=collectives, backend="gloo",
                    steps=3, timeout_s=timeout_s, nproc=WORLD, profile_memory=False)
    with pytest.raises(RankFailed, match=match) as info:
        spawn(fault, WORLD, cfg, timeout_s=60)
    assert all(gone(pid) for pid in info.value.pids)


def test_a_rank_dying_inside_a_tp_group_stops_every_rank():
    _faulty(partial(train_dying, die_rank=1, die_step=1), stage=2, collectives="ring",
            timeout_s=20, match="rank 1 died")


def test_a_rank_hanging_in_a_tp_collective_is_named_and_every_rank_stopped():
    """Rank 1 stops before its second collective of step 1, the attention's all-reduce in its TP
    group (the first is the embedding's): rank 0 times out there after 5 s, rank 1 is named."""
    _faulty(partial(train_hanging, hang_rank=1, hang_step=1), stage=1, collectives="native",
            timeout_s=5, match="rank 1 stopped making progress at step 1")


def test_flags_set_the_scenario_keys(dry_run):
    run = dry_run("run", TINY, "--stage", "3", "--nproc", "4", "--tensor-parallel", "2",
                  "--sequence-parallel")
    assert run.result is None, run.result.stderr
    p = run.launched.scenario.parallelism
    assert (p.tensor_parallel, p.sequence_parallel, run.nproc) == (2, True, 4)
    assert run.launched.overrides == ("parallelism.tensor_parallel=2",
                                      "parallelism.sequence_parallel=true")


@pytest.mark.parametrize("argv, fragment", [
    (["--nproc", "4", "--tensor-parallel", "3"], "--tensor-parallel 3 does not divide the 4 ranks"),
    (["--nproc", "8", "--tensor-parallel", "8"], "must divide model.heads = 4"),
    (["--nproc", "4", "--sequence-parallel"], "--sequence-parallel splits the sequence"),
    (["--nproc", "4", "--tensor-parallel", "2", "--set", "parallelism.tensor_parallel=4"],
     "disagrees with --tensor-parallel"),
    (["--fake-world-size", "4", "--tensor-parallel", "2"], "--fake-world-size runs one rank"),
    (["--nproc", "4", "--tensor-parallel", "2", "--sequence-parallel", "--set",
      "training.seq_len=31"], "training.seq_len = 31 is not a multiple of 2"),
    (["--nproc", "4", "--tensor-parallel", "2", "--sequence-parallel", "--set",
      "parallelism.tp_comm_overlap=true"], "parallelism.tp_comm_overlap = true is not implemented"),
    (["--nproc", "4", "--tensor-parallel", "0"], "--tensor-parallel: '0'"),
])
def test_bad_tensor_parallel_flags_are_one_line_exit_2(dry_run, argv, fragment):
    run = dry_run("run", TINY, "--stage", "1", *argv)
    assert run.launched is None
    assert_one_line_error(run.result, fragment)


def test_the_summary_counts_the_tensor_parallel_collectives():
    from zero_real.run.report import summary

    def event(name):
        return {"rank": 0, "stream": "comm", "name": name, "bytes": 1 << 20, "end_s": 1.0}
    result = {"stage_name": "ZeRO-1", "stage": 1, "world_size": 4, "backend": "gloo",
              "collectives": "native", "torch_version": "2", "hardware": "cpu", "losses": [],
              "zerosim_memory": {"model_states_bytes": 0}, "ranks": [],
              "events": [event("tp attention"), event("tp mlp"), event("bucket 0")]}
    assert "rank 0: 3 collectives (2 tensor-parallel), 3.00 MiB" in summary(result, None)
    result["events"] = result["events"][2:]
    assert "rank 0: 1 collectives, 1.00 MiB" in summary(result, None)
