"""Bad input: one line on stderr naming the problem, exit code 2, never a traceback."""

import json
from pathlib import Path

import pytest
from tests.conftest import SCENARIOS, ZERO_PAPER, assert_one_line_error, run_zerosim, typed_flags

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


# ---- limits: nesting, size, text that is not UTF-8, numbers beyond 2**53 ------------------------

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
DEEP = "[" * 5000 + "]" * 5000  # deep enough to exhaust Python's recursion limit in any parser
DEEP_JSON = '{"a": ' * 5000 + "1" + "}" * 5000


@pytest.mark.parametrize("text", [f"name = {DEEP}", "name." * 5000 + "z = 1",
                                  f"name = {'{a = ' * 3000}1{'}' * 3000}"])
def test_deeply_nested_scenario_file_is_one_line(write, text):
    """Arrays, inline tables, and dotted keys (which nest without recursing while parsed, and
    then break whatever walks them)."""
    path = write("s.toml", f"[model]\nparams = 1e9\n{text}\n")
    assert_one_line_error(run_zerosim("memory", path), str(path), "nested more than 32 levels")


def test_nesting_up_to_the_limit_is_read(write):
    path = write("s.toml", "[model]\nparams = 1e9\nname = " + "[" * 30 + "]" * 30 + "\n")
    assert_one_line_error(run_zerosim("memory", path), "model.name must be a string")


def test_deeply_nested_set_and_vary_values_are_one_line(tmp_path):
    assert_one_line_error(run_zerosim("memory", TINY, "--set", f"model.name={DEEP}"),
                          "--set model.name: nested more than 32 levels")
    out = tmp_path / "o.csv"
    assert_one_line_error(run_zerosim("sweep", TINY, "--vary", f"model.name={DEEP},x", "--out",
                                      out, "--quiet", "--jobs", "1"),
                          "--vary model.name: nested more than 32 levels")  # the flag it came in
    assert not out.exists()


@pytest.mark.parametrize("text, fragment", [
    (DEEP_JSON, "nested more than 32 levels"), ("[" * 5000, "nested more than 32 levels"),
    ('{"x": ' + "1" * 5000 + "}", "invalid JSON: Exceeds the limit (4300 digits)"),
])
@pytest.mark.parametrize("reader", ["hf_config", "deepspeed", "profile"])
def test_deep_or_huge_json_in_companion_files_is_one_line(tmp_path, reader, text, fragment):
    path = tmp_path / "c.json"
    path.write_text(text)
    argv = {"hf_config": ["--set", f'model.hf_config="{path}"'],
            "deepspeed": ["--deepspeed", path],
            "profile": ["--set", f'cluster.profile="{path}"']}[reader]
    assert_one_line_error(run_zerosim("memory", TINY, *argv), str(path), fragment)


def test_a_toml_integer_of_thousands_of_digits_is_one_line(write):
    path = write("s.toml", "[model]\nparams = " + "1" * 5000 + "\n")
    assert_one_line_error(run_zerosim("memory", path), "Exceeds the limit (4300 digits)")


@pytest.mark.parametrize("value", ["1979-05-27", "[07:32:00]", "1979-05-27T07:32:00Z"])
def test_a_toml_date_given_on_the_command_line_is_one_line(tmp_path, value):
    """No key takes one, and a sweep's checks turn values into JSON, which cannot hold one."""
    fragment = "is a TOML date or time, which no key takes"
    assert_one_line_error(run_zerosim("memory", TINY, "--set", f"model.name={value}"), fragment)
    assert_one_line_error(run_zerosim("sweep", TINY, "--vary", f"model.name={value},x", "--out",
                                      tmp_path / "o.json", "--quiet"), fragment)


NOT_UTF8 = "tiny \udcff\udcfe"  # bytes 0xff 0xfe on a command line, as Python hands them over


def test_a_name_that_is_not_utf8_is_refused_at_load():
    assert_one_line_error(run_zerosim("memory", TINY, "--set", f"model.name={NOT_UTF8}"),
                          "model.name = 'tiny \\udcff\\udcfe' is not UTF-8 text")


