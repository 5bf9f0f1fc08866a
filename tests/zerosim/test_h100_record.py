"""The H100 record from the committed microbenchmarks (bench/h100/record.py): its raw rows
against figures read by hand from profiles/h100/*.json, the host-dispatch floor
(zerosim/sim/host_floor.py) against ops counted by hand, and the committed profile."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from zerosim.files import read_json_object
from zerosim.hardware import DEVICES
from zerosim.scenario.load import load_scenario
from zerosim.sim import op_costs as ops

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("h100_record", ROOT / "bench" / "h100" / "record.py")
record = importlib.util.module_from_spec(spec)
spec.loader.exec_module(record)


@pytest.fixture(scope="module")
def rows():
    bench = read_json_object(ROOT / record.MICROBENCH, "microbenchmark")
    offload = read_json_object(ROOT / record.OFFLOAD, "microbenchmark")
    return bench, record.raw_rows(bench, offload)


def _kind(all_rows, kind):
    return [r for r in all_rows if r["kind"] == kind]


def test_gemm_rows_are_the_files_gemms_as_calibrate_writes_them(rows):
    _, all_rows = rows
    gemms = _kind(all_rows, "gemm")
    assert len(gemms) == 149  # 4 models x 4 linears x 3 token counts x 3 passes + 5 squares
    # the file's first row: llama2-7b qkv forward at 2048 tokens, read by hand
    assert gemms[0] == {"processes": 1, "threads": 16, "dtype": "bfloat16", "device": "cuda",
                        "kind": "gemm", "m": 2048, "n": 12288, "k": 4096,
                        "time_s": 0.0002589600086212158,
                        "time_s_max_rank": 0.0002589600086212158, "sm_count": 132}
    assert gemms[-1]["m"] == gemms[-1]["n"] == gemms[-1]["k"] == 16384
    assert gemms[-1]["time_s"] == 0.01288815975189209


def test_launch_and_host_dispatch_are_the_launch_rows(rows):
    bench, all_rows = rows
    (launch,) = _kind(all_rows, "launch")
    assert launch["per_op_s"] == 1.0267497000000958e-05  # add_1elem
    assert launch["autograd_node_s"] == 0.0  # not in the file: a placeholder nothing reads
    assert record.host_dispatch_s(bench) == [1.0267497000000958e-05, 1.5138503999999387e-05]


def test_attention_rows_are_the_default_backend_with_as_many_kv_heads_as_heads(rows):
    _, all_rows = rows
    attention = _kind(all_rows, "attention")
    assert [r["seq"] for r in attention] == [512, 1024, 2048, 4096, 8192]
    first = attention[0]  # s 512, b 32, default (cuDNN), kv_heads 32: fwd and fwd_bwd medians
    assert (first["kernel"], first["batch"], first["heads"], first["kv_heads"],
            first["head_dim"]) == ("flash", 32, 32, 32, 128)
    assert first["forward_s"] == 0.00018982400000095367
    assert first["backward_s"] == 0.0011564000248908996 - 0.00018982400000095367


def test_memory_rows_map_the_ops_that_say_the_same_thing(rows):
    _, all_rows = rows
    by_op = {r["op"]: r for r in _kind(all_rows, "memory_op")}
    assert sorted(by_op) == ["copy", "residual", "swiglu"]
    swiglu = by_op["swiglu"]
    assert (swiglu["tokens"], swiglu["width"]) == (16384, 14336)
    assert swiglu["forward_s"] == 0.0007736800014972687
    assert swiglu["backward_s"] == 0.002158448100090027 - 0.0007736800014972687
    # a residual's backward is one add of the two branch gradients: the forward's kernel
    assert by_op["residual"]["forward_s"] == by_op["residual"]["backward_s"] == \
        0.00015689600259065627
    copy = by_op["copy"]
    assert (copy["tokens"], copy["width"], copy["backward_s"]) == (536870912, 1, None)
    assert copy["forward_s"] == 0.0007136799991130829


def test_host_copies_are_the_offload_files_pinned_and_pageable_rows(rows):
    _, all_rows = rows
    copies = _kind(all_rows, "copy_host")
    pinned = [r for r in copies if r["pinned"]]
    # pinned: 8 MiB, 64 MiB, 256 MiB, 1 GiB and the optional 2 GiB, each way; pageable 2 x 2
    assert len(pinned) == 10 and len(copies) == 14
    assert pinned[0] == {"processes": 1, "threads": 16, "dtype": "bfloat16", "device": "cuda",
                         "kind": "copy_host", "direction": "h2d", "pinned": True,
                         "bytes": 8388608, "time_s": 0.00016492800414562224,
                         "time_s_max_rank": 0.00016492800414562224}


# ---- the host-dispatch floor -----------------------------------------------------------------

@pytest.fixture(scope="module")
def gpt():
    """The runs' GPT (layer norm, GELU, bias, learned positions; dropout as the scenario says)."""
    return load_scenario(ROOT / "scenarios" / "megatron_7b5_64gpu.toml",
                         ["training.precision=bf16", "training.activation_checkpointing=none",
                          "training.flash_attention=true", "model.layers=2",
                          "model.hidden=1024", "model.heads=16", "cluster.gpu=H100-80GB"])


