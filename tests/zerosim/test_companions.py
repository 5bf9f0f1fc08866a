"""What users already have: a Hugging Face config.json for the shape, a DeepSpeed ds_config for
the training settings."""

import json

import pytest

from zerosim.scenario.load import load_scenario
from zerosim.analytic.memory import memory_table
from zerosim.analytic.model import total_params

from tests.conftest import SCENARIOS, ZERO_PAPER, assert_one_line_error, run_zerosim

GPT2_CONFIG = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
               "n_positions": 1024, "n_ctx": 1024, "vocab_size": 50257, "n_inner": None,
               "activation_function": "gelu_new", "resid_pdrop": 0.1}
PYTHIA_160M = {"model_type": "gpt_neox", "hidden_size": 768, "intermediate_size": 3072,
               "num_hidden_layers": 12, "num_attention_heads": 12, "max_position_embeddings": 2048,
               "vocab_size": 50304, "rotary_pct": 0.25, "use_parallel_residual": True,
               "tie_word_embeddings": False, "hidden_act": "gelu"}


def scenario_with_hf(write, config: dict, extra_model: str = "") -> str:
    write("cfg/config.json", json.dumps(config))
    return write("s.toml", f'[model]\nhf_config = "cfg"\n{extra_model}\n'
                           f'[training]\nseq_len = 512\n')


def test_llama_from_hf_config_equals_the_written_out_shape():
    from_hf = load_scenario(SCENARIOS / "llama2_7b_hf_64gpu.toml")
    by_hand = load_scenario(SCENARIOS / "llama2_7b_64gpu.toml")
    assert total_params(from_hf.model) == 6_738_415_616
    assert from_hf.model.name == "meta-llama/Llama-2-7b-hf"
    assert memory_table(from_hf) == memory_table(by_hand)


@pytest.mark.parametrize("config, expected", [(GPT2_CONFIG, 124_439_808), (PYTHIA_160M, 162_322_944)])
def test_gpt2_and_gpt_neox_configs(write, config, expected):
    result = run_zerosim("memory", scenario_with_hf(write, config), "--json")
    assert result.code == 0, result.stderr
    assert result.json["params"] == expected


def test_explicit_model_keys_override_the_hf_config(write):
    path = scenario_with_hf(write, GPT2_CONFIG, extra_model="layers = 2")
    per_layer = 12 * 768**2 + 13 * 768
    assert run_zerosim("memory", path, "--json").json["params"] == 124_439_808 - 10 * per_layer


def test_hf_config_from_the_command_line_is_relative_to_the_working_directory(write, monkeypatch):
    write("here/gpt2.json", json.dumps(GPT2_CONFIG))
    scenario = write("elsewhere/s.toml", "[model]\nparams = 1e9\n[training]\nseq_len = 512\n")
    monkeypatch.chdir(scenario.parent.parent / "here")
    result = run_zerosim("memory", scenario, "--json", "--set", "model.hf_config=gpt2.json",
                         "--set", "model.params=false")  # junk params must still be refused...
    assert_one_line_error(result, "model.params must be an integer")
    result = run_zerosim("memory", write("elsewhere/t.toml", "[model]\n[training]\nseq_len = 512\n"),
                         "--json", "--set", "model.hf_config=gpt2.json")
    assert result.code == 0, result.stderr
    assert result.json["params"] == 124_439_808


@pytest.mark.parametrize("config, fragments", [
    ({"model_type": "bert", "hidden_size": 768}, ["model_type 'bert' is not supported", "llama"]),
    ({"model_type": "llama", "hidden_size": 64}, ["missing key 'num_attention_heads'"]),
    ({**PYTHIA_160M, "attention_bias": False}, ["attention_bias = False is not modeled"]),
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
      "intermediate_size": 128, "vocab_size": 100, "attention_bias": True},
     ["attention_bias = True is not modeled"]),
])
def test_unsupported_hf_configs_are_refused(write, config, fragments):
    assert_one_line_error(run_zerosim("memory", scenario_with_hf(write, config)), *fragments)


