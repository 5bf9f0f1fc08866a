"""Property-based junk: whatever a user writes into a scenario, a --set, a Hugging Face config or a
DeepSpeed config, zerosim answers (exit 0, valid JSON) or refuses in one line with exit 2."""

import json
import subprocess
import sys

from hypothesis import HealthCheck, given, settings, strategies as st

from zerosim.scenario.config import TABLES
from zerosim.scenario.load import allowed_keys

from tests.conftest import ROOT, SCENARIOS, ZERO_PAPER, assert_one_line_error, run_zerosim

LLAMA = SCENARIOS / "llama2_7b_64gpu.toml"
TABLE_KEYS = {t: allowed_keys(t) for t in TABLES}
ALL_KEYS = [f"{t}.{k}" for t, keys in TABLE_KEYS.items() for k in keys]
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.function_scoped_fixture])

# JSON-able junk: what a hand-edited config file may hold.
JSON_JUNK = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30), st.just(10**400),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
              st.sampled_from(["auto", "cpu", "nvme", "none", "Adam", "llama", "\ud800"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=5)


def check(result) -> None:
    if result.code == 0:
        data = result.json
        assert len(data["stages"]) == 4
        assert all(s["peak_bytes"] >= 0 for s in data["stages"])
    else:
        assert_one_line_error(result)


TOML_JUNK = st.one_of(
    st.integers(-10**20, 10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["true", "false", "nan", "inf", "-inf", "[1, 2]", "{a = 1}", "''", "'x'",
                     "1e400", "0", "-0.0", "1979-05-27", "bf16", "rope", "cpu", "\"\\u0000\"",
                     "'no/such/config.json'", "A100-80GB"]),
    st.text(min_size=1, max_size=12).filter(lambda s: s.strip()),
)


@FUZZ
@given(key=st.sampled_from(ALL_KEYS), value=TOML_JUNK,
       scenario=st.sampled_from([ZERO_PAPER, LLAMA, SCENARIOS / "tiny_gpt_4rank_cpu.toml"]))
def test_junk_set_values(key, value, scenario):
    check(run_zerosim("memory", scenario, "--json", "--set", f"{key}={value}"))


@FUZZ
@given(entries=st.lists(st.tuples(st.sampled_from(sorted(TABLE_KEYS)), st.text(max_size=10),
                                  st.sampled_from(ALL_KEYS), TOML_JUNK), max_size=6))
def test_junk_inside_well_formed_scenario_files(tmp_path, entries):
    """Valid TOML tables holding known and unknown keys with junk values."""
    tables = {"model": {"params": "7.5e9"}}
    for table, unknown, known, value in entries:
        key = known.split(".")[1] if known.startswith(table + ".") else unknown
        if key and key.isidentifier():
            tables.setdefault(table, {})[key] = value
    text = "\n".join(f"[{t}]\n" + "\n".join(f"{k} = {v}" for k, v in kv.items())
                     for t, kv in tables.items())
    path = tmp_path / "s.toml"
    path.write_text(text, encoding="utf-8")
    result = run_zerosim("memory", path, "--json")
    assert result.code in (0, 2)
    check(result)


@FUZZ
@given(text=st.text(max_size=200))
def test_junk_scenario_files(tmp_path, text):
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
    config = json.loads(json.dumps(DS_BASE))
    node = config
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = junk
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps(config), encoding="utf-8")
    check(run_zerosim("memory", LLAMA, "--json", "--deepspeed", ds))


def test_unprintable_model_name_from_a_json_file_is_escaped_not_a_crash(tmp_path):
    """A lone surrogate in _name_or_path is valid JSON but not UTF-8: a real process must still
    print its table (an in-process run cannot see stdout's encoding)."""
    config = dict(HF_BASES[0], _name_or_path="\ud800bad")
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    scenario = tmp_path / "s.toml"
    scenario.write_text('[model]\nhf_config = "config.json"\n[training]\nseq_len = 32\n')
    result = subprocess.run([sys.executable, "-m", "zerosim", "memory", str(scenario)],
                            capture_output=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(b"\\ud800bad")


def test_nul_byte_in_a_path_is_one_line():
    result = run_zerosim("memory", LLAMA, "--set", 'model.hf_config="a\\u0000b"')
    assert_one_line_error(result, "embedded null byte")


@settings(max_examples=40, deadline=None)
@given(key=st.sampled_from([k for k in ALL_KEYS if not k.startswith("model.")]), value=TOML_JUNK)
def test_junk_set_values_simulate(key, value):
    """The engine takes the same junk: a result with finite times, or one line."""
    result = run_zerosim("simulate", SCENARIOS / "tiny_gpt_4rank_cpu.toml", "--json", "--set",
                         f"{key}={value}")
    if result.code == 0:
        rows = result.json
        assert [r["stage"] for r in rows] == [0, 1, 2, 3]
        assert all(0 <= r["compute_s"] <= r["step_time_s"] < float("inf") for r in rows)
    else:
        assert_one_line_error(result)
