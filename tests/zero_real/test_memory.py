"""The ledger against zerosim's analytic memory, and the measured memory against the ledger."""

import pytest

torch = pytest.importorskip("torch")

from functools import partial  # noqa: E402

from tests.zero_real.helpers import parity_worker  # noqa: E402
from tests.conftest import SCENARIOS  # noqa: E402
from zerosim.scenario.load import load_scenario  # noqa: E402
from zerosim.memory import stage_memory  # noqa: E402

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
PHASE_TOLERANCE = 0.10


def run_stages(scenario, world, backend="gloo", steps=2):
    from zero_real.launch import spawn
    from zero_real.runconfig import RankSetup

    runs = [(stage, "native", scenario) for stage in (0, 1, 2, 3)]
    nproc = 1 if backend == "fake" else world
    setup = RankSetup(backend=backend, nproc=nproc, timeout_s=30,
                      fake_world_size=world if backend == "fake" else None)
    results = spawn(partial(parity_worker, runs=runs, steps=steps), nproc, setup, timeout_s=240)
    name = scenario.model.name
    return [{stage: r[(stage, "native", scenario.training.precision, name)] for stage in range(4)}
            for r in results]


def check_ledger_and_measurement(scenario, per_rank, points=("after_init", "after_forward",
                                                              "after_backward", "after_step")):
    states = {}
    for rank, by_stage in enumerate(per_rank):
        for stage, result in by_stage.items():
            ledger = result["ledger"]
            analytic = stage_memory(scenario, stage)
            # Equal up to the padding the ledger reports: zerosim counts ceil(Ψ/N) per shard,
            # the ledger what it allocated; padding is the allocation beyond Ψ (or Ψ/N).
            assert ledger["model_states"] - ledger["padding_bytes"] <= analytic.model_states_bytes + 1e-6
            assert analytic.model_states_bytes <= ledger["model_states"], (stage, ledger, analytic)
            for point in points:
                measured = result["phases"][point]
                expected = sum(result["ledger_phases"][point].values())
                assert abs(measured - expected) <= PHASE_TOLERANCE * expected, \
                    (rank, stage, point, measured, expected)
            states[stage] = ledger["model_states"]
        assert states[3] < states[2] < states[1] < states[0], states


def check_compute_and_comm_do_not_nest(per_rank):
    """A collective launched from autograd's hook splits the layer's backward compute: no comm
    event inside a compute event, and a rank's compute segments disjoint."""
    for rank, by_stage in enumerate(per_rank):
        for stage, result in by_stage.items():
            compute = sorted((e for e in result["events"] if e["stream"] == "compute"),
                             key=lambda e: e["start_s"])
            comm = [e for e in result["events"] if e["stream"] == "comm"]
            for c in comm:
                inside = [e for e in compute if e["start_s"] < c["start_s"] and c["end_s"] < e["end_s"]]
                assert not inside, (rank, stage, c, inside[:1])
            for a, b in zip(compute, compute[1:]):
                assert a["end_s"] <= b["start_s"], (rank, stage, a, b)
            if stage in (0, 1, 2):  # buckets reduced during backward: a layer's compute is split
                backward = [e for e in compute if e["phase"] == "backward"]
                layers = {(e["layer"]) for e in backward}
                assert len(backward) > 2 * len(layers), (rank, stage, len(backward))


def test_ledger_matches_zerosim_and_measured_memory_matches_ledger():
    scenario = load_scenario(TINY, ["cluster.gpus_per_node=2"])
    per_rank = run_stages(scenario, 2)
    check_ledger_and_measurement(scenario, per_rank)
    check_compute_and_comm_do_not_nest(per_rank)
    # ZeRO-3, tied head: one gradient reduce-scatter per unit and step (token and position
    # embeddings, 2 blocks, head), the tied matrix's once, as zerosim counts it.
    for by_stage in per_rank:
        rs = [e for e in by_stage[3]["events"] if e["name"].startswith("unit gradient")]
        assert len(rs) == 5 * 2, len(rs)


def test_mixed_precision_ledger_counts_master_copy():
    scenario = load_scenario(TINY, ["cluster.gpus_per_node=2", "training.precision=bf16"])
    per_rank = run_stages(scenario, 2, steps=1)
    # Only the model states are compared with the allocator here: with bf16 gradients gloo's
    # all-reduce keeps a copy of the last bucket alive past backward (~64 KiB, 10% of this tiny
    # model), which the ledger does not own.
    check_ledger_and_measurement(scenario, per_rank, points=("after_init",))
    ledger = per_rank[0][1]["ledger"]
    assert ledger["master"] == 4 * -(-118_528 // 2)  # fp32 copy of the shard: K = 12, not 8
    assert ledger["params"] == 2 * 118_528


def test_fake_world_size_64_matches_zerosim_at_64():
    """One process, fake process group of 64: one rank's memory at 64-way sharding. Wider than
    the tiny model, so that a 64th of its states dwarfs the ~33 KB the allocator holds besides."""
    scenario = load_scenario(TINY, ["cluster.gpus_per_node=64", "model.hidden=512",
                                    "model.ffn=2048", "model.heads=8"])
    per_rank = run_stages(scenario, 64, backend="fake", steps=1)
    assert len(per_rank) == 1
    # Allocator vs ledger after init and forward only: after backward, stage 3 under the fake
    # group holds ~230 KB the ledger does not own (not yet explained; see the issue note).
    check_ledger_and_measurement(scenario, per_rank, points=("after_init", "after_forward"))
    psi = 4 * (256 * 512 + 32 * 512) + 2 * 4 * (4 * 512 * 512 + 2 * 512 * 2048)  # weights, roughly
    assert per_rank[0][3]["ledger"]["params"] < psi / 32  # sharded 64 ways, not 1