def test_a_csv_sweep_of_a_name_that_is_not_utf8_is_one_line_and_no_file(tmp_path):
    out = tmp_path / "o.csv"
    result = run_zerosim("sweep", TINY, "--set", f"model.name={NOT_UTF8}", "--vary",
                         "cluster.nodes=1,2", "--out", out, "--quiet", "--jobs", "1")
    assert_one_line_error(result, "is not UTF-8 text")
    assert not out.exists()


BEYOND_2_53 = [
    (["model.hidden=9007199254740992", "model.heads=1"],  # the params = 3.5e34
     ["the parameter count Ψ = embedding", "= 6.49e+32 is beyond what zerosim models"]),
    (["cluster.nodes=9007199254740992"],
     ["the world size = cluster.nodes (9007199254740992) * cluster.gpus_per_node (4)"]),
    (["cluster.hbm_GiB=1e10"], ["GPU memory in bytes = 1e+10 GiB * 2**30"]),
    (["training.reduce_bucket_MiB=1e12"], ["training.reduce_bucket_MiB in bytes"]),
    (["training.micro_batch=1e15"],
     ["tokens per step = micro_batch 1000000000000000 x seq_len 32 x 4 ranks"]),
]


@pytest.mark.parametrize("command, overrides, fragments", [
    (command, overrides, fragments) for overrides, fragments in BEYOND_2_53
    for command in ("memory", "simulate", "plan", "sweep", "collective")
    if command != "collective" or not overrides[0].startswith("model.")])  # a collective: no model
def test_inputs_whose_product_passes_2_53_are_one_line(tmp_path, command, overrides, fragments):
    """Each input is capped at 2**53; so is what they make together, for every command that
    reports it."""
    argv = [command, TINY, *(x for o in overrides for x in ("--set", o))]
    argv += {"collective": ["--op", "all_reduce", "--size-bytes", "1e6"],
             "sweep": ["--vary", "training.zero_stage=0", "--out", tmp_path / "o.json",
                       "--quiet"]}.get(command, [])
    assert_one_line_error(run_zerosim(*argv), *fragments, "2**53")


# Bytes beyond 2**53 from inputs within it: 16 bytes a parameter of 4e15 (6.4e16 bytes), the
# activations of 2**40 sequences a rank (4.3e17 bytes).
BYTES_BEYOND = {"plan": [ZERO_PAPER, "--set", "model.params=4e15", "--json"],
                "simulate": [TINY, "--set", "training.micro_batch=1099511627776", "--json"],
                "sweep": [TINY, "--set", "training.micro_batch=1099511627776", "--vary",
                          "training.zero_stage=0", "--quiet", "--out"]}


def test_memory_refuses_bytes_beyond_2_53():
    assert_one_line_error(run_zerosim("memory", *BYTES_BEYOND["plan"]),
                          "the bytes a rank sends per step = 4,000,000,000,000,000 gathered "
                          "elements x (1 micro-steps x 10 bytes + 2 bytes) = 4.8e+16 is beyond")
    assert_one_line_error(run_zerosim("memory", *BYTES_BEYOND["simulate"]),
                          "stage 0 activations_bytes = 4.346e+17 is beyond")
    assert run_zerosim("memory", ZERO_PAPER, "--set", "model.params=1e14", "--json").code == 0


@pytest.mark.parametrize("command", sorted(BYTES_BEYOND))
def test_every_command_refuses_bytes_beyond_2_53(tmp_path, command):
    """Found by the fuzz: `zerosim plan ZERO_PAPER --set model.params=4e15 --json` printed
    peak_bytes 6.4e16, `zerosim simulate TINY --set training.micro_batch=1099511627776 --json`
    peak_bytes 4.3e17, and a sweep of it wrote them, all with exit 0."""
    argv = [command, *BYTES_BEYOND[command], *([tmp_path / "o.json"] if command == "sweep" else [])]
    assert_one_line_error(run_zerosim(*argv), "is beyond what zerosim models")


