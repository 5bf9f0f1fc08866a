"""`zero-real calibrate`'s op microbenchmarks (zero_real/calibration/ops.py): each kind's rows
hold the schema's keys (issue 31's design, "Raw measurements") with plausible values on this
CPU, their shapes are the tiny scenario's scaled (written out by hand below), the attention core
is Block.attention's own computation, and a calibration at --nproc 2 writes every kind into
measurements["ops"]. No measured time is compared with a figure (a loaded machine would break
it); only orderings that hold by far (8x the FLOPs, 64x the bytes)."""

import json
import os
import shutil
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from tests.conftest import SCENARIOS, run_main  # noqa: E402
from zerosim.scenario.load import load_scenario  # noqa: E402

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
COMMON = ("processes", "threads", "dtype", "device", "kind")
KEYS = {  # the design's row keys per kind (issue 31, "Raw measurements")
    "gemm": ("m", "n", "k", "time_s"),
    "linear": ("tokens", "n_in", "n_out", "bias", "forward_s", "backward_s"),
    "launch": ("per_op_s", "autograd_node_s"),
    "attention": ("kernel", "batch", "heads", "kv_heads", "seq", "head_dim", "forward_s",
                  "backward_s"),
    "memory_op": ("op", "tokens", "width", "forward_s", "backward_s"),
}
MEMORY_OPS = {"norm", "residual", "gelu", "swiglu", "rotary", "dropout", "embedding",
              "cross_entropy", "copy"}
# The tiny scenario: micro-batch 2 x sequence 32 = 64 tokens, hidden 64 (4 heads of 16),
# ffn 256, vocab 256; qkv 64 -> 192. Token and width scales 0.5 .. 4 of those.
TOKENS, HIDDEN, FFN, VOCAB = 64, 64, 256, 256


def tiny(*overrides: str):
    return load_scenario(str(TINY), list(overrides))


def bench_of(scenario, processes: int = 2):
    from zero_real.calibration.ops import OpBench
    from zero_real.run.progress import Progress
    from zero_real.stages import DTYPES

    return OpBench(processes, torch.device("cpu"), DTYPES[scenario.training.precision],
                   Progress(None, 0))


@pytest.fixture(scope="module")
def rows(world_of_one):
    from zero_real.calibration.ops import measure_ops
    from zero_real.run.progress import Progress

    scenario = tiny()
    by_kind: dict = {}
    for row in measure_ops(2, SimpleNamespace(scenario=scenario), torch.device("cpu"),
                           Progress(None, 0)):
        by_kind.setdefault(row["kind"], []).append(row)
    return by_kind


def test_every_row_has_its_kinds_keys(rows):
    assert set(rows) == set(KEYS)  # copy_host: CUDA only
    for kind, kind_rows in rows.items():
        for row in kind_rows:
            assert set(COMMON + KEYS[kind]) <= set(row), (kind, row)
            assert (row["processes"], row["dtype"], row["device"]) == (2, "float32", "cpu")
            assert row["threads"] == torch.get_num_threads()
            times = [row[k] for k in KEYS[kind] if k.endswith("_s") and row[k] is not None]
            assert times and all(0 < t < 1 for t in times), row


def test_gemm_grid_covers_the_scenarios_shapes_and_beyond(rows):
    shapes = {(r["m"], r["n"], r["k"]) for r in rows["gemm"]}
    qkv = 3 * HIDDEN
    assert {(TOKENS, qkv, HIDDEN), (TOKENS, HIDDEN, qkv), (qkv, HIDDEN, TOKENS)} <= shapes
    assert {(TOKENS, FFN, HIDDEN), (TOKENS, HIDDEN, FFN), (FFN, HIDDEN, TOKENS)} <= shapes
    assert (TOKENS, VOCAB, HIDDEN) in shapes  # the head's forward (tied: hidden -> vocab)
    assert (32, 96, 32) in shapes  # tokens and hidden x0.5: qkv 32 -> 96 on 32 tokens
    assert (2 * TOKENS, 2 * HIDDEN, 2 * FFN) in shapes  # x2 both: the MLP down's forward
    assert (4 * TOKENS, HIDDEN, HIDDEN) in shapes  # tokens x4: the output projection
    assert {(d, d, d) for d in (16, 32, 64, 128, 256, 512, 1024)} <= shapes
    assert len(shapes) == len(rows["gemm"])


def test_a_gemm_of_8x_the_flops_takes_longer(rows):
    time_s = {(r["m"], r["n"], r["k"]): r["time_s"] for r in rows["gemm"]}
    for d in (128, 256, 512):
        assert time_s[2 * d, 2 * d, 2 * d] > time_s[d, d, d], d


def test_linears_are_the_blocks_at_three_scales(rows):
    got = [(r["tokens"], r["n_in"], r["n_out"]) for r in rows["linear"]]
    layers = lambda t, h, f: [(t, h, 3 * h), (t, h, h), (t, h, f), (t, f, h)]  # noqa: E731
    assert got == [*layers(32, 32, 128), *layers(64, 64, 256), *layers(128, 128, 512)]
    for r in rows["linear"]:
        assert r["bias"] is True  # the tiny model's linears carry biases
        assert r["backward_s"] > r["forward_s"]  # two GEMMs (dX, dW) against one


def test_launch_per_op_and_per_autograd_node(rows):
    (row,) = rows["launch"]
    assert 0 < row["per_op_s"] < 1e-3 and 0 < row["autograd_node_s"] < 1e-3
    # the chain's nodes past the first: the chain's backward less one addition's, per node
    node_s = max(0.0, row["chain_backward_s"] - row["single_backward_s"]) / (row["chain_ops"] - 1)
    assert row["autograd_node_s"] == node_s
    assert row["backward_call_s"] == max(0.0, row["single_backward_s"] - node_s)


