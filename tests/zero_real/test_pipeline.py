"""Pipeline parallelism for real: 4 gloo ranks as 2 stages x 2 data-parallel ranks (and 2 stages x
TP 2), GPipe and 1F1B, DDP and ZeRO-1, against one plain PyTorch process (torch.optim.Adam on the
whole model and the global batch); the point-to-point transfers of a step counted and sized by
hand; each stage's ledger against a hand count and zerosim's pipeline_memory; the activations
each schedule holds in flight (Narayanan et al. 2021 §2.2.1: GPipe m, 1F1B p - i); the flags.

One spawned group of 4 runs every training the module checks (a module fixture). Bounded at
every level: 30 s per transfer, collective and init, 240 s for the group.
"""

import pytest

torch = pytest.importorskip("torch")

from functools import partial  # noqa: E402

from tests.conftest import SCENARIOS, assert_one_line_error  # noqa: E402
from tests.zero_real.helpers import (assemble_tensor_parallel, reference_train,  # noqa: E402
                                     train_worker)
from tests.zero_real.test_accumulation import assert_close_to_reference  # noqa: E402
from zerosim.scenario.config import (ClusterConfig, ModelConfig, ParallelismConfig,  # noqa: E402
                                     Scenario, TrainingConfig)
from zerosim.scenario.load import load_scenario  # noqa: E402

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
WORLD, PP, STEPS, MICRO = 4, 2, 2, 4
DP = WORLD // PP

# GPT-2 style: tied head (the last stage keeps its own copy), learned positions, biases, layer
# norms; 4 layers, 2 per stage.
GPT = ModelConfig(name="gpt", layers=4, hidden=16, heads=4, ffn=24, vocab=37, max_seq_len=8)
# Llama style: GQA, SwiGLU, RMSNorm, RoPE, an untied head; 3 layers split unevenly [1, 2].
LLAMA = ModelConfig(name="llama", layers=3, hidden=16, heads=4, kv_heads=2, ffn=24, vocab=29,
                    mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False,
                    position="rope")


def scenario(model, schedule: str, tp: int = 1, layers=()):
    return Scenario(model=model, cluster=ClusterConfig(nodes=1, gpus_per_node=WORLD),
                    training=TrainingConfig(precision="fp32", micro_batch=2, seq_len=8,
                                            gradient_accumulation=MICRO,
                                            reduce_bucket_MiB=0.0005),  # 524-byte buckets
                    parallelism=ParallelismConfig(pipeline_parallel=PP, pipeline_schedule=schedule,
                                                  tensor_parallel=tp, pipeline_layers=layers))


def tiny(stage: int, schedule: str):
    return load_scenario(TINY, [f"cluster.gpus_per_node={WORLD}", f"training.zero_stage={stage}",
                                f"parallelism.pipeline_parallel={PP}",
                                f"parallelism.pipeline_schedule={schedule}",
                                f"training.gradient_accumulation={MICRO}"])


def cases() -> dict:
    """key -> (stage, scenario)."""
    out = {}
    for schedule in ("gpipe", "1f1b"):
        for stage in (0, 1):
            out["parity", GPT.name, schedule, stage] = (stage, scenario(GPT, schedule))
            out["tiny", schedule, stage] = (stage, tiny(stage, schedule))
        out["parity", LLAMA.name, schedule, 1] = (1, scenario(LLAMA, schedule, layers=(1, 2)))
    out["tp", GPT.name, "1f1b", 1] = (1, scenario(GPT, "1f1b", tp=2))
    return out


@pytest.fixture(scope="module")
def results():
    from zero_real.run.launch import spawn
    from zero_real.run.runconfig import RankSetup

    runs = [(key, stage, "native", sc) for key, (stage, sc) in cases().items()]
    worker = partial(train_worker, runs=runs, steps=STEPS)
    return spawn(worker, WORLD, RankSetup(backend="gloo", nproc=WORLD, timeout_s=30),
                 timeout_s=240)


def gathered(results, key, ranks) -> dict:
    """The whole model's parameters from the stages' ranks `ranks` (one per stage)."""
    out = {}
    for r in ranks:
        clash = out.keys() & results[r][key]["params"].keys()
        assert not clash, clash  # every parameter on exactly one stage
        out.update(results[r][key]["params"])
    return out


def test_pipeline_matches_one_process_adam(results):
    """GPipe and 1F1B, DDP and ZeRO-1, a tied GPT split evenly and an untied Llama split [1, 2]:
    the stages' parameters put together equal the single-process model's after 2 Adam steps on
    the same global batch (DP 2 x 4 micro-batches x 2 rows), on both data-parallel ranks, at
    1e-5 (atol and rtol, as gradient accumulation's parity: test_accumulation); the losses equal
    its losses. Megatron's order: stage 0 is ranks 0-1, stage 1 ranks 2-3."""
    references = {}
    for key, (stage, sc) in cases().items():
        if key[0] != "parity":
            continue
        if sc.model.name not in references:
            references[sc.model.name] = reference_train(sc, DP, STEPS)
        want, want_losses = references[sc.model.name]
        for dp in range(DP):
            got = gathered(results, key, [dp, DP + dp])
            assert got.keys() == want.keys(), key
            for name in want:
                assert_close_to_reference(name, got[name], want[name], sc.model)
        for r in results:
            assert r[key]["losses"] == pytest.approx(want_losses, rel=1e-5), key


