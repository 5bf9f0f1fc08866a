"""`zerosim keys`: every key the scenario tables accept, no more and no fewer, each documented,
with the dataclass's own default and the unit its name carries; the table fits 100 columns."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.conftest import assert_one_line_error, run_zerosim
from zerosim.scenario.cluster import ClusterConfig
from zerosim.scenario.config import TrainingConfig
from zerosim.scenario.load import allowed_keys
from zerosim.scenario.model_table import ModelConfig
from zerosim.scenario.parallelism_table import ParallelismConfig
from zerosim.scenario.variation import VariationConfig

CLASSES = {"model": ModelConfig, "cluster": ClusterConfig, "training": TrainingConfig,
           "parallelism": ParallelismConfig, "variation": VariationConfig}
"""Written out here rather than read from config.TABLES, so that a table the command leaves out
fails below."""


def _listed() -> list[dict]:
    shown = run_zerosim("keys", "--json")
    assert shown.code == 0, shown.stderr
    return shown.json


def _default(f: dataclasses.Field):
    value = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
    return json.loads(json.dumps(value))  # as JSON writes it: a tuple is a list


def test_the_keys_are_the_dataclasses_fields_exactly():
    listed = _listed()
    assert set(listed[0]) == {"table", "key", "type", "default", "unit", "doc", "filled_by_gpu"}
    assert list(dict.fromkeys(row["table"] for row in listed)) == list(CLASSES)
    for table, cls in CLASSES.items():
        keys = [row["key"] for row in listed if row["table"] == table]
        assert keys == [f.name for f in dataclasses.fields(cls)], table
        assert keys == allowed_keys(table), table
    assert len(listed) == sum(len(dataclasses.fields(cls)) for cls in CLASSES.values())


@pytest.mark.parametrize("table", list(CLASSES))
def test_one_table_lists_its_keys_and_no_other(table):
    shown = run_zerosim("keys", "--table", table, "--json")
    assert shown.code == 0, shown.stderr
    assert [(row["table"], row["key"]) for row in shown.json] == [
        (table, f.name) for f in dataclasses.fields(CLASSES[table])]
    text = run_zerosim("keys", "--table", table).stdout
    others = [name for name in CLASSES if name != table]
    assert not any(line.startswith(f"  {name}.") for line in text.splitlines()
                   for name in others)
    assert all(f"  {table}.{f.name} " in text for f in dataclasses.fields(CLASSES[table]))


def test_every_key_has_a_line_of_documentation():
    """A field without an attribute docstring (the string right after it in the class body) is
    a key nobody has explained: add one on its dataclass."""
    undocumented = [f"{row['table']}.{row['key']}" for row in _listed() if not row["doc"].strip()]
    assert undocumented == []
    assert all("\n" not in row["doc"] for row in _listed())


def test_the_defaults_are_the_dataclasses_defaults():
    listed = {(row["table"], row["key"]): row for row in _listed()}
    for table, cls in CLASSES.items():
        for f in dataclasses.fields(cls):
            assert listed[table, f.name]["default"] == _default(f), (table, f.name)
    assert listed["variation", "slow_ranks"]["default"] == []  # a factory's or a tuple's value
    assert listed["training", "seq_len"]["default"] is None


def test_types_say_optional_where_the_field_may_be_none():
    listed = {(row["table"], row["key"]): row["type"] for row in _listed()}
    assert listed["training", "zero_stage"] == "int"
    assert listed["training", "seq_len"] == "optional int"
    assert listed["cluster", "intra_node_latency_us"] == "optional float"
    assert listed["model", "fused_qkv"] == "optional bool"
    assert listed["cluster", "profile"] == "optional str"
    assert listed["parallelism", "pipeline_layers"] == "array"
    assert listed["training", "flash_attention"] == "bool"


def test_units_come_from_the_names_and_are_never_made_up():
    units = {(row["table"], row["key"]): row["unit"] for row in _listed()}
    assert units["training", "reduce_bucket_MiB"] == "MiB"
    assert units["cluster", "hbm_GiB"] == "GiB"
    assert units["cluster", "inter_node_bandwidth_GBps"] == "GB/s"
    assert units["cluster", "intra_node_latency_us"] == "us"
    assert units["cluster", "power_limit_W"] == "W"
    assert units["variation", "jitter_pct"] == "%"
    assert units["training", "prefetch_bucket_elements"] == "elements"
    assert units["cluster", "cpu_adam_Melements_per_s_per_core"] == "Melements/s/core"
    assert units["training", "seq_len"] == "tokens"  # "Tokens per sequence, s."
    for key in (("training", "zero_stage"), ("training", "gradient_accumulation"),
                ("variation", "seed"), ("variation", "slowdown"), ("model", "name")):
        assert units[key] is None, key


def test_an_unset_key_says_what_it_means_where_its_docstring_does():
    text = run_zerosim("keys", "--table", "training").stdout
    line = next(line for line in text.splitlines() if line.startswith("  training.seq_len "))
    assert line.split()[-1] == "model.max_seq_len"  # "Default: model.max_seq_len."
    cluster = run_zerosim("keys", "--table", "cluster").stdout
    line = next(line for line in cluster.splitlines()
                if line.startswith("  cluster.compute_efficiency "))
    assert line.split()[-1] == "0.5"  # "(unset: DEFAULT_COMPUTE_EFFICIENCY)", its value
    line = next(line for line in cluster.splitlines() if line.startswith("  cluster.profile "))
    assert line.split()[-1] == "none"  # nothing computed in its place


def test_the_text_fits_100_columns_and_names_every_key():
    shown = run_zerosim("keys")
    assert shown.code == 0 and shown.stderr == ""
    long = [line for line in shown.stdout.splitlines() if len(line) > 100]
    assert long == []
    for table, cls in CLASSES.items():
        assert f"[{table}]" in shown.stdout
        for f in dataclasses.fields(cls):
            assert f"  {table}.{f.name} " in shown.stdout


def test_an_unknown_table_is_one_line_naming_the_tables():
    assert_one_line_error(run_zerosim("keys", "--table", "trainig"), "'trainig'",
                          "model, cluster, training, parallelism, variation")
    assert_one_line_error(run_zerosim("keys", "--table", "trainig", "--json"), "'trainig'")


@dataclasses.dataclass
class _Documented:
    first: int = 1
    second: int = 2
    """The second, e.g. 2. More."""
    third: str = "x"
    """(Ren et al. 2021 §5.2): cited. Next sentence."""


def test_the_docstring_reader_takes_only_a_fields_own_string():
    from zerosim.scenario.keys import field_docstrings, first_sentence, unset_meaning

    docs = field_docstrings(_Documented)
    assert set(docs) == {"second", "third"}  # `first` has none: never its neighbour's
    assert first_sentence(docs["second"]) == "The second, e.g. 2."
    assert first_sentence(docs["third"]) == "(Ren et al. 2021 §5.2): cited."
    assert unset_meaning("Latency; unset: NCCL's table, as above.") == "NCCL's table, as above"
    assert unset_meaning("None: the default (1e9). More.") == "the default (1e9)"
    assert unset_meaning("Blocks (default 1: all at once).") == "1: all at once"
    assert unset_meaning("Seed of the jitter.") is None


def test_the_cluster_figures_a_gpu_fills_say_whose_they_are(zerosim):
    """hbm_GiB's default is the default GPU's 80 GiB, not a figure for any GPU: `keys` says so,
    for exactly the keys another GPU's preset would change (an H100's, by hand: its memory, peak,
    HBM bandwidth and NVLink differ from an A100's; nodes and the GPU's name are no preset's)."""
    from zerosim.scenario.cluster import ClusterConfig
    from zerosim.scenario.presets import GPU_PRESETS

    listed = {row["key"]: row for row in _listed() if row["table"] == "cluster"}
    filled = {key for key, row in listed.items() if row["filled_by_gpu"]}
    assert {"hbm_GiB", "peak_tflops", "hbm_bandwidth_GBps", "intra_node_bandwidth_GBps"} <= filled
    assert not {"nodes", "gpu", "nics_per_node"} & filled
    default_gpu = ClusterConfig().gpu
    assert filled == {k for k, v in GPU_PRESETS[default_gpu].items() if v is not None}
    assert not {"intra_node_latency_us", "inter_node_latency_us"} & filled  # NCCL's, not a GPU's
    text = " ".join(zerosim("keys", "--table", "cluster").stdout.split())  # as unwrapped
    assert f'80.0 ({default_gpu} preset)' in text
    assert not any(row["filled_by_gpu"] for row in _listed() if row["table"] != "cluster")