def test_memory_ops_each_at_six_sizes_of_its_own_width(rows):
    by_op: dict = {}
    for r in rows["memory_op"]:
        by_op.setdefault(r["op"], []).append((r["tokens"], r["width"]))
    assert set(by_op) == MEMORY_OPS
    sizes = lambda width: [(32, width // 2), (64, width), (128, 2 * width),  # noqa: E731
                           (256, 2 * width), (256, 4 * width), (512, 8 * width)]
    for op in ("norm", "residual", "dropout", "embedding", "copy", "rotary"):
        assert by_op[op] == sizes(HIDDEN), op  # rotary: 4 heads x head_dim 16 = 64
    assert by_op["gelu"] == by_op["swiglu"] == sizes(FFN)
    assert by_op["cross_entropy"] == sizes(VOCAB)
    for r in rows["memory_op"]:
        assert (r["backward_s"] is None) == (r["op"] == "copy"), r
        if r["op"] == "cross_entropy":
            assert r["vocab"] == r["width"]
        if r["op"] == "rotary":
            assert r["head_dim"] * 4 == r["width"]
    copies = [r["forward_s"] for r in rows["memory_op"] if r["op"] == "copy"]
    assert copies[-1] > copies[0]  # 1024x the bytes


@pytest.mark.parametrize("flash", [False, True])
def test_attention_rows_follow_the_scenarios_kernel(world_of_one, flash):
    from zero_real.calibration.ops import attention

    scenario = tiny(f"training.flash_attention={str(flash).lower()}")
    got = attention(bench_of(scenario), scenario)
    seqs = [16, 32, 64, 128, 256]  # 16..256 on a CPU, the scenario's 32 and 64 among them
    assert [(r["head_dim"], r["seq"]) for r in got] == [(d, s) for d in (16, 32) for s in seqs]
    assert {r["kernel"] for r in got} == {"flash" if flash else "math"}
    assert {(r["batch"], r["heads"], r["kv_heads"]) for r in got} == {(2, 4, 4)}


@pytest.mark.parametrize("overrides", [(), ("model.position=rope", "model.kv_heads=2")])
def test_the_attention_core_is_block_attention_between_its_linears(overrides):
    """The core ops.py times, put between the block's own qkv and output projections, gives
    Block.attention's output bit for bit (grouped-query attention included), without rope,
    which rotary's own rows time (review R1: timed in both, a rope model paid it twice): with
    rope it differs from the block's, and equals the block's with its rope off."""
    from zero_real.calibration.ops import attention_core
    from zero_real.parts.model import build_model, materialize

    m = tiny(*overrides).model
    block = materialize(build_model(m), seed=0).blocks[0]
    x = torch.randn(2, 32, m.hidden)
    with torch.no_grad():
        whole = block.attention(x)
        block.rope = False
        without_rope = block.attention(x)
        got = block.proj(attention_core(m, False, 2, 32)(block.qkv(x)))
    assert torch.equal(got, without_rope)
    assert torch.equal(got, whole) == (m.position != "rope")


def test_rows_name_the_scenarios_dtype(world_of_one):
    from zero_real.calibration.ops import launch

    (row,) = launch(bench_of(tiny("training.precision=bf16")), tiny())
    assert row["dtype"] == "bfloat16"


def test_the_slowest_rank_is_kept_beside_rank_0():
    from zero_real.calibration.calibrate import _with_max_rank

    zero = {"kind": "memory_op", "forward_s": 1.0, "backward_s": None, "tokens": 64}
    other = {"kind": "memory_op", "forward_s": 3.0, "backward_s": None, "tokens": 64}
    assert _with_max_rank(zero, [zero, other]) == {
        **zero, "forward_s_max_rank": 3.0, "backward_s_max_rank": None}


def test_a_calibration_writes_every_kind(tmp_path, monkeypatch):
    """--nproc 2 on the tiny scenario, as short as its flags allow; zerosim's fit replaced by
    the raw measurements (this tests what zero_real measures, not the fit)."""
    from zero_real import cli
    from zero_real.calibration import calibrate
    from zero_real.run import progress

    shutil.copy(TINY, tmp_path / "tiny.toml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    monkeypatch.setattr(calibrate, "fit", lambda scenario, raw, out: raw)
    result = run_main(cli.main, "calibrate", "tiny.toml", "--nproc", 2, "--collectives",
                      "native", "--min-size-KiB", 256, "--max-size-MiB", 1, "--micro-batches",
                      1, "--seconds-per-size", 0.02, "--timeout-s", 30, "--run-timeout-s", 180,
                      "--out", "two.json")
    assert result.code == 0, result.stderr
    ops = json.loads((tmp_path / "two.json").read_text())["measurements"]["ops"]
    assert {r["kind"] for r in ops} == set(KEYS)
    # a world per size, 1 and 2; its ranks share the box's cores (train.share_cores)
    assert {(r["processes"], r["threads"]) for r in ops} == {
        (n, max(1, os.cpu_count() // n)) for n in (1, 2)}
    for r in ops:
        for key in KEYS[r["kind"]]:
            if key.endswith("_s") and r[key] is not None:
                assert r[f"{key}_max_rank"] >= r[key] > 0, (key, r)
    done = [line for line in result.stderr.splitlines() if " in " in line and "/" in line]
    for n in (1, 2):  # each kind's section shows its count and what it took
        for kind in KEYS:
            assert any(line.startswith(f"calibrate n={n}: {kind} ") for line in done), (n, kind)
    assert f"{len(ops)} ops" in result.stdout