def test_pipeline_by_tensor_parallel_matches_one_process_adam(results):
    """TP 2 x PP 2 (d = 1): ranks 0-1 are stage 0's TP group, 2-3 stage 1's; each stage's two
    slices put back together by hand (helpers.assemble_tensor_parallel) equal the reference."""
    key = ("tp", GPT.name, "1f1b", 1)
    sc = cases()[key][1]
    want, want_losses = reference_train(sc, 1, STEPS)
    got = {}
    for stage in range(PP):
        ranks = [results[stage * 2 + r][key]["params"] for r in range(2)]
        for name in ranks[0]:
            got[name] = assemble_tensor_parallel(name, [r[name] for r in ranks], sc.model)
    assert got.keys() == want.keys()
    for name in want:
        assert_close_to_reference(name, got[name], want[name], sc.model)
    assert results[0][key]["losses"] == pytest.approx(want_losses, rel=1e-5)


def test_p2p_transfers_are_counted_and_sized_by_hand(results):
    """Per step and pipeline, 2 x m x (p - 1) transfers, each a send on one side and a recv on
    the other: m activations forward and m gradients back over the one boundary. Each is one
    micro-batch's b x s x h = 2 x 32 x 64 fp32 elements (the tiny GPT). Stage 0 sends the
    activations and receives the gradients; stage 1 the reverse."""
    size = 2 * 32 * 64 * 4
    for schedule in ("gpipe", "1f1b"):
        for dp in range(DP):
            pipe = [results[dp]["tiny", schedule, 1], results[DP + dp]["tiny", schedule, 1]]
            for step in range(STEPS):
                ops = [[(e["op"], e["phase"], e["bytes"]) for e in r["events"]
                        if e["stream"] == "p2p" and e["name"] == "p2p" and e["step"] == step]
                       for r in pipe]
                assert sorted(ops[0]) == sorted([("send", "forward", size)] * MICRO
                                                + [("recv", "backward", size)] * MICRO)
                assert sorted(ops[1]) == sorted([("recv", "forward", size)] * MICRO
                                                + [("send", "backward", size)] * MICRO)
                assert len(ops[0] + ops[1]) == 2 * 2 * MICRO * (PP - 1)  # send + recv each


# The tiny GPT's stages by hand (h 64, ffn 256, vocab 256, 32 positions, biases, layer norms,
# tied head). One layer: QKV 64 x 192 + 192, output 64 x 64 + 64, MLP 64 x 256 + 256 and
# 256 x 64 + 64, two norms 4 x 64 = 49,984. Stage 0: the token and position embeddings 256 x 64
# + 32 x 64 and layer 1; stage 1: layer 2, the final norm 2 x 64 and its copy of the tied
# embedding 256 x 64 (Megatron's output layer on the last stage).
LAYER = 64 * 192 + 192 + 64 * 64 + 64 + 64 * 256 + 256 + 256 * 64 + 64 + 4 * 64
STAGE_PARAMS = (256 * 64 + 32 * 64 + LAYER, LAYER + 2 * 64 + 256 * 64)


