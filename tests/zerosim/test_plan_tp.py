"""`zerosim plan --allow tp` and sweeps over parallelism.tensor_parallel: tensor parallelism at
each stage as candidates on the scenario's GPUs. Per-rank parameters are counted here by hand in
Megatron-LM's layout (column-parallel QKV and first MLP projection with split biases,
row-parallel outputs with whole biases, a vocabulary-parallel embedding, norms and the learned
position embedding replicated: megatron/core/tensor_parallel/layers.py), model states as the
ZeRO paper's 16 bytes a parameter (Rajbhandari et al. 2020, §3: 2 + 2 + 12) over the N / t
ranks that shard them; what fits is judged against those counts, never against zerosim's own."""

import csv
import io

from zerosim.scenario.load import load_scenario
from zerosim.tradeoffs import plan_family
from zerosim.tradeoffs.plan import plan
from zerosim.tradeoffs.plan_family import batch_splits, tp_degrees
from zerosim.tradeoffs.sweep import rows_of

from tests.conftest import ZERO_PAPER, assert_one_line_error, run_zerosim

L, H, HEADS, F, V, S = 8, 4096, 32, 16384, 51200, 2048  # GPT-2 style, 8 layers of Megatron's 7.5B
GPT = f"""
[model]
name = "8-layer GPT"
layers = {L}
hidden = {H}
heads = {HEADS}
ffn = {F}
vocab = {V}
max_seq_len = {S}

[cluster]
nodes = 1
gpus_per_node = 8
gpu = "A100-80GB"

[training]
framework = "{{framework}}"
zero_stage = {{stage}}
precision = "bf16"
optimizer = "adam"
micro_batch = 1
seq_len = 1024
activation_checkpointing = "full"
"""


def rank_params(t: int) -> int:
    """Ψ of one rank of t, in Megatron's layout: the embedding's V/t rows and the whole position
    table; per layer QKV (h x 3h/t + 3h/t), the attention output (h/t x h, bias h), the MLP
    (h x f/t + f/t, f/t x h + h) and two LayerNorms (2 x 2h); the final LayerNorm; a tied head."""
    layer = H * 3 * H // t + 3 * H // t + H // t * H + H + H * F // t + F // t + F // t * H + H
    return V // t * H + S * H + L * (layer + 4 * H) + 2 * H


# By hand: a layer is 4h^2/t + 2hf/t + (3h + f)/t + 6h (at t = 1, GPT-2's 12h^2 + 13h, which
# gives GPT-2 small 124,439,808), plus Vh/t + Sh + 2h:
#   t = 1: 8 x 201,379,840 + 209,715,200 + 8,388,608 + 8,192
#   t = 2: 8 x 100,702,208 (33,554,432 + 67,108,864 + 14,336 + 24,576) + 104,857,600 + ...
#   t = 4: 8 x  50,363,392 (16,777,216 + 33,554,432 +  7,168 + 24,576) +  52,428,800 + ...
#   t = 8: 8 x  25,193,984 ( 8,388,608 + 16,777,216 +  3,584 + 24,576) +  26,214,400 + ...
PSI = {1: 1_829_150_720, 2: 918_872_064, 4: 463_732_736, 8: 236_163_072}


def scenario_file(write, framework="zero", stage=0):
    return write("gpt8.toml", GPT.format(framework=framework, stage=stage))


def test_the_hand_counts():
    assert rank_params(1) == L * (12 * H * H + 13 * H) + V * H + S * H + 2 * H == PSI[1]
    assert all(rank_params(t) == PSI[t] for t in PSI)
    assert PSI[1] > PSI[2] > PSI[4] > PSI[8]


def test_allow_tp_tries_every_t_of_a_node_at_every_stage_with_the_global_batch(write):
    scenario = load_scenario(scenario_file(write))
    assert tp_degrees(scenario) == [2, 4, 8]  # the divisors of 8 GPUs a node, less t = 1
    result = plan(scenario, 80 * 2**30, allow=("tp",))
    entries = result["candidates"]
    assert [(e["settings"]["tensor_parallel"], e["stage"]) for e in entries] == \
        [(t, s) for t in (2, 4, 8) for s in (0, 1, 2, 3)]
    for e in entries:  # 8 sequences a step over 8 / t data-parallel ranks: t sequences each
        t, mb, steps = (e["settings"][k] for k in ("tensor_parallel", "micro_batch",
                                                    "gradient_accumulation"))
        assert mb * steps == t
        assert e["label"] == (f"{e['stage_name']}, t = {t}, micro-batch {mb}, {steps} "
                              f"micro-step{'s' * (steps > 1)}")
        if e["step_time_s"] is not None:
            assert e["tokens_per_step"] == 8 * 1024
    assert result["configurations"][-1]["world_size"] == 8
    assert all(c["tokens_per_step"] == c["world_size"] * 1024 for c in result["configurations"])