def test_a_deepspeed_config_beyond_2_53_is_one_line_without_its_note(tmp_path):
    """Found by the fuzz: a ds_config with train_micro_batch_size_per_gpu = 434273 on Llama-2-7B
    (activations of 6e16 bytes) prints the note of what it took, then the error: two lines."""
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 434273}))
    assert_one_line_error(run_zerosim("memory", LLAMA, "--deepspeed", ds),
                          "is beyond what zerosim models")


def test_collective_on_2_40_nodes_moves_walks_not_steps(monkeypatch):
    """A ring of 2**40 nodes: each walk is one delay and one transfer per link (the engine's
    phase granularity), not 2**40 simpy events, and the time is the closed form: with α = 1 s,
    B = 1 byte/s, g = 4 GPUs a node, m = 2**40 nodes, n = g m, S = n bytes, a hierarchical
    all-reduce is 2 (g-1) (α + S/(g B)) inside the nodes plus 2 (m-1) (α + S/(n B)) between."""
    import simpy

    events = []
    step = simpy.Environment.step

    def counted(env):
        events.append(1)
        assert len(events) < 10_000, "one simpy event per ring step"
        step(env)
    monkeypatch.setattr(simpy.Environment, "step", counted)
    g, m = 4, 2**40
    n = g * m
    result = run_zerosim("collective", TINY, "--op", "all_reduce", "--size-bytes", str(n),
                         "--json", "--set", f"cluster.nodes={m}",
                         *(x for o in ["cluster.intra_node_latency_us=1e6",
                                       "cluster.intra_node_bandwidth_GBps=1e-9",
                                       "cluster.inter_node_latency_us=1e6",
                                       "cluster.inter_node_bandwidth_GBps=1e-9"]
                           for x in ("--set", o)))
    assert result.code == 0, result.stderr
    assert result.json["time_s"] == 2 * (g - 1) * (1 + n / g) + 2 * (m - 1) * (1 + 1)
    assert result.json["ranks"] == n and len(events) < 100


# ---- the calibration profile: its schema, checked once and completely when it is read ----------

PROFILE = Path(__file__).resolve().parents[2] / "profiles" / "cpu_gloo_tiny.json"
SEGMENT = ["fit", "collectives", "native", "all_reduce", "2", "segments"]


def _profile_with(tmp_path, path, value=None, drop=False):
    data = json.loads(PROFILE.read_text())
    node = data
    for key in path[:-1]:
        node = node[key]
    if drop:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    out = tmp_path / "p.json"
    out.write_text(json.dumps(data))
    return out


@pytest.mark.parametrize("path, value, drop, fragment", [
    ([*SEGMENT, 1, "min_bytes"], None, True,
     "fit.collectives.native.all_reduce.2.segments[1]: no 'min_bytes'"),
    ([*SEGMENT, 0, "last_bytes"], "big", False,
     "fit.collectives.native.all_reduce.2.segments[0].last_bytes: must be a finite number, "
     "got 'big'"),
    ([*SEGMENT, 0, "min_bytes"], 1e9, False, "segments[0]: min_bytes 1e+09, last_bytes "),
    ([*SEGMENT, 0, "alpha_s"], 1e300, False, "segments[0].alpha_s: 1e+300 is beyond 2**53"),
    ([*SEGMENT, 0, "points"], 0, False, "segments[0].points: must be a whole number >= 1"),
    ([*SEGMENT, 0, "residuals_pct", 0], None, False, "residuals_pct[0]: must be a finite number"),
    ([*SEGMENT, 0, "alpah_s"], 1.0, False, "unknown key 'alpah_s'"),
    (["fit", "record", "2", "gemm", "tflops"], 0, False, "fit.record.2.gemm.tflops: 0 must be > 0"),
    (["fit", "record", "2", "memory_ops", "layernorm"], {}, False,
     "fit.record.2.memory_ops: key 'layernorm' is not a memory-bound op"),
    (["fit", "record", "2", "launch_s"], None, True, "fit.record.2: no 'launch_s'"),
    (["fit", "memory", "2", "loss_backward", "per", "logit"], "1", False,
     "fit.memory.2.loss_backward.per.logit: must be a finite number"),
    (["fit", "memory", "2", "loss_backward", "fixed_bytes"], -1.0, False,
     "fit.memory.2.loss_backward.fixed_bytes: -1.0 must be >= 0"),
    (["fit", "memory", "2", "norm_savd"], {}, False,
     "fit.memory.2: key 'norm_savd' is not a memory mechanism"),
    (["fit", "step"], {}, False, "fit: unknown key 'step'"),
    (["fit", "compute"], {}, False, "fit: unknown key 'compute'"),
    (["fit", "optimizer", "2", "segments"], [], False, "fit.optimizer.2.segments: must be a "
                                                      "non-empty array"),
    (["fit", "colectives"], {}, False, "fit: unknown key 'colectives'"),
    (["provenance"], [], False, "provenance: must be an object, got an array"),
])
def test_every_field_of_a_profile_is_checked_when_it_is_read(tmp_path, path, value, drop,
                                                             fragment):
    """One line naming the file and the JSON path of the field, whatever the command, before
    anything is simulated."""
    profile = _profile_with(tmp_path, path, value, drop)
    for command in ("memory", "simulate"):
        assert_one_line_error(run_zerosim(command, TINY, "--set", f'cluster.profile="{profile}"'),
                              f"profile {profile}: malformed", fragment)


