"""Tensor parallelism for real: a 2 x 2 gloo mesh (TP 2 within consecutive ranks, data-parallel
2 over the ranks 2 apart) at stages 0-3, with and without sequence parallelism, against one
plain PyTorch process (torch.optim.Adam on the whole model and the global batch); each rank's
slice and ledger against hand counts and zerosim's memory with tensor_parallel = 2; the TP
collectives of a step counted and sized by hand from Megatron's layout; a rank dying or hanging
inside a TP group; the flags.

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
    (max, target logit, sum of exps: s b each). With SP (Korthikanti et al. §4.2.2) each layer's
    all-reduce becomes an all-gather and a reduce-scatter of the same whole buffer (forward and
    backward: 4 + 4), the head gathers (and reduce-scatters back), the embedding's output is
    split after its all-reduce (gathered back), and the 14 replicated parameters (per layer two
    layer norms' weight and bias, two row-parallel biases; the final norm's two) have their
    gradients all-reduced."""
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
        ("tp attention", "all_gather", activation): 2 * layers,
        ("tp attention", "reduce_scatter", activation): 2 * layers,
        ("tp mlp", "all_gather", activation): 2 * layers,
        ("tp mlp", "reduce_scatter", activation): 2 * layers,
        ("tp embedding", "all_reduce", activation): 1,
        ("tp embedding", "all_gather", activation): 1,
        ("tp head", "all_gather", activation): 1, ("tp head", "reduce_scatter", activation): 1,
        ("tp sp grads", "all_reduce", 4 * h): 2 * 3 * layers + 2, **loss}
    # The data-parallel collectives are the stage's, over 2 ranks: ZeRO-1's buckets and gather.
    dp = {e["op"] for e in results[0]["tiny", 1]["events"]
          if e["stream"] == "comm" and not e["name"].startswith("tp ")}
    assert dp == {"reduce_scatter", "all_gather"}


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