def test_batch_splits_are_the_divisors_of_a_rank_s_sequences_by_hand(write):
    """At t0 = 1, micro-batch 2 x 3 micro-steps on 8 ranks: 48 sequences a step. At t = 4 the
    2 data-parallel ranks take 24 each: 24's divisors from 2 up, the rest in micro-steps."""
    scenario = load_scenario(scenario_file(write), ["training.micro_batch=2",
                                                    "training.gradient_accumulation=3"])
    assert batch_splits(scenario, 4) == ((2, 12), (3, 8), (4, 6), (6, 4), (8, 3), (12, 2),
                                         (24, 1))
    assert batch_splits(scenario, 1) == ((2, 3), (3, 2), (6, 1))
    # at t0 = 8 with micro-batch 8, one rank takes 8 sequences: at t = 1 each GPU takes one,
    # at t = 2 each of 4 ranks takes 2; at micro-batch 1 a GPU at t = 1 would take 1 / 8
    own = load_scenario(scenario_file(write), ["parallelism.tensor_parallel=8",
                                               "training.micro_batch=8"])
    assert batch_splits(own, 1) == ((1, 1),) and batch_splits(own, 2) == ((2, 1),)
    assert batch_splits(load_scenario(scenario_file(write), ["parallelism.tensor_parallel=8"]),
                        1) == ()


def test_zero3_takes_one_micro_batch_of_t_sequences_over_t_regathering_micro_steps(write):
    """ZeRO-3 gathers every parameter for each micro-step's forward and backward and
    reduce-scatters its gradients each micro-step (Rajbhandari et al. 2020, §7.2.2: 3Ψ a
    step). At t = 2 each of the 4 data-parallel ranks takes 2 sequences: as 2 micro-steps of 1
    a rank sends one more reduce-scatter of its slice's bf16 gradients, 2 Ψ_2 x 3/4 bytes (a
    ring sends (N - 1) / N of the buffer), and at least one more forward and backward gather,
    2 x 2 Ψ_2 x 3/4, than as one micro-step of 2, so plan's row is the micro-batch of 2."""
    path = scenario_file(write, stage=3)
    row = {(e["settings"]["tensor_parallel"], e["stage"]): e
           for e in plan(load_scenario(path), 80 * 2**30, allow=("tp",))["candidates"]}[2, 3]
    assert row["label"] == "ZeRO-3, t = 2, micro-batch 2, 1 micro-step"
    one, two = (rows_of(load_scenario(path, ["parallelism.tensor_parallel=2",
                                             f"training.micro_batch={mb}",
                                             f"training.gradient_accumulation={2 // mb}"]),
                        [3], {})[0] for mb in (2, 1))
    assert two["comm_bytes_reduce_scatter"] - one["comm_bytes_reduce_scatter"] == \
        2 * PSI[2] * 3 // 4
    assert two["comm_bytes_all_gather"] - one["comm_bytes_all_gather"] >= 2 * 2 * PSI[2] * 3 // 4
    assert two["comm_bytes_all_reduce"] == one["comm_bytes_all_reduce"]  # TP's: same tokens
    assert one["tokens_per_step"] == two["tokens_per_step"] == 8 * 1024
    assert row["step_time_s"] == one["step_time_s"] < two["step_time_s"]