def test_the_committed_profile_passes_its_schema():
    assert run_zerosim("simulate", TINY, "--set", f'cluster.profile="{PROFILE}"').code == 0


@pytest.mark.parametrize("jitter", ["0", "5"])
@pytest.mark.parametrize("tiny", ["cluster.peak_tflops=1e-307",
                                  "cluster.intra_node_bandwidth_GBps=1e-307"])
def test_a_step_time_that_overflows_is_one_line_with_or_without_jitter(tiny, jitter):
    """Under jitter the lockstep pass computes the times with numpy; an overflow there is the
    same one line as on the event-by-event path, with no numpy warning beside it."""
    shown = run_zerosim("simulate", str(ZERO_PAPER), "--set", tiny, "--set",
                        "cluster.compute_efficiency=1", "--set", "cluster.nodes=1", "--set",
                        f"variation.jitter_pct={jitter}")
    assert_one_line_error(shown, "the step time overflows a float")


def test_zero_size_gather_units_cost_their_latency_alone():
    """Five parameters in eight layers: ZeRO-3 gathers some units of no bytes (a zero-size
    collective divided by its bytes sent before). The step moves the few bytes there are and
    takes latencies alone."""
    shown = run_zerosim("simulate", str(ZERO_PAPER), "--set", "model.params=5", "--set",
                        "model.layers=8", "--set", "cluster.nodes=1", "--stage", "3", "--json")
    assert shown.code == 0, shown.stderr
    (row,) = shown.json
    assert row["comm_bytes_per_rank_total"] < 100 and 0 < row["comm_time_s"] < 0.01


# ---- review I14: one rule for digits in every flag ----------------------------------------------
FOREIGN_DIGITS = ["٣", "３", "²", "1٠"]  # Arabic-Indic 3, fullwidth 3, superscript 2, "10" mixed


@pytest.mark.parametrize("value", FOREIGN_DIGITS)
def test_every_typed_flag_of_zerosim_takes_ascii_digits_only(value):
    """`--jobs ٢` and `--size-bytes ٣` were taken (int() and float() read Unicode digits),
    `--stage ٣` refused: now every flag refuses them, in the same words."""
    from zerosim.cli import build_parser

    found = list(typed_flags(build_parser()))
    assert {("sweep", "--jobs"), ("collective", "--size-bytes"), ("simulate", "--stage"),
            ("plot", "--stage"), ("plan", "--gpu-memory-GiB")} <= {(p[0], f) for p, f in found}
    for path, flag in found:
        assert_one_line_error(run_zerosim(*path, flag, value), f"argument {flag}: {value!r}",
                              "ASCII digits")