def test_broken_hf_config_files(write):
    write("cfg/config.json", "{not json")
    path = write("s.toml", '[model]\nhf_config = "cfg"\n')
    assert_one_line_error(run_zerosim("memory", path), "invalid JSON")
    path = write("t.toml", '[model]\nhf_config = "missing.json"\n')
    assert_one_line_error(run_zerosim("memory", path), "hf_config not found", "missing.json")


def ds(write, config: dict):
    return write("ds_config.json", json.dumps(config))


def test_deepspeed_stage2_cpu_offload_changes_stage_and_moves_optimizer_to_host(write):
    before = run_zerosim("memory", ZERO_PAPER, "--json").json
    config = ds(write, {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})
    result = run_zerosim("memory", ZERO_PAPER, "--json", "--deepspeed", config)
    assert result.code == 0, result.stderr
    after = result.json
    assert before["zero_stage"] == 3 and after["zero_stage"] == 2
    # No fp16/bf16 section: DeepSpeed trains in fp32, and the note says so.
    assert after["precision"] == "fp32" and "DeepSpeed trains in fp32" in result.stderr
    assert before["stages"][2]["optimizer_bytes"] > 0 and before["stages"][2]["host_bytes"] == 0
    stage2 = after["stages"][2]
    assert stage2["optimizer_bytes"] == 0 and stage2["grads_bytes"] == 0
    # fp32 master + 2 moments + fp32 gradient partition, each rank its 1/64; a ds_config is a
    # DeepSpeed run, whose stages 1-2 pin a copy of the partition in the training dtype beside
    # them (fp32 here: 4 more bytes; frameworks/deepspeed.py, pinned_bit16_host_partition)
    assert after["stages"][2]["host_bytes"] == (16 + 4) * 7_500_000_000 // 64
    # DeepSpeed offloads ZeRO's partitions: stages 1-3; stage 0 keeps its optimizer on the GPU
    assert all(s["optimizer_bytes"] == 0 and s["host_bytes"] > 0 for s in after["stages"][1:])
    assert after["stages"][0]["host_bytes"] == 0 and after["stages"][0]["optimizer_bytes"] > 0


def test_deepspeed_defaults_apply_to_absent_keys_and_the_note_names_them(write):
    config = ds(write, {"bfloat16": {"enabled": True}})  # DeepSpeed's older alias of bf16
    notes = []
    scenario = load_scenario(SCENARIOS / "llama2_7b_64gpu.toml", deepspeed=config, notes=notes)
    t = scenario.training
    assert (t.precision, t.zero_stage, t.optimizer_offload) == ("bf16", 0, "none")
    assert round(t.reduce_bucket_MiB * 2**20) == round(t.allgather_bucket_MiB * 2**20) == 10**9
    assert (t.micro_batch, t.optimizer) == (1, "adamw")  # no DeepSpeed default: the scenario's
    assert "DeepSpeed defaults for zero_stage" in notes[0]
    assert "kept the scenario's micro_batch (not given), optimizer (not given)" in notes[0]


def test_deepspeed_precision_buckets_micro_batch_and_optimizer(write):
    config = ds(write, {"bf16": {"enabled": True}, "train_micro_batch_size_per_gpu": 4,
                        "optimizer": {"type": "SGD", "params": {"momentum": 0.9}},
                        "zero_optimization": {"stage": 1, "reduce_bucket_size": 5e8}})
    # the paper's accounting (--set after the file wins), whose ZeRO-2 buckets grow as filled
    scenario = load_scenario(SCENARIOS / "llama2_7b_64gpu.toml", ["training.framework='zero'"],
                             deepspeed=config)
    t = scenario.training
    assert (t.zero_stage, t.precision, t.micro_batch, t.optimizer) == (1, "bf16", 4, "sgd_momentum")
    assert round(t.reduce_bucket_MiB * 2**20) == 10**9  # 5e8 bf16 elements
    # ZeRO-2's buckets hold what is made into them: at the untied head's backward, with every
    # activation alive, its bf16 gradient (32000 x 4096 matrix + the final RMSNorm's 4096)
    assert memory_table(scenario)[2].buffers_bytes == 2 * (32000 * 4096 + 4096)
    small = ds(write, {"zero_optimization": {"stage": 2, "reduce_bucket_size": 10**7}})
    capped = load_scenario(SCENARIOS / "llama2_7b_64gpu.toml", ["training.framework='zero'"],
                           deepspeed=small)
    # no fp16/bf16 section: DeepSpeed trains in fp32, 4 B per element; two full buckets
    assert memory_table(capped)[2].buffers_bytes == 2 * 4 * 10**7