def test_rank_takes_the_fastest_split_that_fits_simulating_down_to_the_first_slower(
        monkeypatch):
    """A row of four splits (largest micro-batch first), faked: the largest passes the device
    budget, then each smaller one is slower than the one before; rank simulates the first
    three only (the third is no faster than the second) and the row becomes the second."""
    times = {8: 1.0, 4: 2.0, 2: 3.0, 1: 4.0}
    simulated = []

    def fake_rows(built, stages, sets, mode):
        simulated.append(built)
        return [{"step_time_s": times[built], "device_bytes": 100 if built == 8 else 10,
                 "gpu_seconds_per_step": times[built], "tokens_per_step": 8,
                 "exposed_comm_s": 0.0, "comm_bytes_per_rank_total": 0}]

    monkeypatch.setattr(plan_family, "rows_of", fake_rows)
    versions = [({"stage": 3, "label": f"mb {mb}", "fits": True}, mb) for mb in (8, 4, 2, 1)]
    entry = {"stage": 3, "label": "mb 8", "fits": True}
    plan_family.rank([entry], [versions], "auto", lambda: None, budget_bytes=50)
    assert simulated == [8, 4, 2]
    assert entry["label"] == "mb 4" and entry["step_time_s"] == 2.0 and entry["fits"]
    entry = {"stage": 3, "label": "mb 8", "fits": True}  # only the largest: over the budget
    plan_family.rank([entry], [versions[:1]], "auto", lambda: None, budget_bytes=50)
    assert not entry["fits"] and "of device memory as simulated" in entry["why_not"]


def test_every_row_of_a_plan_at_t_2_trains_the_same_tokens(write):
    """A scenario at t0 = 2 with 2 micro-steps on 8 GPUs trains 8 / 2 x 2 x 1 = 8 sequences of
    1024 tokens a step. Offload keeps t = 2 and its batch; hybrid sharding and ZeRO++, refused
    beside tensor parallelism, run at t = 1, where 8 GPUs take one sequence each; --allow tp's
    t = 1, 2, 4, 8 take 1, 2, 4 and 8 sequences per data-parallel rank (t = 2 as its own
    micro-batch of 2 too, so that it searches the micro-batches the other rows do)."""
    scenario = load_scenario(scenario_file(write), ["parallelism.tensor_parallel=2",
                                                    "training.gradient_accumulation=2"])
    result = plan(scenario, 80 * 2**30, allow=("offload", "hybrid", "zeropp", "tp"))
    ranked = [e for e in result["candidates"] if e["step_time_s"] is not None]
    assert {e["allow"] for e in ranked} == {"offload", "hybrid", "zeropp", "tp"}
    plain = [c for c in result["configurations"] if c["world_size"] == 8]
    assert plain and all(r["tokens_per_step"] == 8 * 1024 for r in ranked + plain)
    for e in result["candidates"]:
        t = e["settings"].get("tensor_parallel", 2)
        sequences = e["settings"].get("micro_batch", 1) * e["settings"].get(
            "gradient_accumulation", 2)
        assert sequences * 8 // t == 8, e
        if e["allow"] != "tp":  # tp tries t = 2 too: its 2 sequences split two ways
            assert (t == 2) == (e["allow"] == "offload")
        assert ("t = 1," in e["label"]) == (e["allow"] in ("hybrid", "zeropp") or t == 1)
    assert any(n.startswith("--allow hybrid: zerosim refuses it beside tensor parallelism (")
               for n in result["notes"])
    # at t0 = 2 and one micro-step, a GPU at t = 1 would take half a sequence: a why-not line
    one = plan(load_scenario(scenario_file(write), ["parallelism.tensor_parallel=2"]),
               80 * 2**30, allow=("zeropp",))
    assert one["candidates"] == []
    assert one["notes"][0] == ("--allow zeropp: skipped ZeRO-3 ZeRO++ (hpZ 8, qwZ, qgZ): at t = "
                               "1 the scenario's global batch is 1 x 1 / 2 sequences per GPU, "
                               "not a whole number")


