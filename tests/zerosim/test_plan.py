"""`zerosim plan` against the ZeRO paper's formulas (§5.1, Table 1: model states per GPU of
(2 + 2 + K)Ψ, 4Ψ + KΨ/N, 2Ψ + (2 + K)Ψ/N and (4 + K)Ψ/N with K = 12 for mixed-precision Adam) and
its claims (§5.4: 4x and 8x larger models for P_os and P_os+g, N-times larger for P_os+g+p; a
trillion parameters on 1024 GPUs at 16 GB each), then the searches at their boundaries."""

import pytest

from zerosim.scenario.load import load_scenario
from zerosim.analytic.memory import stage_memory
from zerosim.analytic.model import total_params
from zerosim.tradeoffs.plan import fewest_gpus, largest_model, plan, with_world

from tests.conftest import SCENARIOS, ZERO_PAPER, assert_one_line_error, run_zerosim

GiB = 2**30


def paper_states_bytes(stage: int, psi: int, n: int) -> int:
    """ZeRO paper Table 1, fp16 + Adam (K = 12), shards of ceil(Ψ/N) elements."""
    shard = -(-psi // n)
    return {0: 16 * psi, 1: 4 * psi + 12 * shard, 2: 2 * psi + 14 * shard, 3: 16 * shard}[stage]


def paper(nodes: int, per_node: int = 8):
    return load_scenario(ZERO_PAPER, [f"cluster.nodes={nodes}", f"cluster.gpus_per_node={per_node}"])


@pytest.mark.parametrize("n,per_node", [(1, 1), (4, 4), (64, 8), (1024, 8)])
@pytest.mark.parametrize("budget", [32 * GiB, 80 * GiB, 16 * 10**9])
def test_largest_psi_whose_states_fit_is_the_formulas_boundary(n, per_node, budget):
    scenario = paper(n // per_node, per_node)
    for stage in range(4):
        psi = largest_model(scenario, stage, budget)["max_params_model_states"]
        assert paper_states_bytes(stage, psi, n) <= budget < paper_states_bytes(stage, psi + 1, n)
    # the two closed forms
    assert largest_model(scenario, 0, budget)["max_params_model_states"] == budget // 16
    assert largest_model(scenario, 3, budget)["max_params_model_states"] == n * (budget // 16)


def largest_psi(replicated: int, sharded: int, budget: int, n: int) -> int:
    """The largest Ψ with replicated·Ψ + sharded·⌈Ψ/N⌉ <= M, by hand: with k = ⌈Ψ/N⌉ shard
    elements, Ψ <= min(kN, (M - sharded·k) / replicated), largest at k = ⌊M / (replicated·N +
    sharded)⌋ or k + 1."""
    k = budget // (replicated * n + sharded)
    return max(min(j * n, (budget - sharded * j) // replicated) for j in (k, k + 1))


def test_the_papers_claims_on_model_size():
    budget, n = 16 * 10**9, 1024
    scenario = paper(128)  # 1024 GPUs
    psi = [largest_model(scenario, s, budget)["max_params_model_states"] for s in range(4)]
    assert psi[0] == 10**9  # 16Ψ <= 16 GB
    assert psi[1] == largest_psi(4, 12, budget, n) == 3_988_315_480  # 4Ψ + 12Ψ/N: 16 GB exactly
    assert psi[2] == largest_psi(2, 14, budget, n) == 7_945_683_801  # 2Ψ + 14Ψ/N: 16 GB exactly
    assert psi[3] == n * 10**9  # 16Ψ/N
    # §5.4: 4x, 8x and N x the baseline, to the ratios' exact values 16/(4 + 12/N) and
    # 16/(2 + 14/N) but for the whole-element rounding of Ψ (a relative 1e-9 here)
    assert psi[1] / psi[0] == pytest.approx(16 / (4 + 12 / n), rel=1e-9)
    assert psi[2] / psi[0] == pytest.approx(16 / (2 + 14 / n), rel=1e-9)
    assert psi[3] >= 10**12  # §1: a trillion parameters on 1024 GPUs, 16 GB each


def test_whole_model_counts_buffers_and_activations_at_the_boundary():
    budget = 32 * GiB
    bare = paper(8)
    from dataclasses import replace

    def at(psi):
        return replace(bare, model=replace(bare.model, params=psi))
    for stage in range(4):
        got = largest_model(bare, stage, budget)
        psi = got["max_params_whole"]
        assert stage_memory(at(psi), stage).peak_bytes <= budget < \
            stage_memory(at(psi + 1), stage).peak_bytes
        if stage == 3:  # gathered layers and their gradients are real memory
            assert psi < got["max_params_model_states"]
    llama = load_scenario(SCENARIOS / "llama2_7b_64gpu.toml")
    for stage in range(4):
        got = largest_model(llama, stage, 40 * GiB)
        layers = got["max_layers"]
        deeper = [replace(llama, model=replace(llama.model, layers=n)) for n in (layers, layers + 1)]
        assert stage_memory(deeper[0], stage).peak_bytes <= 40 * GiB < \
            stage_memory(deeper[1], stage).peak_bytes
        assert got["max_params_whole"] == total_params(deeper[0].model)
        assert got["max_params_whole"] < got["max_params_model_states"]  # activations count


def test_fewest_gpus_is_the_first_world_size_that_fits():
    scenario = paper(8)  # 7.5B, 8 GPUs per node, 32 GiB V100s
    budget = 32 * GiB
    # Each GPU first holds the CUDA context (723 MiB) and NCCL's buffers (9,633,792 bytes per
    # channel and receiving peer): across DGX-2-style nodes (4 NICs of 12 GB/s through PCIe Gen3
    # per 8 GPUs) 4 ring channels at 12 GB/s, set up twice = 8, with the ring's peer and the
    # tree's three; on one node (NVLink 120 GB/s as NCCL rates it) 3 at 40, doubled to 6, set up
    # twice = 12, one peer each.
    context, connection = 723 * 2**20, 9_633_792
    across, inside = context + 8 * 4 * connection, context + 12 * connection
    # ZeRO-1 by hand: 4Ψ + 12Ψ/N <= M - O  =>  N >= 12Ψ / (M - O - 4Ψ) = 27.3, so 28, whole
    # nodes: 32 (without the overhead it would be 20.6 -> 24)
    assert 12 * 7.5e9 / (budget - across - 4 * 7.5e9) == pytest.approx(27.33, abs=0.01)
    assert fewest_gpus(scenario, 1, budget)["gpus"] == 32
    for stage, previous in ((2, 5), (3, 3)):  # below one node, any GPU count counts
        got = fewest_gpus(scenario, stage, budget)
        assert got["gpus"] == previous + 1
        assert stage_memory(with_world(scenario, got["gpus"]), stage).peak_bytes <= budget - inside
        assert stage_memory(with_world(scenario, previous), stage).peak_bytes > budget - inside
    ddp = fewest_gpus(scenario, 0, budget)
    assert ddp["gpus"] is None and "DDP shards nothing" in ddp["why"]
    assert "by itself: optimizer states" in ddp["why"]  # 12Ψ = 90 GB > 32 GiB on its own


def test_why_a_stage_does_not_fit_names_the_term():
    result = plan(load_scenario(SCENARIOS / "llama2_7b_64gpu.toml"), 40 * GiB)
    ddp, zero1 = result["stages"][0], result["stages"][1]
    assert not ddp["fits"] and "over it by itself: optimizer states" in ddp["why_not"]
    # ZeRO-1 at 64 GPUs: no term alone is over 40 GiB; activations are the largest
    assert not zero1["fits"] and "largest term: activations" in zero1["why_not"]
    assert "even sharded" in zero1["fewest"]["why"]  # replicated params + grads + activations


def test_configurations_all_fit_and_the_picks_are_the_minima():
    scenario = paper(8)
    result = plan(scenario, 32 * GiB)
    configs = result["configurations"]
    assert configs and all(c["peak_bytes"] <= 32 * GiB for c in configs)
    assert {c["stage"] for c in configs} == {1, 2, 3}  # DDP never fits
    assert result["fastest"] == min(configs, key=lambda c: c["step_time_s"])
    assert result["cheapest"] == min(configs, key=lambda c: c["gpu_seconds_per_step"])
    sizes = {c["world_size"] for c in configs}
    assert {4, 6, 32, 64} <= sizes  # each stage's fewest and the scenario's own
    one = next(c for c in configs if c["world_size"] == 64 and c["stage"] == 3)
    sim = run_zerosim("simulate", ZERO_PAPER, "--stage", 3, "--json").json[0]
    assert one["step_time_s"] == sim["step_time_s"]


def test_plan_command(tmp_path):
    text = run_zerosim("plan", ZERO_PAPER)
    assert text.code == 0, text.stderr
    for fragment in ("Largest model that fits on 64 GPUs", "ZeRO-1      32 GPUs",
                     "DDP does not fit", "Fastest per step: ZeRO-3", "Cheapest per step: ZeRO-3"):
        assert fragment in text.stdout
    data = run_zerosim("plan", ZERO_PAPER, "--gpu-memory-GiB", "80", "--json").json
    assert data["gpu_memory_bytes"] == 80 * GiB
    # DDP's 16 bytes per parameter in what the CUDA context and NCCL's buffers leave (8 nodes of
    # V100s: 723 MiB + 8 channels x 4 peers x 9,633,792 bytes)
    assert data["overhead_bytes"] == 723 * 2**20 + 8 * 4 * 9_633_792
    assert data["stages"][0]["max_params_model_states"] == (80 * GiB - data["overhead_bytes"]) // 16
    assert_one_line_error(run_zerosim("plan", ZERO_PAPER, "--gpu-memory-GiB", "-1"),
                          "--gpu-memory-GiB", "in (0, 2**23]")
    assert_one_line_error(run_zerosim("plan", ZERO_PAPER, "--gpu-memory-GiB", "nan"),
                          "--gpu-memory-GiB")
    # 2**23 GiB is 2**53 bytes, the most a JSON number holds exactly (it printed 1e21 before)
    assert run_zerosim("plan", ZERO_PAPER, "--gpu-memory-GiB", str(2**23), "--json").code == 0
    assert_one_line_error(run_zerosim("plan", ZERO_PAPER, "--gpu-memory-GiB", "1e12"),
                          "--gpu-memory-GiB", "in (0, 2**23]")


def test_plan_says_what_it_leaves_out(monkeypatch):
    # a straggler named by rank 63 exists only at 64 GPUs: smaller worlds are planned without it
    slow = plan(load_scenario(ZERO_PAPER, ["variation.slow_ranks=[63]"]), 32 * GiB)
    assert slow["configurations"] and any("[variation]" in n for n in slow["notes"])
    offload = plan(load_scenario(ZERO_PAPER, ["training.optimizer_offload=cpu"]), 32 * GiB)
    # 4 + 4 + 4 + 4 bytes (master, gradient, moments) x 7.5e9 / 64 elements = 1.875e9 bytes on
    # the host per GPU; DDP offloads nothing (family.check_training: offload needs a stage)
    assert offload["stages"][1]["host_bytes"] == 16 * 7_500_000_000 // 64
    assert any(n.startswith("optimizer_offload = cpu: host memory per GPU (ZeRO-1 1.746 GiB, ")
               for n in offload["notes"])
    assert not any("DDP" in n for n in offload["notes"])
    huge = plan(paper(8), 10**9 * GiB)
    assert huge["stages"][3]["max_params_model_states"] == 2**53
    assert any("zerosim's limit on Ψ" in n for n in huge["notes"])
    assert not any("limit" in n for n in plan(paper(8), 32 * GiB)["notes"])
    # a world whose ranks simulated one by one exceed the memory budget is skipped with its
    # reason, not fatal: a budget just large enough for the 16-GPU world's largest step
    from zerosim.sim.lockstep import budget

    asked = []
    measure = budget.check
    monkeypatch.setattr(budget, "check", lambda ranks, size, why: (
        asked.append((ranks, size)), measure(ranks, size, why))[-1])
    plan(paper(8), 32 * GiB, mode="per_rank")
    monkeypatch.setattr(budget, "check", measure)
    monkeypatch.setattr(budget, "BUDGET_BYTES", max(size for ranks, size in asked if ranks == 16))
    per_rank = plan(paper(8), 32 * GiB, mode="per_rank")
    assert {c["world_size"] for c in per_rank["configurations"]} == {4, 6, 8, 16}
    for gpus in (32, 64):
        assert any(n.startswith(f"{gpus} GPUs not ranked: simulating {gpus} ranks one by one")
                   and "zerosim.sim.lockstep.budget.BUDGET_BYTES" in n for n in per_rank["notes"])


def test_plan_reports_progress_per_gpu_count_once_it_runs_long(monkeypatch):
    """Past simulate's delay, plan says on stderr how many GPU counts of how many it has ranked
    (jitter makes each one take seconds); stdout is the same with and without it."""
    from zerosim.cli import progress

    quiet = run_zerosim("plan", ZERO_PAPER, "--json")
    monkeypatch.setattr(progress, "PROGRESS_AFTER_S", 0.0)
    shown = run_zerosim("plan", ZERO_PAPER, "--json")
    sizes = {c["world_size"] for c in shown.json["configurations"]}
    assert quiet.stderr == "" and shown.stdout == quiet.stdout
    lines = shown.stderr.splitlines()
    assert lines and all(line.startswith("zerosim plan: [") for line in lines)
    assert f"] {len(sizes)}/{len(sizes)} GPU counts" in lines[-1]
    # before the ranking, each stage's fewest GPU count is simulated: a phase of its own
    assert [line.split("] ")[1].split(",")[0] for line in lines[:4]] == [
        f"{i}/4 stages' fewest GPU counts simulated" for i in range(4)]


def test_a_huge_shard_group_is_solved_not_tried(monkeypatch):
    """Review U1: with shard_group = 2**19, plan tried every world size up to the next multiple
    of it, building a scenario each, at every bisection step (92 s, silent). The fewest GPUs is
    the first multiple of the shard group that fits, found with a few scenarios built."""
    from zerosim.tradeoffs import plan as planning

    scenario = load_scenario(ZERO_PAPER, ["cluster.nodes=512", "training.shard_group=4096"])
    built = []
    real = planning.with_world
    monkeypatch.setattr(planning, "with_world",
                        lambda s, gpus: (built.append(gpus), real(s, gpus))[1])
    got = fewest_gpus(scenario, 3, 32 * GiB)
    # ZeRO-3 of 7.5B fits 4 GPUs, but hybrid groups of 4096 need a world they divide: 512 nodes
    assert got["gpus"] == 4096
    assert all(gpus % 4096 == 0 for gpus in built)  # only sizes the shard group divides
    assert len(built) <= 2 * 20  # a bisection over 2**20 GPUs: 20 steps, not 20 x 4096 tries
    # with 64 GiB, ZeRO-3 of 7.5B fits 2 GPUs (16 x 7.5e9 / 2 bytes = 55.9 GiB); hpZ's partition of 4
    # must divide the GPUs of the node, which below a node is the world: 4
    assert fewest_gpus(paper(8), 3, 64 * GiB)["gpus"] == 2
    hpz = load_scenario(ZERO_PAPER, ["training.zero_stage=3", "training.hpz_partition=4"])
    assert fewest_gpus(hpz, 3, 64 * GiB)["gpus"] == 4
    assert fewest_gpus(load_scenario(ZERO_PAPER, ["training.shard_group=16"]), 2,
                       32 * GiB)["gpus"] == 16  # ZeRO-2 fits 6, the shard group makes it 16


def test_plan_calls_fitting_only_what_simulate_calls_fitting():
    """Review I5b: with 31.554 GiB GPUs, plan listed ZeRO-1 on 32 GPUs as fitting (the memory
    model's 30.56 GiB in what the context and NCCL leave) where simulate says NO (its device
    memory, the caching allocator's rounded segments, is 31.556 GiB). Now plan judges what it
    simulates as simulate does."""
    sets = ["training.seq_len=1024", "cluster.nodes=4", "cluster.hbm_GiB=31.554"]
    budget = round(31.554 * GiB)
    result = plan(load_scenario(ZERO_PAPER, sets), budget)
    sim = run_zerosim("simulate", ZERO_PAPER, *(a for s in sets for a in ("--set", s)), "--stage",
                      1, "--json").json[0]
    assert sim["device_bytes"] > budget  # simulate: NO on 32 GPUs
    zero1 = result["stages"][1]
    assert not zero1["fits"] and "device memory as simulated" in zero1["why_not"]
    assert (32, 1) not in {(c["world_size"], c["stage"]) for c in result["configurations"]}
    assert zero1["fewest"]["gpus"] == 40  # the next whole node
    on_40 = run_zerosim("simulate", ZERO_PAPER, *(a for s in sets for a in ("--set", s)),
                        "--set", "cluster.nodes=5", "--stage", 1, "--json").json[0]
    assert on_40["device_bytes"] <= budget  # simulate: fits on 40
    for config in result["configurations"]:  # every one that plan calls fitting, simulate does
        assert config["world_size"] != 32 or config["stage"] != 1
    assert any("simulate says no there" in note for note in result["notes"])


def test_a_fewest_count_simulate_refused_is_not_kept_when_the_next_cannot_run(monkeypatch):
    """The memory model's fewest count stands only when simulate cannot run it at all; once
    simulate said no there, a next count it cannot run leaves no answer, with the reason."""
    from zerosim.errors import InputError
    from zerosim.tradeoffs import plan as planning

    asked = []

    def simulated(scenario, gpus, stage, mode, cache):
        asked.append(gpus)
        if len(asked) == 1:
            return {"device_bytes": 2 * 2**30, "peak_bytes": 2**30}  # over the 1 GiB below
        raise InputError("too many ranks to simulate one by one")

    monkeypatch.setattr(planning, "_simulated", simulated)
    s = load_scenario(ZERO_PAPER)
    entry = {"stage": 3, "name": "ZeRO-3", "fewest": {"gpus": 64, "peak_bytes": 1}}
    assert planning._confirm_fewest(s, [entry], 2**30, "auto", {}) == []
    assert entry["fewest"]["gpus"] is None and len(asked) == 2
    assert "simulate says no on the 1 count(s) it could run" in entry["fewest"]["why"]
    assert "too many ranks to simulate one by one" in entry["fewest"]["why"]
    # the first count itself cannot be simulated: the memory model's answer stands
    asked.clear()
    asked.append(0)  # every call raises now
    entry = {"stage": 3, "name": "ZeRO-3", "fewest": {"gpus": 64, "peak_bytes": 1}}
    planning._confirm_fewest(s, [entry], 2**30, "auto", {})
    assert entry["fewest"]["gpus"] == 64


@pytest.mark.parametrize("per_node", [1, 2, 4, 8])
@pytest.mark.parametrize("layout", [[], ["parallelism.shard_group=2"], ["parallelism.shard_group=8"],
                                    ["parallelism.shard_group=4"], ["parallelism.shard_group=32"],
                                    ["parallelism.shard_group=16"],
                                    ["training.framework='deepspeed'", "parallelism.hpz_partition=2"]])
def test_the_solved_world_sizes_are_the_ones_the_scenario_checker_accepts(per_node, layout):
    """allowed_index solves which world sizes the scenario's keys allow (review U1); the oracle is
    the scenario checker itself, asked size by size as plan used to: the first candidate from
    each index on that with_world accepts."""
    from zerosim.errors import InputError
    from zerosim.tradeoffs.plan import allowed_index, gpu_count

    if per_node == 1 and "parallelism.hpz_partition=2" in layout:
        layout = layout[:1]  # hpZ's partition must divide a node's GPUs: none with one per node
    base = load_scenario(ZERO_PAPER, ["training.zero_stage=3", f"cluster.gpus_per_node={per_node}",
                                      "cluster.nodes=96", *layout])  # 96: every layout is valid

    def accepted(index: int) -> bool:
        try:
            with_world(base, gpu_count(base, index))
        except InputError:
            return False
        return True

    for index in range(3 * per_node + 12):
        expected = next(j for j in range(index, index + 200) if accepted(j))
        assert allowed_index(base, index) == expected, (index, gpu_count(base, expected))