@pytest.mark.parametrize("text, value", [
    ("0", 0), ("12", 12), ("007", 7), ("٣", None), ("３", None), ("+3", None), (" 3", None),
    ("3 ", None), ("3_0", None), ("-0", None), ("3.0", None), ("", None), ("1" * 4301, None)])
def test_a_whole_number_is_ascii_digits_and_nothing_else(text, value):
    from zerosim.commandline import whole_number

    assert whole_number(text) == value


# ---- review I6: no reported number passes 2**53 --------------------------------------------------
def test_a_cuda_context_that_takes_device_bytes_past_2_53_is_one_line():
    """2**33 MiB is 2**53 bytes, within its own cap; with the peak beside it, device_bytes was
    9,007,199,258,935,296."""
    for command in ("memory", "simulate"):
        assert_one_line_error(
            run_zerosim(command, TINY, "--set", "cluster.cuda_context_MiB=8589934592"),
            "stage 0 device bytes = peak", "9,007,199,254,740,992 of CUDA context", "2**53")
    shown = run_zerosim("simulate", TINY, "--set", "cluster.cuda_context_MiB=4096", "--json")
    assert shown.code == 0 and all(r["device_bytes"] > 4096 * 2**20 for r in shown.json)


@pytest.mark.parametrize("op, largest", [
    ("all_reduce", 2**52), ("broadcast", 2**52), ("reduce", 2**52),
    ("all_gather", 2**53), ("reduce_scatter", 2**53)])
def test_a_collective_reports_no_bytes_past_2_53(op, largest):
    """`--op all_reduce --size-bytes 9007199254740992` reported bytes_sent_per_rank 1.77e16: a
    ring all-reduce sends 2(n-1)/n of the size per rank (a reduce-scatter, then an all-gather:
    Patarasuk and Yuan 2009), all-gather and reduce-scatter (n-1)/n."""
    argv = ("collective", ZERO_PAPER, "--op", op, "--json", "--size-bytes")
    accepted = run_zerosim(*argv, str(largest))
    assert accepted.code == 0, accepted.stderr
    assert largest / 2 < accepted.json["bytes_sent_per_rank"] <= 2**53
    assert_one_line_error(run_zerosim(*argv, str(largest + 1)), "2**53")
    assert_one_line_error(run_zerosim("collective", ZERO_PAPER, "--op", op, "--sweep",
                                      f"{largest // 4}:{largest * 2}:2"), "2**53")


def test_bytes_sent_per_step_count_every_micro_step(tmp_path):
    """ZeRO-3 gathers every parameter twice and reduces its gradient in every micro-step, so a
    step of 100 micro-steps sends 100 x (2 x 2 + 2) bytes per fp16 element: 6e16 for Ψ = 10^14,
    past 2**53, though one micro-step's 6e14 is not. The cap counts 2 gathers and 3 reductions
    per micro-step (a replica all-reduce included) and one gather after the step."""
    path = tmp_path / "big.toml"
    path.write_text("[model]\nparams = 100000000000000\nlayers = 4\n[cluster]\nnodes = 1\n"
                    "gpus_per_node = 8\n[training]\nprecision = \"fp16\"\nseq_len = 1\n"
                    "gradient_accumulation = 100\n")
    assert_one_line_error(run_zerosim("simulate", path, "--stage", "3", "--json"),
                          "the bytes a rank sends per step", "100 micro-steps x 10 bytes + 2 bytes")
    # within the cap, what simulate reports stays under it: hybrid ZeRO-3, fp32 reduction, 4 steps
    path.write_text(path.read_text().replace("100000000000000", "1000000000").replace(
        "= 100\n", "= 4\nzero_stage = 3\nreduce_dtype = \"fp32\"\n[parallelism]\nshard_group = 4\n"))
    shown = run_zerosim("simulate", path, "--stage", "3", "--json")
    assert shown.code == 0, shown.stderr
    sent = json.loads(shown.stdout)[0]["comm_bytes_per_rank_total"]
    assert 0 < sent <= 10**9 * (4 * (2 * 2 + 3 * 4) + 2)