def test_only_t_from_4_fits_and_plan_picks_one_of_them(write):
    """DDP (stage 0) holds 16 bytes of each of its rank's parameters. With the GPU's memory set
    to 16 Ψ_2, t = 1 and t = 2 cannot fit by their model states alone, and t = 4 leaves
    16 (Ψ_2 - Ψ_4) = 7.3 GB for activations, buffers and NCCL's."""
    budget = 16 * PSI[2]
    scenario = load_scenario(scenario_file(write, framework="ddp"))
    result = plan(scenario, budget, allow=("tp",))
    assert [s["stage"] for s in result["stages"]] == [0]  # the framework's stages only
    assert not result["stages"][0]["fits"] and result["configurations"] == []
    fits = {e["settings"]["tensor_parallel"]: e["fits"] for e in result["candidates"]}
    assert fits == {2: False, 4: True, 8: True}
    for e in result["candidates"]:
        t = e["settings"]["tensor_parallel"]
        assert e["peak_bytes"] > 16 * PSI[t]  # states and more
        assert e["fits"] == (16 * PSI[t] < budget)
    for pick in (result["fastest_allowed"], result["cheapest_allowed"]):
        assert pick["allow"] == "tp" and pick["settings"]["tensor_parallel"] in (4, 8)
        assert pick["step_time_s"] > 0 and pick["world_size"] == 8