def test_auto_keeps_the_scenarios_values_and_set_wins_over_deepspeed(write):
    config = ds(write, {"bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto",
                        "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}})
    scenario = load_scenario(SCENARIOS / "tiny_gpt_4rank_cpu.toml", ["training.zero_stage=3"],
                             deepspeed=config)
    t = scenario.training
    assert (t.precision, t.micro_batch, t.reduce_bucket_MiB) == ("fp32", 2, 0.0625)  # the file's
    assert t.zero_stage == 3  # --set comes last


def test_deepspeed_zeropp_mics_and_param_offload_are_taken(write):
    """ZeRO++'s three keys, MiCS's shard size (replicas summed at the boundary) and parameter
    offload come from the ds_config as DeepSpeed names them."""
    zero = {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}
    t = load_scenario(ZERO_PAPER, deepspeed=ds(write, {"zero_optimization": zero})).training
    assert (t.optimizer_offload, t.param_offload) == ("cpu", "cpu")
    zero = {"stage": 3, "zero_hpz_partition_size": 8, "zero_quantized_weights": True,
            "zero_quantized_gradients": True}
    s = load_scenario(ZERO_PAPER, ["training.framework='deepspeed'"],
                      deepspeed=ds(write, {"zero_optimization": zero}))
    assert (s.parallelism.hpz_partition, s.training.quantized_weights,
            s.training.quantized_gradients) == (8, True, True)
    p = load_scenario(ZERO_PAPER, deepspeed=ds(write, {"zero_optimization": {
        "stage": 3, "mics_shard_size": 16}})).parallelism
    assert (p.shard_group, p.replica_allreduce) == (16, "once_per_step")


def test_deepspeed_batch_keys_are_taken_as_deepspeed_derives_them(write):
    """Review finding I11: gradient_accumulation_steps was dropped without a word, so a step
    of 8 micro-steps was priced as one. DeepSpeed's runtime/config.py
    (_set_batch_related_parameters): steps given are taken; absent with train_batch_size, they
    are train_batch_size / (micro x world); absent without it, 1. 64 ranks here."""
    llama = SCENARIOS / "llama2_7b_64gpu.toml"
    notes = []
    t = load_scenario(llama, deepspeed=ds(write, {"gradient_accumulation_steps": 8}),
                      notes=notes).training
    assert t.gradient_accumulation == 8 and "gradient_accumulation=8" in notes[0]
    derived = ds(write, {"train_micro_batch_size_per_gpu": 2, "train_batch_size": 1024})
    assert load_scenario(llama, deepspeed=derived).training.gradient_accumulation == 8  # 1024/(2x64)
    five = write("five.toml", llama.read_text().replace("\nseq_len = 4096",
                                                        "\nseq_len = 4096\ngradient_accumulation = 5"))
    assert load_scenario(five).training.gradient_accumulation == 5
    # the ds_config describes the run: absent steps and batch mean DeepSpeed's 1, not the file's 5
    assert load_scenario(five, deepspeed=ds(write, {})).training.gradient_accumulation == 1
    # and --set still comes last
    assert load_scenario(five, ["training.gradient_accumulation=3"],
                         deepspeed=ds(write, {})).training.gradient_accumulation == 3
    # the shipped example's 8 steps reach the step: tokens per step = micro 2 x seq 4096 x 8
    shown = run_zerosim("simulate", llama, "--stage", "2", "--json", "--deepspeed",
                        "scenarios/deepspeed/zero2_cpu_offload.json")
    assert shown.code == 0, shown.stderr
    assert "gradient_accumulation=8" in shown.stderr
    row = json.loads(shown.stdout)[0]
    assert row["tokens_per_s_per_gpu"] * row["step_time_s"] == pytest.approx(2 * 4096 * 8, rel=1e-12)


@pytest.mark.parametrize("config, micro, steps", [
    ({"train_batch_size": 128}, 2, 1),                                   # only the batch: steps 1
    ({"train_batch_size": 256, "gradient_accumulation_steps": 2}, 2, 2),  # the micro-batch derived
    ({"train_batch_size": 1024, "train_micro_batch_size_per_gpu": 4}, 4, 4),  # the steps derived
    ({"train_batch_size": 128, "gradient_accumulation_steps": "auto"}, 2, 1),  # the scenario's 1 kept
])
def test_deepspeed_derives_what_train_batch_size_leaves_open(write, config, micro, steps):
    """DeepSpeed's _set_batch_related_parameters on 64 ranks (the Llama scenario's micro-batch
    is 1, which the ds_config overrides when it fixes the batch without it): micro = batch /
    (steps x 64), steps = batch / (micro x 64), or steps 1 when it gives neither."""
    notes = []
    t = load_scenario(SCENARIOS / "llama2_7b_64gpu.toml", deepspeed=ds(write, config),
                      notes=notes).training
    assert (t.micro_batch, t.gradient_accumulation) == (micro, steps)
    assert t.micro_batch * t.gradient_accumulation * 64 == config["train_batch_size"]
    assert f"micro_batch={micro}, gradient_accumulation={steps} from train_batch_size" in notes[0]
    assert "kept the scenario's micro_batch" not in notes[0]


@pytest.mark.parametrize("zero, expected", [({"stage": 3}, True), ({"stage": 2}, False),
                                            ({"stage": 1, "overlap_comm": True}, True),
                                            ({"stage": 3, "overlap_comm": False}, False)])
def test_deepspeed_overlap_comm_defaults_to_stage_3(write, zero, expected):
    """DeepSpeedZeroConfig.overlap_comm_valid: absent means `stage == 3`."""
    config = ds(write, {"zero_optimization": zero})
    assert load_scenario(ZERO_PAPER, deepspeed=config).training.overlap_comm is expected


@pytest.mark.parametrize("config, extra, fragments", [
    ({"train_micro_batch_size_per_gpu": 2, "train_batch_size": 1000}, [],
     ["train_batch_size 1000 is not a multiple of micro-batch 2 x world size 64 = 128"]),
    ({"train_micro_batch_size_per_gpu": 2, "train_batch_size": 1024, "gradient_accumulation_steps": 4},
     [], ["train_batch_size 1024 != micro-batch 2 x gradient_accumulation 4 x world size 64 = 512"]),
    ({"train_micro_batch_size_per_gpu": 2, "train_batch_size": 1024}, ["--set", "training.gradient_accumulation=3"],
     ["train_batch_size 1024 != micro-batch 2 x gradient_accumulation 3 x world size 64 = 384"]),
    ({"gradient_accumulation_steps": 0}, [], ["gradient_accumulation_steps = 0 must be between 1"]),
    ({"zero_optimization": {"overlap_comm": "yes"}}, [], ["overlap_comm must be true or false"]),
])
def test_inconsistent_deepspeed_batches_are_one_line(write, config, extra, fragments):
    assert_one_line_error(run_zerosim("memory", SCENARIOS / "llama2_7b_64gpu.toml", "--deepspeed",
                                      ds(write, config), *extra), *fragments)


@pytest.mark.parametrize("config, fragments", [
    ({"fp16": {"enabled": True}, "bf16": {"enabled": True}}, ["both true"]),
    ({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}},
     ["needs cluster.nvme_read_GBps and cluster.nvme_write_GBps"]),
    ({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}},
     ["param_offload = 'cpu' without optimizer_offload"]),
    ({"zero_optimization": {"offload_optimizer": {"device": "disk"}}}, ["'disk' is not modeled"]),
    ({"zero_optimization": {"stage": 3, "zero_quantized_weights": "yes"}},
     ["zero_quantized_weights must be true or false"]),
    ({"zero_optimization": {"stage": "two"}}, ["zero_optimization.stage must be an integer"]),
    ({"zero_optimization": {"stage": 4}}, ["training.zero_stage = 4"]),
    ({"zero_optimization": []}, ["zero_optimization must be an object"]),
    ({"optimizer": {"type": "Lamb"}}, ["'Lamb' is not modeled"]),
    ({"bf16": {"enabled": "yes"}}, ["bf16.enabled must be true, false"]),
    ({"zero_optimization": {"stage": float("nan")}}, ["zero_optimization.stage must be an integer"]),
    ({"zero_optimization": {"reduce_bucket_size": 10**400}}, ["reduce_bucket_size", "2**53"]),
    ({"zero_optimization": {"reduce_bucket_size": 0}}, ["reduce_bucket_size = 0 must be between 1"]),
    ({"train_micro_batch_size_per_gpu": float("inf")}, ["train_micro_batch_size_per_gpu must be"]),
    ({"optimizer": {"type": "SGD", "params": {"momentum": {"a": 1}}}}, ["momentum must be a number"]),
    ({"optimizer": {"type": ["Adam"]}}, ["optimizer.type = ['Adam'] is not modeled"]),
    ({"zero_optimization": {"offload_optimizer": {"device": 7}}}, ["device = 7 is not modeled"]),
])
def test_bad_deepspeed_configs(write, config, fragments):
    assert_one_line_error(run_zerosim("memory", ZERO_PAPER, "--deepspeed", ds(write, config)),
                          *fragments)


