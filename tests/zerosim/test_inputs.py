"""Bad input: one line on stderr naming the problem, exit code 2, never a traceback."""

import pytest
from tests.conftest import SCENARIOS, ZERO_PAPER, assert_one_line_error, run_zerosim

LLAMA = SCENARIOS / "llama2_7b_64gpu.toml"


def test_missing_file():
    assert_one_line_error(run_zerosim("memory", "no/such/file.toml"), "not found", "no/such/file.toml")


def test_directory_instead_of_file(tmp_path):
    assert_one_line_error(run_zerosim("memory", tmp_path), "directory")


def test_toml_syntax_error(write):
    path = write("bad.toml", "[model]\nparams = \n")
    assert_one_line_error(run_zerosim("memory", path), "TOML syntax error", "line 2")


@pytest.mark.parametrize("text, fragments", [
    ("[model]\nparams = 1e9\n[clustre]\nnodes = 2\n", ["unknown table [clustre]", "[cluster]"]),
    ("[model]\nparams = 1e9\n[cluster]\nbandwith_GBps = 2\n",
     ["cluster.bandwith_GBps", "allowed in [cluster]", "inter_node_bandwidth_GBps"]),
    ("[model]\nhiden = 4096\n", ["model.hiden", "did you mean 'hidden'?"]),
    ("[cluster]\nnodes = 2\n", ["no [model] table"]),
    ("model = 3\n", ["model must be a table"]),
])
def test_unknown_or_misplaced_keys(write, text, fragments):
    assert_one_line_error(run_zerosim("memory", write("s.toml", text)), *fragments)


@pytest.mark.parametrize("override, fragments", [
    ("cluster.nodes='8'", ["cluster.nodes must be an integer", "'8' (a string)"]),
    ("cluster.nodes=eight", ["cluster.nodes must be an integer"]),
    ("cluster.nodes=2.5", ["cluster.nodes must be a whole number", "2.5"]),
    ("training.flash_attention=1", ["training.flash_attention must be true or false"]),
    ("model.name=3", ["model.name must be a string"]),
    ("cluster.hbm_GiB=[80]", ["cluster.hbm_GiB must be a number", "an array"]),
])
def test_wrong_types(override, fragments):
    assert_one_line_error(run_zerosim("memory", LLAMA, "--set", override), *fragments)


@pytest.mark.parametrize("override, fragments", [
    ("cluster.nodes=0", ["cluster.nodes = 0 must be >= 1", "= 0 GPUs"]),
    ("cluster.gpus_per_node=-8", ["cluster.gpus_per_node = -8", "(8) * cluster.gpus_per_node (-8) = -64 GPUs"]),
    ("training.zero_stage=5", ["training.zero_stage = 5", "0 (DDP)"]),
    ("model.heads=30", ["model.heads = 30 does not divide model.hidden = 4096", "4096 / 30 = 136.5"]),
    ("model.kv_heads=5", ["model.kv_heads = 5 does not divide model.heads = 32", "32 / 5 = 6.4"]),
    ("model.hidden=-4096", ["model.hidden = -4096 must be > 0"]),
    ("training.precision=fp8", ["training.precision = 'fp8' is not one of", "'bf16'"]),
    ("cluster.gpu=B300", ["cluster.gpu = 'B300' is not a preset", "A100-80GB"]),
    ("cluster.peak_tflops=nan", ["cluster.peak_tflops = nan must be a finite number"]),
    ("model.layers=1e300", ["model.layers", "at most 2**53"]),
    ("model.params=7e9", ["model.params (a bare parameter count) excludes the shape keys"]),
])
def test_impossible_values_show_the_arithmetic(override, fragments):
    result = run_zerosim("memory", LLAMA, "--set", override)
    assert_one_line_error(result, *fragments)


@pytest.mark.parametrize("override, fragments", [
    ("cluster.nodes", ["expected table.key=value"]),
    ("nodes=8", ["expected table.key=value"]),
    ("cluster.nodes=", ["no value after '='"]),
    ("clustre.nodes=8", ["unknown table 'clustre'"]),
    ("cluster.node=8", ["unknown key cluster.node", "did you mean 'nodes'?"]),
    ("cluster.a.b=1", ["expected table.key=value"]),
])
def test_bad_set(override, fragments):
    assert_one_line_error(run_zerosim("memory", ZERO_PAPER, "--set", override), *fragments)


@pytest.mark.parametrize("argv", [[], ["memory"], ["memory", str(ZERO_PAPER), "--bogus"],
                                  ["nonsense"], ["memory", str(ZERO_PAPER), "--set"]])
def test_bad_command_lines(argv):
    assert_one_line_error(run_zerosim(*argv), "error")


def test_learned_positions_bound_the_sequence():
    result = run_zerosim("memory", SCENARIOS / "megatron_7b5_64gpu.toml", "--set", "training.seq_len=4096")
    assert_one_line_error(result, "training.seq_len = 4096 exceeds model.max_seq_len = 2048",
                          "2048 rows")
    # Rotary positions have no table to outgrow: Llama may train on longer sequences.
    assert run_zerosim("memory", LLAMA, "--set", "training.seq_len=8192").code == 0


def test_shape_missing_keys(write):
    path = write("s.toml", "[model]\nlayers = 2\nhidden = 64\n")
    assert_one_line_error(run_zerosim("memory", path), "missing model.heads, model.vocab")
