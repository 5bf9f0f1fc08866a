"""Property-based junk: whatever a user writes into a scenario, a --set, a Hugging Face config or a
DeepSpeed config, zerosim answers (exit 0, valid JSON) or refuses in one line with exit 2.
The other commands and readers are fuzzed in test_fuzz_commands.py; every test here counts its
inputs towards the fuzz budget (tests/fuzzing.py)."""

import json
from dataclasses import fields

from hypothesis import given, strategies as st

from zerosim.contract import COLLECTIVE_IMPLS
from zerosim.scenario import config
from zerosim.scenario.config import TABLES
from zerosim.scenario.load import allowed_keys
from zerosim.scenario import cluster
from zerosim.hardware import DEVICES

from tests.conftest import ROOT, SCENARIOS, ZERO_PAPER, assert_one_line_error, run_zerosim
from tests.fuzzing import fuzz, generated, numbers_in

LLAMA = SCENARIOS / "llama2_7b_64gpu.toml"
TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
TABLE_KEYS = {t: allowed_keys(t) for t in TABLES}
ALL_KEYS = [f"{t}.{k}" for t, keys in TABLE_KEYS.items() for k in keys]
FUZZ = fuzz(150)

# JSON-able junk: what a hand-edited config file may hold.
JSON_JUNK = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30), st.just(10**400),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
              st.sampled_from(["auto", "cpu", "nvme", "none", "Adam", "llama", "\ud800"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=5)


def within_cap(data) -> bool:
    """Every integer in a JSON document at most 2**53 (exact as a float)."""
    return all(abs(x) <= 2**53 for x in numbers_in(data) if type(x) is int)



def check(result) -> None:
    if result.code == 0:
        data = result.json
        assert len(data["stages"]) == 4
        assert all(s["peak_bytes"] >= 0 for s in data["stages"])
        assert within_cap(data)
    else:
        assert_one_line_error(result)


TOML_JUNK = st.one_of(
    st.integers(-10**20, 10**20).map(str),
    st.integers(2**53 - 2, 2**60).map(str),
    st.integers(1, 6000).map(lambda depth: "[" * depth + "]" * depth),
    st.integers(1, 3000).map(lambda depth: "{a = " * depth + "1" + "}" * depth),
    st.text(st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF), min_size=1, max_size=3),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["true", "false", "nan", "inf", "-inf", "[1, 2]", "{a = 1}", "''", "'x'",
                     "1e400", "0", "-0.0", "1979-05-27", "bf16", "rope", "cpu", "\"\\u0000\"",
                     "'no/such/config.json'", "A100-80GB"]),
    st.text(min_size=1, max_size=12).filter(lambda s: s.strip()),
)


# What a user would write for a key (TOML text): most of it is accepted, so the fuzz reaches the
# engine and the reports, not only the checks.
CHOICES = {"model.mlp": config.MLPS, "model.norm": config.NORMS,
           "model.position": config.POSITIONS, "training.precision": config.PRECISIONS,
           "training.optimizer": config.OPTIMIZERS,
           "training.activation_checkpointing": config.CHECKPOINTING,
           "training.optimizer_offload": config.OFFLOAD,
           "training.gradient_reduction": config.GRADIENT_REDUCTIONS,
           "cluster.gpu": tuple(DEVICES), "cluster.collective_impl": COLLECTIVE_IMPLS,
           "cluster.collective_algorithm": config.ALGORITHMS,
           "cluster.collective_protocol": config.PROTOCOLS,
           "cluster.collective_library": cluster.LIBRARIES,
           "cluster.pcie_gen": cluster.PCIE_GENS, "cluster.host_cpu": cluster.HOST_CPUS,
           "cluster.compute_model": cluster.COMPUTE_MODELS,
           "training.framework": config.FRAMEWORKS, "training.reduce_dtype": config.REDUCE_DTYPES,
           "training.flash_kernel": config.FLASH_KERNELS,
           "training.norm_kernel": config.NORM_KERNELS,
           "cluster.profile": (str(ROOT / "profiles" / "cpu_gloo_tiny.json"), ""),
           "model.hf_config": (str(SCENARIOS / "hf_configs" / "llama-2-7b-hf.json"),)}
PLAUSIBLE = {"bool": st.sampled_from(["true", "false"]),
             "int": st.sampled_from([0, 1, 2, 3, 4, 8, 64, 2048, 2**40]).map(str),
             "float": st.sampled_from(["0.5", "1.0", "2", "25", "80", "1e3", "0.01", "1e9"]),
             "tuple": st.sampled_from(["[]", "[0]", "[1, 3]", "[2]"]),
             "str": st.text("ab z-", max_size=8).map(json.dumps)}


def plausible(key: str):
    """A value of the key's type (one of its allowed words for a string that names a choice)."""
    if key in CHOICES:
        return st.sampled_from(CHOICES[key]).map(json.dumps)
    table, name = key.split(".")
    kind = {f.name: str(f.type).split(" | ")[0] for f in fields(TABLES[table])}[name]
    return PLAUSIBLE["tuple" if kind.startswith("tuple") else kind]


def values(key: str):
    """Junk or a plausible value, half and half."""
    return st.one_of(TOML_JUNK, plausible(key))