def test_each_stage_holds_its_layers_and_its_ledger_is_the_hand_count(results):
    """Parameters per stage by hand (above): every parameter of the 118,528 once, but the tied
    copy; the ledger's model states per stage are the ZeRO paper's Table 1 over the stage's own
    parameters with N_d = 2 (fp32 Adam: 4 + 4 + 8 bytes; ZeRO-1 halves the 8)."""
    assert LAYER == 49_984 and sum(STAGE_PARAMS) - 256 * 64 == 118_528
    for rank, r in enumerate(results):
        pipeline_stage = rank // DP
        psi = STAGE_PARAMS[pipeline_stage]
        for stage in (0, 1):
            got = r["tiny", "1f1b", stage]
            assert got["pipeline_stage"] == pipeline_stage
            ledger = got["ledger"]
            states = (ledger["params"], ledger["grads"], ledger["master"] + ledger["moments"])
            assert states == (4 * psi, 4 * psi, 8 * psi // (DP if stage else 1)), (rank, stage)


def test_each_stage_ledger_is_zerosims_pipeline_memory(results):
    """A shared oracle: zerosim's pipeline_memory (analytic/memory.py) per pipeline stage gives
    the model states each stage's ranks hold."""
    from zerosim.analytic.memory import pipeline_memory

    for stage in (0, 1):
        rows = pipeline_memory(tiny(stage, "1f1b"), stage)
        for rank, r in enumerate(results):
            ledger, want = r["tiny", "1f1b", stage]["ledger"], rows[rank // DP]
            assert (ledger["params"], ledger["grads"], ledger["master"] + ledger["moments"]) == \
                (want.params_bytes, want.grads_bytes, want.optimizer_bytes), (rank, stage)


def test_each_schedule_holds_its_micro_batches_activations(results):
    """The activations' peak in the ledger counts the micro-batches in flight (every one's the
    same size): GPipe holds all m = 4 on every stage, 1F1B p - i, 2 on stage 0 and 1 on stage 1
    (Narayanan et al. 2021 §2.2.1), so GPipe's peak over 1F1B's is 4 / 2 and 4 / 1."""
    for rank, r in enumerate(results):
        gpipe = r["tiny", "gpipe", 1]["ledger"]["activations"]
        one_f_one_b = r["tiny", "1f1b", 1]["ledger"]["activations"]
        assert gpipe == one_f_one_b * MICRO // (PP - rank // DP), (rank, gpipe, one_f_one_b)


def test_flags_set_the_scenario_keys(dry_run):
    run = dry_run("run", TINY, "--stage", "1", "--nproc", "4", "--pipeline-parallel", "2",
                  "--pipeline-schedule", "gpipe")
    assert run.result is None, run.result.stderr
    p = run.launched.scenario.parallelism
    assert (p.pipeline_parallel, p.pipeline_schedule, run.nproc) == (2, "gpipe", 4)
    assert run.launched.overrides == ("parallelism.pipeline_parallel=2",
                                      "parallelism.pipeline_schedule=gpipe")


@pytest.mark.parametrize("argv, fragment", [
    (["--nproc", "4", "--pipeline-parallel", "3"], "--pipeline-parallel 3 x --tensor-parallel 1 "
                                                   "does not divide the 4 ranks"),
    (["--nproc", "4", "--pipeline-parallel", "2", "--tensor-parallel", "4"],
     "--pipeline-parallel 2 x --tensor-parallel 4 does not divide the 4 ranks"),
    (["--nproc", "4", "--pipeline-parallel", "4"], "model.layers = 2 does not split evenly"),
    (["--nproc", "4", "--pipeline-parallel", "2", "--pipeline-schedule", "interleaved_1f1b",
      "--set", "parallelism.virtual_stages=2", "--set", "model.layers=4", "--set",
      "training.gradient_accumulation=2"],
     "pipeline_schedule = interleaved_1f1b is not implemented by zero_real"),
    (["--nproc", "4", "--pipeline-parallel", "2", "--stage", "2"], "runs zero_stage 0 or 1, not 2"),
    (["--nproc", "4", "--pipeline-parallel", "2", "--set", "training.precision=fp16"],
     "training.precision = fp16 is not implemented"),
    (["--nproc", "4", "--pipeline-parallel", "4", "--set", "model.layers=4", "--set",
      "parallelism.pipeline_layers=[1, 0, 2, 1]"],
     "pipeline_layers[1] = 0: only the first and the last"),
    (["--fake-world-size", "4", "--pipeline-parallel", "2"], "--fake-world-size runs one rank"),
    (["--nproc", "4", "--pipeline-parallel", "2", "--set", "parallelism.pipeline_parallel=4"],
     "disagrees with --pipeline-parallel"),
    (["--nproc", "4", "--pipeline-parallel", "0"], "--pipeline-parallel: '0'"),
    (["--nproc", "4", "--pipeline-schedule", "zigzag"], "--pipeline-schedule: invalid choice"),
])
def test_bad_pipeline_flags_are_one_line_exit_2(dry_run, argv, fragment):
    stage = [] if "--stage" in argv else ["--stage", "1"]
    run = dry_run("run", TINY, *stage, *argv)
    assert run.launched is None
    assert_one_line_error(run.result, fragment)


def test_the_summary_counts_the_p2p_transfers():
    from zero_real.run.report import summary

    def event(stream, name, op):
        return {"rank": 0, "stream": stream, "name": name, "op": op, "bytes": 1 << 19,
                "end_s": 1.0}
    result = {"stage_name": "ZeRO-1", "stage": 1, "world_size": 4, "backend": "gloo",
              "collectives": "native", "torch_version": "2", "hardware": "cpu", "losses": [],
              "zerosim_memory": {"model_states_bytes": 0}, "ranks": [],
              "events": [event("p2p", "p2p", "send"), event("p2p", "p2p", "recv"),
                         event("comm", "bucket 0", "reduce_scatter")]}
    assert "rank 0: 1 collectives, 0.50 MiB, 2 p2p transfers, 1.00 MiB, run" in summary(result,
                                                                                          None)
    result["events"] = result["events"][2:]
    assert "rank 0: 1 collectives, 0.50 MiB, run" in summary(result, None)