def test_zero3_shards_each_rank_slice_over_n_over_t(write):
    """ZeRO-3's states per rank: 16 Ψ_t / (N / t), each shard padded to whole elements."""
    from zerosim.analytic.memory import stage_memory

    for t in (1, 2, 4, 8):
        scenario = load_scenario(scenario_file(write, stage=3),
                                 [f"parallelism.tensor_parallel={t}"])
        ways = 8 // t
        assert stage_memory(scenario, 3).model_states_bytes == 16 * -(-PSI[t] // ways)


def test_a_t_the_model_refuses_is_a_why_not_note(write):
    text = GPT.format(framework="zero", stage=3).replace(f"heads = {HEADS}", "heads = 40")
    path = write("gpt40.toml", text.replace(f"hidden = {H}", "hidden = 5120")
                 .replace("gpus_per_node = 8", "gpus_per_node = 16"))
    result = plan(load_scenario(path), 80 * 2**30, allow=("tp",))
    assert sorted({e["settings"]["tensor_parallel"] for e in result["candidates"]}) == [2, 4, 8]
    skipped = [n for n in result["notes"] if n.startswith("--allow tp: skipped")]
    assert skipped == ["--allow tp: skipped t = 16: parallelism.tensor_parallel = 16 must divide "
                       "model.heads = 40 (40 / 16 = 2.5): each rank holds an equal part"]
    text = run_zerosim("plan", path, "--allow", "tp")
    assert text.code == 0, text.stderr
    assert "note: --allow tp: skipped t = 16: parallelism.tensor_parallel = 16 must divide " \
           "model.heads = 40" in text.stdout


def test_a_bare_model_refuses_every_t_with_its_reason():
    result = plan(load_scenario(ZERO_PAPER), 32 * 2**30, allow=("tp",))
    assert result["candidates"] == []
    skipped = [n for n in result["notes"] if n.startswith("--allow tp: skipped")]
    assert [n.split(":")[1] for n in skipped] == [" skipped t = 2", " skipped t = 4",
                                                  " skipped t = 8"]
    assert all("bare parameter count" in n for n in skipped)


def test_a_scenario_with_its_own_t_plans_whole_groups_and_tries_the_other_t(write):
    path = scenario_file(write, stage=3)
    own = load_scenario(path, ["parallelism.tensor_parallel=8", "cluster.nodes=2"])
    result = plan(own, 80 * 2**30)
    fewest = [s["fewest"]["gpus"] for s in result["stages"] if s["fewest"]["gpus"]]
    assert fewest and all(n % 8 == 0 for n in fewest)  # a world t divides
    assert result["configurations"] and all(c["world_size"] % 8 == 0
                                            for c in result["configurations"])
    assert result["tensor_parallel"] == 8
    # the global batch of 16 / 8 = 2 sequences at t = 8 is not whole micro-steps at t < 8
    one_step = plan(own, 80 * 2**30, allow=("tp",))
    assert one_step["candidates"] == []
    assert sum(n.startswith("--allow tp: skipped t = ") for n in one_step["notes"]) == 3
    eight = load_scenario(path, ["parallelism.tensor_parallel=8", "cluster.nodes=2",
                                 "training.gradient_accumulation=8"])
    sequences = {e["settings"]["tensor_parallel"]: e["settings"]["micro_batch"] *
                 e["settings"]["gradient_accumulation"]
                 for e in plan(eight, 80 * 2**30, allow=("tp",))["candidates"]}
    # 16 / 8 x 8 sequences over 16 / t ranks; t = 8 too, its 8 sequences split other ways
    assert sequences == {1: 1, 2: 2, 4: 4, 8: 8}
    text = run_zerosim("plan", path, "--set", "parallelism.tensor_parallel=8")
    assert text.code == 0, text.stderr
    assert "tensor parallel t = 8" in text.stdout.splitlines()[0]


def test_sweep_over_t_one_row_each_with_the_hand_counted_parameters(write, tmp_path):
    out = tmp_path / "t.csv"
    result = run_zerosim("sweep", scenario_file(write, stage=1), "--vary",
                         "training.zero_stage=1", "--vary",
                         "parallelism.tensor_parallel=1,2,4,8", "--out", out, "--jobs", "1")
    assert result.code == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8"))))
    assert [int(r["parallelism.tensor_parallel"]) for r in rows] == [1, 2, 4, 8]
    # ZeRO-1 keeps every bf16 parameter of the rank's slice: 2 bytes each
    assert [int(r["params_bytes"]) for r in rows] == [2 * PSI[t] for t in (1, 2, 4, 8)]
    assert all(int(r["params"]) == PSI[1] for r in rows)  # the model's Ψ, whole
    # the t ranks of a group share their sequence: 8 / t data-parallel ranks of 1024 tokens
    assert [int(r["tokens_per_step"]) for r in rows] == [8 // t * 1024 for t in (1, 2, 4, 8)]
    plot = run_zerosim("plot", out, "--kind", "memory", "-o", tmp_path / "t.html")
    assert plot.code == 0, plot.stderr


def test_sweep_refuses_a_t_the_world_does_not_take_in_one_line(write, tmp_path):
    result = run_zerosim("sweep", scenario_file(write), "--vary",
                         "parallelism.tensor_parallel=1,3", "--out", tmp_path / "t.csv")
    assert_one_line_error(result, "parallelism.tensor_parallel=3",
                          "parallelism.tensor_parallel = 3 must divide the world size 8")
    assert not (tmp_path / "t.csv").exists()


def test_bad_allow_and_bad_t_are_one_line(write):
    assert_one_line_error(run_zerosim("plan", scenario_file(write), "--allow", "tp,ep"),
                          "'ep'", "offload, hybrid, zeropp, tp, pp")
    assert_one_line_error(run_zerosim("plan", scenario_file(write), "--set",
                                      "parallelism.tensor_parallel=0"), "tensor_parallel")
    assert_one_line_error(run_zerosim("plan", scenario_file(write), "--set",
                                      "parallelism.tensor_parallel=16"),
                          "parallelism.tensor_parallel = 16 must divide the world size 8")


def test_the_memory_plot_names_t_in_its_legend():
    from zerosim.tradeoffs.plots import memory_figure

    rows = [{"stage": 3, "stage_name": "ZeRO-3", "world_size": 8, "peak_bytes": (9 - t) * 2**30,
             "gpu_memory_bytes": 80 * 2**30, "parallelism.tensor_parallel": t,
             **{f"{c}_bytes": 2**30 for c in ("params", "grads", "optimizer", "activations",
                                               "buffers", "host")}} for t in (1, 2, 4, 8)]
    legend = [d.name for d in memory_figure(rows).data if d.showlegend is not False]
    assert legend[:4] == ["ZeRO-3, t=1", "ZeRO-3, t=2", "ZeRO-3, t=4", "ZeRO-3, t=8"]


def test_the_scenarios_own_t_is_tried_at_a_larger_micro_batch_too(write):
    """With 2 micro-steps of 1 sequence, --allow tp also tries the scenario's own t at a
    micro-batch of 2 in one micro-step, so that a TP row's gain is not a micro-batch's alone;
    with one sequence per rank there is no other split and the plain rows stand for t = 1."""
    two = load_scenario(scenario_file(write), ["training.gradient_accumulation=2"])
    labels = [e["label"] for e in plan(two, 80 * 2**30, allow=("tp",))["candidates"]]
    assert any(", t = 1, micro-batch 2, 1 micro-step" in label for label in labels), labels
    one = load_scenario(scenario_file(write))
    settings = [e["settings"] for e in plan(one, 80 * 2**30, allow=("tp",))["candidates"]]
    assert {s["tensor_parallel"] for s in settings} == {2, 4, 8}