@FUZZ
@given(key=st.sampled_from(ALL_KEYS), data=st.data(),
       scenario=st.sampled_from([ZERO_PAPER, LLAMA, SCENARIOS / "tiny_gpt_4rank_cpu.toml"]))
def test_junk_set_values(key, data, scenario):
    generated("test_junk_set_values")
    value = data.draw(values(key))
    check(run_zerosim("memory", scenario, "--json", "--set", f"{key}={value}"))


@FUZZ
@given(entries=st.lists(st.tuples(st.sampled_from(sorted(TABLE_KEYS)), st.text(max_size=10),
                                  st.sampled_from(ALL_KEYS), TOML_JUNK), max_size=6))
def test_junk_inside_well_formed_scenario_files(tmp_path, entries):
    """Valid TOML tables holding known and unknown keys with junk values."""
    generated("test_junk_inside_well_formed_scenario_files")
    tables = {"model": {"params": "7.5e9"}}
    for table, unknown, known, value in entries:
        key = known.split(".")[1] if known.startswith(table + ".") else unknown
        if key and key.isidentifier():
            tables.setdefault(table, {})[key] = value
    text = "\n".join(f"[{t}]\n" + "\n".join(f"{k} = {v}" for k, v in kv.items())
                     for t, kv in tables.items())
    path = tmp_path / "s.toml"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")  # raw non-UTF-8 bytes
    result = run_zerosim("memory", path, "--json")
    assert result.code in (0, 2)
    check(result)


@FUZZ
@given(text=st.text(max_size=200))
def test_junk_scenario_files(tmp_path, text):
    generated("test_junk_scenario_files")
    path = tmp_path / "s.toml"
    path.write_text(text, encoding="utf-8")
    check(run_zerosim("memory", path, "--json"))


HF_BASES = [
    {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
     "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 100,
     "max_position_embeddings": 64, "tie_word_embeddings": False, "hidden_act": "silu",
     "attention_dropout": 0.0, "head_dim": 16, "_name_or_path": "tiny-llama"},
    {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64,
     "vocab_size": 100, "n_inner": None, "resid_pdrop": 0.1},
    {"model_type": "gpt_neox", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
     "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 64,
     "attention_bias": True, "hidden_dropout": 0.0},
]


@FUZZ
@given(base=st.sampled_from(HF_BASES), data=st.data())
def test_junk_inside_hf_configs(tmp_path, base, data):
    generated("test_junk_inside_hf_configs")
    config = dict(base)
    key = data.draw(st.sampled_from(sorted(config) + ["head_dim", "num_key_value_heads"]))
    config[key] = data.draw(JSON_JUNK)
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    scenario = tmp_path / "s.toml"
    scenario.write_text('[model]\nhf_config = "config.json"\n[training]\nseq_len = 32\n')
    check(run_zerosim("memory", scenario, "--json"))


DS_BASE = {"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True}, "fp16": {"enabled": False},
           "optimizer": {"type": "SGD", "params": {"momentum": 0.9}},
           "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"},
                                 "offload_param": {"device": "none"}, "cpu_offload": False,
                                 "reduce_bucket_size": 5e8, "allgather_bucket_size": 5e8}}


def _paths(tree, prefix=()):
    for key, value in tree.items():
        yield prefix + (key,)
        if isinstance(value, dict):
            yield from _paths(value, prefix + (key,))


@FUZZ
@given(path=st.sampled_from(list(_paths(DS_BASE))), junk=JSON_JUNK)
def test_junk_inside_deepspeed_configs(tmp_path, path, junk):
    generated("test_junk_inside_deepspeed_configs")
    config = json.loads(json.dumps(DS_BASE))
    node = config
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = junk
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps(config), encoding="utf-8")
    check(run_zerosim("memory", LLAMA, "--json", "--deepspeed", ds))


def test_model_name_from_a_json_file_that_is_not_utf8_is_refused(tmp_path):
    """A lone surrogate in _name_or_path is valid JSON but not UTF-8: no report or CSV sweep could
    write it, so the scenario is refused when it is read, as a --set name would be."""
    config = dict(HF_BASES[0], _name_or_path="\ud800bad")
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    scenario = tmp_path / "s.toml"
    scenario.write_text('[model]\nhf_config = "config.json"\n[training]\nseq_len = 32\n')
    assert_one_line_error(run_zerosim("memory", scenario), "model.name = '\\ud800bad' is not UTF-8")


def test_nul_byte_in_a_path_is_one_line():
    result = run_zerosim("memory", LLAMA, "--set", 'model.hf_config="a\\u0000b"')
    assert_one_line_error(result, "embedded null byte")


@fuzz(40)
@given(key=st.sampled_from([k for k in ALL_KEYS if not k.startswith("model.")]), value=TOML_JUNK)
def test_junk_set_values_simulate(key, value):
    """The engine takes the same junk: a result with finite times, or one line."""
    generated("test_junk_set_values_simulate")
    result = run_zerosim("simulate", TINY, "--json", "--set", f"{key}={value}")
    if result.code == 0:
        rows = result.json
        assert [r["stage"] for r in rows] == [0, 1, 2, 3]
        assert all(0 <= r["compute_s"] <= r["step_time_s"] < float("inf") for r in rows)
    else:
        assert_one_line_error(result)