def test_deepspeed_file_problems(write):
    assert_one_line_error(run_zerosim("memory", ZERO_PAPER, "--deepspeed", "nope.json"),
                          "DeepSpeed config not found")
    assert_one_line_error(run_zerosim("memory", ZERO_PAPER, "--deepspeed", write("d.json", "[1]")),
                          "expected a JSON object")


def test_a_ds_config_is_a_deepspeed_run_and_names_what_it_does_not_use(write):
    """--deepspeed with ZeRO-3 and accumulation is the run `--set training.framework=deepspeed
    --set training.gradient_accumulation=4` (and the file's other keys) describes, module by
    module; its note names every key it did not use."""
    config = ds(write, {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
                        "bf16": {"enabled": True}, "gradient_clipping": 1.0,
                        "zero_optimization": {"stage": 3, "reduce_bucket_size": 5e8,
                                              "allgather_bucket_size": 5e8,
                                              "sub_group_size": 1e9}})
    by_file = run_zerosim("simulate", SCENARIOS / "llama2_7b_64gpu.toml", "--stage", "3",
                          "--json", "--deepspeed", config)
    sets = ["training.framework=deepspeed", "training.gradient_accumulation=4",
            "training.micro_batch=2", "training.precision=bf16", "training.zero_stage=3",
            "training.reduce_bucket_MiB=953.67431640625",
            "training.allgather_bucket_MiB=953.67431640625", "training.overlap_comm=true"]
    by_sets = run_zerosim("simulate", SCENARIOS / "llama2_7b_64gpu.toml", "--stage", "3",
                          "--json", *[arg for s in sets for arg in ("--set", s)])
    assert by_file.code == by_sets.code == 0, by_file.stderr + by_sets.stderr
    assert by_file.json == by_sets.json
    assert by_file.json[0]["comm_calls_per_rank"]["all_gather"] > 100  # module by module
    note = by_file.stderr.splitlines()[0]
    assert "framework=deepspeed" in note and "gradient_accumulation=4" in note
    assert note.endswith("not used: gradient_clipping, zero_optimization.sub_group_size")
