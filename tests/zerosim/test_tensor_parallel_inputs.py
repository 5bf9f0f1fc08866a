"""Tensor parallelism's inputs: every refusal of scenario/axes.py through the command line (one
line on stderr, exit 2, naming the key and the arithmetic), what is taken, and the schema
fuzz's reach to [parallelism]'s new keys (tests/zerosim/test_fuzz_schema.py derives its keys
from the tables' dataclasses: these tests fail if it stops seeing them)."""

import pytest

from tests.conftest import ZERO_PAPER, assert_one_line_error, run_zerosim
from tests.zerosim.test_fuzz_schema import KINDS, cases, schema

NEW_KEYS = ("tensor_parallel", "sequence_parallel", "tp_comm_overlap")

# 2 nodes x 8 GPUs; 32 heads, 8 kv heads of 128, SwiGLU 11008, sequence 4096.
BASE = """
[model]
layers = 2
hidden = 4096
heads = 32
kv_heads = 8
ffn = 11008
vocab = 32000
mlp = "swiglu"
norm = "rmsnorm"
bias = false
tied_embeddings = false
position = "rope"
[cluster]
nodes = 2
gpus_per_node = 8
gpu = "A100-80GB"
[training]
zero_stage = 1
precision = "bf16"
micro_batch = 1
seq_len = 4096
"""


def memory(write, *sets: str, text: str = BASE):
    argv = ["memory", write("tp.toml", text), "--json"]
    for assignment in sets:
        argv += ["--set", assignment]
    return run_zerosim(*argv)


@pytest.mark.parametrize("sets, fragments", [
    # t must divide the world: 16 ranks over t = 3.
    (["parallelism.tensor_parallel=3"],
     ["parallelism.tensor_parallel = 3", "world size 16", "2 nodes x 8 GPUs", "16 / 3 = 5.333"]),
    # t must divide the node or be a multiple of it: 24 ranks = 4 nodes x 6, t = 4.
    (["parallelism.tensor_parallel=4", "cluster.gpus_per_node=6", "cluster.nodes=4"],
     ["parallelism.tensor_parallel = 4", "cluster.gpus_per_node = 6", "6 / 4 = 1.5"]),
    # t must divide the heads: 40 heads over 16 (hidden 5120, kv 8 divides 16).
    (["parallelism.tensor_parallel=16", "model.heads=40", "model.hidden=5120"],
     ["parallelism.tensor_parallel = 16", "model.heads = 40", "40 / 16 = 2.5"]),
    # t must divide the MLP's width: 11000 over 16.
    (["parallelism.tensor_parallel=16", "model.ffn=11000"],
     ["parallelism.tensor_parallel = 16", "model.ffn = 11000", "11000 / 16 = 687.5"]),
    # kv and t must divide one another: 12 kv heads (of 48 heads) against t = 8.
    (["parallelism.tensor_parallel=8", "model.heads=48", "model.kv_heads=12", "model.hidden=6144"],
     ["parallelism.tensor_parallel = 8", "model.kv_heads = 12"]),
    # kv < t: t must divide kv x head_dim (1 kv head of 4 columns over 8 ranks).
    (["parallelism.tensor_parallel=8", "model.hidden=64", "model.heads=16", "model.kv_heads=1",
      "model.ffn=256"],
     ["parallelism.tensor_parallel = 8", "1 x 4 = 4", "4 / 8 = 0.5"]),
    # SP splits the sequence t ways: 4100 over 8.
    (["parallelism.tensor_parallel=8", "parallelism.sequence_parallel=true",
      "training.seq_len=4100"],
     ["parallelism.sequence_parallel", "training.seq_len = 4100", "multiple of 8"]),
    # Megatron's overlap needs SP (arguments.py asserts it).
    (["parallelism.tensor_parallel=8", "parallelism.tp_comm_overlap=true"],
     ["parallelism.tp_comm_overlap", "parallelism.sequence_parallel = true"]),
    # Hybrid sharding beside TP is not modelled.
    (["parallelism.tensor_parallel=8", "parallelism.shard_group=2"],
     ["parallelism.tensor_parallel = 8", "parallelism.shard_group = 2", "not modelled"]),
    # ZeRO++ beside TP is not modelled.
    (["parallelism.tensor_parallel=8", "training.zero_stage=3", "parallelism.hpz_partition=8"],
     ["parallelism.tensor_parallel = 8", "hpz", "not modelled"]),
    (["parallelism.tensor_parallel=8", "training.zero_stage=3", "training.quantized_weights=true"],
     ["parallelism.tensor_parallel = 8", "quantized_weights", "not modelled"]),
    # t >= 1.
    (["parallelism.tensor_parallel=0"], ["parallelism.tensor_parallel"]),
])
def test_each_refusal_is_one_line_naming_the_key_and_the_arithmetic(write, sets, fragments):
    assert_one_line_error(memory(write, *sets), *fragments)


def test_a_bare_parameter_count_cannot_be_split_by_shape():
    assert_one_line_error(run_zerosim("memory", ZERO_PAPER, "--set",
                                      "parallelism.tensor_parallel=8"),
                          "parallelism.tensor_parallel = 8", "bare parameter count")


@pytest.mark.parametrize("sets", [
    ["parallelism.tensor_parallel=8"],
    ["parallelism.tensor_parallel=16"],  # across both nodes: a multiple of gpus_per_node
    ["parallelism.tensor_parallel=16", "model.kv_heads=4"],  # kv < t: 4 x 128 / 16 = 32 columns
    ["parallelism.tensor_parallel=8", "parallelism.sequence_parallel=true",
     "parallelism.tp_comm_overlap=true"],
    ["parallelism.sequence_parallel=true"],  # t = 1: SP is off, as Megatron turns it off
])
def test_what_megatron_accepts_is_taken(write, sets):
    result = memory(write, *sets)
    assert result.code == 0, result.stderr
    assert result.json["world_size"] == 16


def test_the_schema_fuzz_feeds_every_kind_to_the_new_keys():
    keys = schema()
    assert {("parallelism", k) for k in NEW_KEYS} <= set(keys)
    fed = {(key, kind) for _, key, kind, _ in cases("parallelism")}
    for key in NEW_KEYS:
        assert {kind for k, kind in fed if k == key} == set(KINDS), key