def _costs(host):
    gpu = DEVICES["H100-80GB"]
    model = dataclasses.replace(gpu.op_model, host_dispatch_s=host)
    return ops.OpCosts(dataclasses.replace(gpu, op_model=model), gpu.hbm_GBps)


def test_without_a_host_figure_nothing_changes(gpt):
    m, t = gpt.model, gpt.training
    assert ops.unit_seconds(_costs(None), m, t) == ops.unit_seconds(ops.op_costs(gpt.cluster),
                                                                    m, t)


def test_a_host_bound_unit_takes_its_ops_times_the_dispatch(gpt):
    """One second per op and ten per GEMM dwarf the device: each unit takes k d + G g, with the
    ops counted by hand from the dispatch trace (bench/h100/record.py --count-ops)."""
    forward, backward = ops.unit_seconds(_costs((1.0, 10.0)), gpt.model, gpt.training)
    # layer forward: 4 linears x 3 (t, view, view) + attention 10 + 2 layer norms + 2 residual
    # adds + GELU + 2 dropouts x 4 (empty_like, bernoulli_, div_, mul) = 35 ops, 4 GEMMs
    # backward: 4 x (7 + 3 for the bias) + 10 + 2 x (2 + 1 for the bias) + 2 + 1 + 2 x 1 = 61,
    # 8 GEMMs (dX and dW of each linear)
    assert forward[1:-1] == [35 + 40.0] * 2
    assert backward[1:-1] == [61 + 80.0] * 2
    # embedding: token rows 1 + learned positions 3 forward; 2 + 4 backward
    assert (forward[0], backward[0]) == (4.0, 6.0)
    # head: layer norm 1, the tied linear 3 + a GEMM, cross-entropy 5; backward 3, 7 + 2, 4
    assert (forward[-1], backward[-1]) == (9 + 10.0, 14 + 20.0)


def test_a_device_bound_unit_keeps_its_device_time(gpt):
    """At a picosecond per op the host never binds: max(k d, g) = g."""
    m, t = gpt.model, gpt.training
    assert ops.unit_seconds(_costs((1e-12, 1e-12)), m, t) == ops.unit_seconds(
        _costs(None), m, t)


def test_the_floor_is_the_larger_of_host_and_device_unit_by_unit(gpt):
    """d chosen so that a layer's 35 forward ops take exactly 1 ms: the layer takes
    max(1 ms, its device time) and the device time stands where it is longer."""
    m, t = gpt.model, gpt.training
    device_forward, _ = ops.unit_seconds(_costs(None), m, t)
    forward, _ = ops.unit_seconds(_costs((1e-3 / 35, 0.0)), m, t)
    assert forward[1] == max(1e-3 / 35 * 35, device_forward[1])
    assert forward[0] == max(4 * 1e-3 / 35, device_forward[0])


# ---- the committed profile -------------------------------------------------------------------

def test_the_committed_profile_loads_and_prices_from_its_record():
    from zerosim.scenario.profile import load_profile
    profile = load_profile(ROOT / record.OUT)
    entry = profile.record(1)
    assert entry["device"] == "cuda"
    assert entry["host_dispatch_s"] == [1.0267497000000958e-05, 1.5138503999999387e-05]
    assert "memory_op gelu" in read_json_object(ROOT / record.OUT, "profile")[
        "provenance"]["lacks"]


def test_the_optimizer_is_shard_adams_bytes_at_the_copy_rate():
    """zero_real's ShardAdam under bf16 (zero_real/parts/optim.py), bytes read + written per
    element, kernel by kernel: g = grad.float() 2 + 4, g.div_ 8, m.mul_ 8, m.add_(g) 12,
    v.mul_ 8, v.addcmul_ 16, v.sqrt() 8, / bias2 8, add_(eps) 8, master.addcdiv_ 16,
    param.copy_ 4 + 2: 104 bytes in 11 kernels, at the copy row's 2 GiB / 0.71368 ms."""
    profile = read_json_object(ROOT / record.OUT, "profile")
    (segment,) = profile["fit"]["optimizer"]["1"]["segments"]
    assert segment["s_per_byte"] == pytest.approx(104 * 0.0007136799991130829 / 2147483648,
                                                  rel=1e-12)
    assert segment["alpha_s"] == pytest.approx(11 * 1.0267497000000958e-05, rel=1e-12)
