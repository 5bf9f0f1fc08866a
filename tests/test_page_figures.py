"""The figures the pages state in their prose, beside the samples test_readme.py checks byte for
byte: each worked out here from its own formula (the ZeRO paper's), from a checked sample, from
a committed measurement, or from what a committed script computes, and looked for in the text.
A figure that goes stale fails here; so does a sentence reworded past recognition (then reword
the phrase below with it)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from zerosim.calibration.references import read_reference, references_report
from zerosim.scenario.load import load_scenario

from tests.conftest import ROOT, ZERO_PAPER, run_zerosim
from tests.test_readme import PAGES, SAMPLES
from tests.zerosim.test_references import ISSUE_32

PSI = 7.5e9  # the ZeRO paper's 7.5B model (scenarios/zero_paper_7b5_64gpu.toml, a bare Ψ)
N = 64  # its GPUs (ibid.)


def prose(page: str) -> str:
    """The page without its fenced blocks, every run of white space one space (lines wrap
    anywhere)."""
    return " ".join(re.sub(r"^```.*?^```", "", PAGES[page], flags=re.S | re.M).split())


def sample(page: str, argv_start: str) -> str:
    """The one sample of `page` whose command starts with argv_start (checked by test_readme)."""
    texts = [text for where, argv, text in SAMPLES if where == page and argv.startswith(argv_start)]
    assert len(texts) == 1, (page, argv_start)
    return texts[0]


def test_readme_comm_volumes_are_the_papers_section_7():
    """Ring all-reduce, or reduce-scatter + all-gather: each GPU sends 2 (N-1)/N x 2Ψ bytes
    (ZeRO paper §7); ZeRO-3 gathers the parameters again for backward: 3 (N-1)/N x 2Ψ."""
    text = prose("README.md")
    assert f"2 x ({N - 1}/{N}) x 2Ψ bytes per step" in text and "1.5 times that" in text
    once = 2 * (N - 1) / N * 2 * PSI / 1e9
    rows = [line.split() for line in sample("README.md", "simulate").splitlines()
            if re.match(r"\d [A-Z]", line)]
    comm_GB = {row[1].rstrip("*"): row[5] for row in rows}  # stage, name, step, compute, exposed
    assert comm_GB == {"DDP": f"{once:.2f}", "ZeRO-1": f"{once:.2f}", "ZeRO-2": f"{once:.2f}",
                       "ZeRO-3": f"{1.5 * once:.2f}"}
    assert comm_GB["DDP"] == "29.53" and comm_GB["ZeRO-3"] == "44.30"  # the arithmetic, by hand


def test_readme_quotes_table_1():
    """ZeRO paper Table 1, K = 12, N_d = 64: 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N bytes."""
    states_GB = [16 * PSI, 4 * PSI + 12 * PSI / N, 2 * PSI + 14 * PSI / N, 16 * PSI / N]
    quoted = ", ".join(f"{b / 1e9:.3g}" for b in states_GB)
    assert quoted == "120, 31.4, 16.6, 1.88"  # the paper's own row for 7.5B at N_d = 64
    text = prose("README.md")
    assert f"Table 1 ({quoted} GB of model states)" in text
    listed = f"16Ψ, 4Ψ + 12Ψ/{N}, 2Ψ + 14Ψ/{N} and 16Ψ/{N} bytes (Table 1: {quoted} GB)"
    assert listed in text and listed in prose("docs/scenarios.md")


def test_readme_names_the_collective_samples_fabric():
    """DGX A100: 8 HDR InfiniBand NICs of 200 Gb/s (NVIDIA's DGX A100 user guide), one per GPU;
    zerosim's inter-node figure is each GPU's share of them, in GB/s."""
    cluster = load_scenario(ROOT / "scenarios/llama2_7b_64gpu.toml").cluster
    nic_Gbps = cluster.inter_node_bandwidth_GBps * cluster.gpus_per_node / cluster.nics * 8
    assert (cluster.gpu, cluster.nics, nic_Gbps) == ("A100-80GB", 8, 200)
    phrase = f"{cluster.nodes} DGX A100 nodes ({cluster.nics} x {nic_Gbps:g} Gb/s HDR NICs each)"
    for page in ("README.md", "docs/collectives.md"):
        assert phrase in prose(page), page


@pytest.fixture(scope="module")
def nccl_tests():
    """What bench/collectives_vs_published.py --json prints (a fraction of a second)."""
    done = subprocess.run([sys.executable, str(ROOT / "bench/collectives_vs_published.py"),
                           "--json"], capture_output=True, text=True, check=True, timeout=300)
    return json.loads(done.stdout)


def test_the_nccl_tests_comparison_is_what_the_bench_prints(nccl_tests):
    rows, summary = nccl_tests["rows"], nccl_tests["summary"]["all"]
    n, sources = len(rows), len({row["source"] for row in rows})
    assert summary["simulated"] == n
    mean, within = f"{summary['mean_abs_error_pct']:.1f}", summary["within_10pct"]
    assert (f"Against {n} published nccl-tests all_reduce results at >= 64 MiB from {sources} "
            f"sources, never fitted: mean |error| {mean}%; {within} of {n} within 10%."
            in prose("README.md"))
    assert (f"prints {n} all_reduce results at >= 64 MiB from {sources} sources"
            in prose("docs/collectives.md"))
    assert f"Mean |error| {mean}%; {within} of {n} within 10%." in prose("docs/collectives.md")


def mean_abs(errors: list[float]) -> str:
    return f"{sum(abs(e) for e in errors) / len(errors):.1f}"


@pytest.fixture(scope="module")
def references():
    """(report, {name: axis}) for references/ as `zerosim validate --references` reads it; axis is
    "pp", "tp", "issue 32" or "dp" (the data-parallel runs checked before issue 32)."""
    folder = ROOT / "references"
    axes = {}
    for path in folder.glob("*.toml"):
        parallelism = read_reference(path).scenario.get("parallelism", {})
        axes[path.stem] = ("pp" if parallelism.get("pipeline_parallel", 1) > 1 else
                           "tp" if parallelism.get("tensor_parallel", 1) > 1 else
                           "issue 32" if path.stem in ISSUE_32 else "dp")
    return references_report(folder, {}), axes


def test_readme_states_the_published_runs_as_validate_reports_them(references):
    report, axes = references
    rows = report["rows"]
    throughput = [row for row in rows if row["category"] == "throughput"]
    memory = [row["error_pct"] for row in rows if row["category"] == "memory"]

    def over(axis: str) -> str:
        errors = [row["error_pct"] for row in throughput if axes[row["reference"]] == axis]
        return f"{mean_abs(errors)}% over the {len(errors)}"

    worst = max((row["error_pct"] for row in throughput), key=abs)
    beyond = sum(abs(row["error_pct"]) > 25 for row in rows)  # issue 16's bar for each run
    text = prose("README.md")
    assert f"`references/` holds ({len(axes)}:" in text
    assert f"| {len(axes)} published training runs as a test set;" in text
    assert f"lists the {len(report['not_expressible'])} that zerosim cannot express" in text
    assert (f"Throughput: mean |error| {mean_abs([r['error_pct'] for r in throughput])}% over "
            f"{len(throughput)} runs, worst {worst:+.1f}% ({over('dp')} data-parallel runs "
            f"checked before issue 32; {over('tp')} with tensor parallelism and {over('pp')} "
            f"with pipeline parallelism" in text)
    assert f"{over('issue 32')} runs of issue 32" in text
    assert f"memory: mean |error| {mean_abs(memory)}% over {len(memory)}." in text
    assert f"as today: {beyond} rows are not." in text
    counted = sum(axes[row["reference"]] == "issue 32" for row in throughput)
    issue_32 = [row["error_pct"] for row in throughput if axes[row["reference"]] == "issue 32"]
    assert (f"{mean_abs(issue_32)}% over their {counted} throughput figures"
            in prose("docs/published-runs.md"))


def test_the_published_runs_page_states_them_as_validate_reports_them(references):
    """docs/published-runs.md's running totals, axis by axis, and tensor-parallel.md's range."""
    report, axes = references
    errors = {}
    for row in report["rows"]:
        if row["category"] == "throughput":
            errors.setdefault(axes[row["reference"]], []).append(row["error_pct"])
    before_32 = errors["dp"] + errors["tp"] + errors["pp"]
    every = before_32 + errors["issue 32"]
    beyond = sum(abs(row["error_pct"]) > 25 for row in report["rows"])
    text = prose("docs/published-runs.md")
    assert f"`references/` holds {len(axes)} end-to-end training runs" in text
    assert f"lists the {len(report['not_expressible'])} runs zerosim cannot express" in text
    assert (f"as today: {beyond} rows are not; the throughput mean is {mean_abs(every)}% over "
            f"{len(every)} runs, {mean_abs(before_32)}% over the {len(before_32)} compared "
            f"before issue 32" in text)
    assert (f"throughput: mean |error| {mean_abs(errors['dp'])}% over {len(errors['dp'])} runs, "
            f"worst {max(errors['dp'], key=abs):+.1f}%." in text)
    tp = f"{min(errors['tp']):+.1f}% to {max(errors['tp']):+.1f}%"
    with_tp = errors["dp"] + errors["tp"]
    assert (f"{tp}, mean {mean_abs(errors['tp'])}%; with them the throughput mean over "
            f"{len(with_tp)} runs is {mean_abs(with_tp)}%." in text)
    assert f": mean |error| {mean_abs(errors['pp'])}%. The" in text
    assert (f"the throughput mean over {len(before_32)} runs is {mean_abs(before_32)}%, worst "
            f"{max(before_32, key=abs):+.1f}%." in text)
    assert (f"land {tp} over the measured throughput, mean {mean_abs(errors['tp'])}%"
            in prose("docs/tensor-parallel.md"))


def test_the_flat_models_error_is_what_validate_reports():
    """docs/published-runs.md: the flat half of peak over the data-parallel runs of issue 16."""
    folder = ROOT / "references"
    flat = references_report(folder, {"cluster": {"compute_model": "flat"}})
    gpus = {path.stem: read_reference(path).scenario["cluster"]["gpu"]
            for path in folder.glob("*.toml")}
    dp = [row for row in flat["rows"] if row["category"] == "throughput"
          and not any(read_reference(folder / f"{row['reference']}.toml").scenario
                      .get("parallelism", {}).get(axis, 1) > 1
                      for axis in ("tensor_parallel", "pipeline_parallel"))
          and row["reference"] not in ISSUE_32]
    errors = [row["error_pct"] for row in dp]
    worst = max(errors, key=abs)
    h100 = max(abs(row["error_pct"]) for row in dp if gpus[row["reference"]].startswith("H100"))
    assert (f"The flat half of peak is {mean_abs(errors)}% off over the {len(dp)} data-parallel "
            f"runs checked before issue 32 (worst {worst:+.1f}%)"
            in prose("docs/published-runs.md"))
    assert h100 < 19  # "within 19% on the H100 ones"


def test_plans_largest_model_prose_solves_table_1_for_psi():
    """docs/tradeoffs.md: the model states alone fit when K_stage(Ψ) <= the memory left, with the
    bytes per parameter of Table 1 at N = 64; the memory left is the plan sample's own."""
    plan = sample("docs/tradeoffs.md", "plan")
    left_GiB = float(re.search(r": ([\d.]+) GiB left for the model", plan).group(1))
    bytes_per_param = [16, 4 + 12 / N, 2 + 14 / N, 16 / N]  # DDP, ZeRO-1, ZeRO-2, ZeRO-3
    largest = [left_GiB * 2**30 / b for b in bytes_per_param]
    named = [f"{p / 1e9:#.3g}".rstrip(".") + "B" for p in largest]  # 3 significant digits
    ratios = ", ".join(f"{p / largest[0]:.1f}" for p in largest[1:3])
    assert (f"solved for Ψ: {', '.join(named[:3])} and {named[3]} here, {ratios} and "
            f"{largest[3] / largest[0]:.0f} times DDP's" in prose("docs/tradeoffs.md"))
    assert [round(p / 1e9, 2) for p in largest] == [2.08, 7.95, 15.01, 133.19]  # by hand


def test_readme_tensor_and_pipeline_figures_are_their_samples():
    tp = sample("docs/tensor-parallel.md", "simulate")
    per_rank, ranks = re.search(r"\(([\d,]+) per tensor-parallel rank\) \| (\d+) ranks",
                                tp).groups()
    t = 8  # the README's command: --set parallelism.tensor_parallel=8
    text = prose("README.md")
    assert f"--set parallelism.tensor_parallel={t} " in PAGES["README.md"]
    assert (f"shards each GPU's {int(per_rank.replace(',', '')) / 1e9:.2f}B-parameter slice over "
            f"the {int(ranks) // t} data-parallel ranks" in text)
    pp = sample("docs/pipeline-parallel.md", "simulate")
    stages, micro, layers = map(int, re.search(
        r"pipeline: (\d+) stages, 1f1b, (\d+) micro-batches per step, layers per stage (\d+)",
        pp).groups())
    held = [int(line.split()[5]) for line in pp.splitlines() if re.match(r"\d+ {10,}\d", line)]
    assert held == [stages - i for i in range(stages)]  # 1F1B: stage i holds p - i (Narayanan)
    assert (stages, micro, layers) == (8, 96, 12) and 96 // stages == 12
    assert f"runs GPT-3 175B as t {t} x p {stages} x d {1024 // (t * stages)}:" in text
    assert f"pipeline stages of {layers} layers" in text and f"over {micro} micro-batches" in text
    assert f"(the first stage holds {held[0]} micro-batches, the last {held[-1]})" in text


def test_tensor_parallel_prose_is_its_sample():
    """docs/tensor-parallel.md's words on its own sample: the slice, its model states (Table 1's
    16Ψ/N_d with Ψ the slice), and the bytes each group moves (sim/groups.py's line)."""
    tp = sample("docs/tensor-parallel.md", "simulate")
    total, per_rank, ranks = (int(x.replace(",", "")) for x in re.search(
        r"([\d,]+) parameters \(([\d,]+) per tensor-parallel rank\) \| (\d+) ranks",
        tp).groups())
    d = ranks // 8
    groups = re.search(r"dp all_gather ([\d.]+), reduce_scatter ([\d.]+) \| tp all_gather "
                       r"([\d.]+), all_reduce ([\d.]+), reduce_scatter ([\d.]+) GB", tp).groups()
    dp_GB, tp_GB = sum(map(float, groups[:2])), sum(map(float, groups[2:]))
    assert (f"Each GPU holds {per_rank / 1e9:.2f}B of the {total / 1e9:.1f}B parameters and "
            f"shards them over {d} data-parallel ranks: {16 * per_rank / d / 1e9:.2f} GB of "
            f"model states. Its TP group moves {tp_GB:.0f} GB per step over NVLink"
            in prose("docs/tensor-parallel.md"))
    assert f"its data-parallel group {dp_GB:.0f} GB across nodes" in prose("docs/tensor-parallel.md")


def test_tradeoffs_calibration_figure_prose_is_the_committed_reports():
    """docs/tradeoffs.md's words on docs/figures/validate_stage{0..3}.json (measured on a 2-core
    box by bench/validate_figures.sh and committed)."""
    reports = [json.loads((ROOT / f"docs/figures/validate_stage{s}.json").read_text())
               for s in range(4)]
    metric = [{m["name"]: m for m in report["metrics"]} for report in reports]
    steps = [f"{m['step_time_s']['error_pct']:+.1f}%" for m in metric]
    spreads = sorted(round(m["step_time_s"]["spread_pct"]) for m in metric)
    compute = sorted(-m["compute_s"]["error_pct"] for m in metric)
    memory = max(abs(m["error_pct"]) for report in reports for m in report["metrics"]
                 if m["category"] == "memory")
    gather = metric[1]["comm_all_gather_s"]
    text = prose("docs/tradeoffs.md")
    assert (f"Step times are {', '.join(steps[:3])} and {steps[3]} off for stages 0-3, each "
            f"within the ±{spreads[0]}-{spreads[-1]}% its own steps spread" in text)
    assert f"Memory lies on the line (within {memory:.1f}%)." in text
    assert (f"simulated compute is {compute[0]:.0f}% to {compute[-1]:.0f}% short" in text)
    assert (f"ZeRO-1's one small all-gather per step ({gather['error_pct']:.0f}%, spread "
            f"±{gather['spread_pct']:.0f}%)" in text)


def test_the_timed_sweep_has_the_points_the_pages_say():
    """bench/readme_timings.py times the sweep the README and docs/tradeoffs.md count."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import readme_timings
    finally:
        sys.path.remove(str(ROOT / "bench"))
    (argv,) = [argv for words, _, argv in readme_timings.claims("/tmp", False)
               if words.startswith("sweep")]
    values = [argv[i + 1].split("=")[1].split(",") for i, a in enumerate(argv) if a == "--vary"]
    points = len(values[0]) * len(values[1])
    assert f"({points} points, " in prose("README.md")
    assert f"# {points} points, " in PAGES["docs/tradeoffs.md"]
    assert Path(argv[argv.index("sweep") + 1]) == ZERO_PAPER.relative_to(ROOT)


def test_readme_quotes_the_real_runs_sample():
    """The README's `rank 0: ...` is the start of a line of docs/real-runs.md's zero-real sample
    (tests/zero_real/test_page_samples.py keeps that sample the real output)."""
    quoted = re.search(r"`(rank 0: model states [^`]*?), \.\.\.`", prose("README.md")).group(1)
    sample_text = re.search(r"<!-- sample: zero-real run .*?-->\n```text\n(.*?)```",
                            PAGES["docs/real-runs.md"], re.S).group(1)
    assert any(line.startswith(quoted + ",") for line in sample_text.splitlines())


def test_the_h100_counts_are_what_its_bench_prints():
    """bench/h100_validation.py validates every committed H100 run (profiles/measurements/
    h100_2026-11-24/, measured there on 2026-11-24) against the record built from the committed
    microbenchmarks: files, so it runs here, without a GPU, in under a second."""
    done = subprocess.run([sys.executable, str(ROOT / "bench/h100_validation.py")],
                          capture_output=True, text=True, check=True, timeout=300)
    summary = {}
    for label, mean, n, worst, within in re.findall(
            r"^(peak alloc|peak reserved|after fwd|step time) +mean \|error\| +([\d.]+)% over "
            r"(\d+), worst ([-+][\d.]+)%(?:; within the [\d.]+% goal: (\d+) of \d+)?$",
            done.stdout, re.M):
        summary[label] = (mean, int(n), worst, within)
    alloc, reserved, forward, step = (summary[k] for k in (
        "peak alloc", "peak reserved", "after fwd", "step time"))
    assert (f"predicts the peak allocation within 3% in {alloc[3]} of {alloc[1]} runs and the "
            f"step time within 10% in {step[3]} of {step[1]}:" in prose("README.md"))
    text = prose("docs/calibration.md")
    assert (f"**peak allocated** within 3% in {alloc[3]} of {alloc[1]} (mean |error| {alloc[0]}%, "
            f"worst {alloc[2]}%); memory after forward within {forward[0]}% on average (worst "
            f"{forward[2]}%)" in text)
    assert (f"**peak reserved** within 10% in {reserved[3]} of {reserved[1]} (mean |error| "
            f"{reserved[0]}%, worst {reserved[2]}%" in text)
    assert (f"**step time** within 10% in {step[3]} of {step[1]} timed 1-rank runs (mean |error| "
            f"{step[0]}%)" in text)


def test_readme_quotes_the_transfer_loops_as_calibration_md_records_them():
    """The transfer loops (bench/transfer.py on the 2-core box, 2026-11-28: docs/calibration.md's
    table of three loops, and its prose on how far two calibrations priced the same runs apart,
    each as half the two predictions' difference over the measured step)."""
    text = prose("docs/calibration.md")
    loops = re.findall(r"^\| \d[^|]*\| (\d) of 9 \|.*\| (\d) of 9 \|$",
                       PAGES["docs/calibration.md"], re.M)
    first, peak = sorted({int(a) for a, _ in loops}), {int(b) for _, b in loops}
    assert len(loops) == 3 and peak == {9}
    two_process = re.search(r"loop 2's hidden 128: ([\d.]+) and ([\d.]+) ms for ([\d.]+) "
                            r"measured", text).groups()
    three = re.search(r"loop 3's world3: ([\d.]+) and ([\d.]+) ms for ([\d.]+)\)", text).groups()
    apart = [abs(float(a) - float(b)) / 2 / float(m) * 100 for a, b, m in (two_process, three)]
    assert (f"to ±{apart[0]:.0f}% apart on 2-process shapes" in text
            and f"up to ±{apart[1]:.0f}% on three processes" in text)
    assert (f"peak memory within 3% in 9 of 9, step time within 10% or its spread in "
            f"{first[0]} or {first[-1]} of 9 over three loops" in prose("README.md"))
    assert (f"priced the same runs up to ±{apart[0]:.0f}% apart (±{apart[1]:.0f}% on three "
            f"processes)" in prose("README.md"))


def test_the_pages_quote_the_hardware_catalogue():
    """Figures whose source is cited once, in zerosim/hardware/gpus.py, as the pages quote them."""
    from zerosim.hardware import GPUS
    from zerosim.hardware.gpus import CUDA_CONTEXT_MIB

    (low_W, low), (high_W, high) = GPUS["H100-80GB"].gemm_tflops_by_power_W
    text = prose("docs/memory-model.md")
    assert f"context ({CUDA_CONTEXT_MIB:.0f} MiB measured" in text
    assert f"({low:.0f} against {high:.0f} TFLOP/s at {low_W:.0f} W)" in text
    assert (f"(a {low_W:.0f} W H100: {low:.0f} TFLOP/s, against {high:.0f} at {high_W:.0f} W)"
            in prose("docs/published-runs.md"))


def test_the_calibration_loop_prose_is_its_sample():
    """The README's and docs/calibration.md's words on the three-command loop's validate sample
    (measured on the 2-core box, 2026-11-28, its files committed in profiles/measurements/cpu_2026-11-28/;
    test_readme.py keeps the sample the real output)."""
    shown = sample("docs/calibration.md", "validate profiles/measurements/cpu_2026-11-28/")
    error, spread = {}, {}
    for name, e, s in re.findall(r"^(\w+) +\S+ \S+ +\S+ \S+ +([-+][\d.]+)% +±([\d.]+)%$", shown,
                                 re.M):
        error[name], spread[name] = e, s
    runs = re.search(r"^step_time_s per run: (.*)$", shown, re.M).group(1).split(", ")
    assert all(error[m] in ("+0.0", "-0.0") for m in error if m.startswith(("memory", "peak")))
    gather = 1 + float(error["comm_all_gather_s"]) / 100
    assert round(gather) == 2  # "twice as long as measured"
    assert "verdict: FAILED (time)" in shown
    assert (f"the step came out {error['step_time_s']}% (spread ±{spread['step_time_s']}%) and "
            f"every memory phase exact, compute {error['compute_s']}%, and validate said `verdict: "
            f"FAILED (time)`: its one all-gather a step came out twice as long as measured."
            in prose("README.md"))
    text = prose("docs/calibration.md")
    beyond = float(error["step_time_s"]) > float(spread["step_time_s"])
    assert beyond and (f"the step time is {error['step_time_s']}% off, beyond its "
                       f"±{spread['step_time_s']}% spread" in text)
    assert (f"Compute is {error['compute_s'].lstrip('-')}% short, far beyond its "
            f"±{spread['compute_s']}% spread" in text)
    assert f"The reduce-scatter is {error['comm_reduce_scatter_s'].lstrip('+')}% long." in text
    assert (f"here the step time is {error['step_time_s']}% off, the three runs alone "
            f"{runs[0]}, {runs[1]} and {runs[2]}, and the one all-gather per step varies by "
            f"±{float(spread['comm_all_gather_s']):.0f}% from step to step" in text)


def step_s(*argv: str) -> dict[int, float]:
    """Each stage's step seconds as `zerosim simulate ARGV` prints them."""
    result = run_zerosim("simulate", *argv)
    assert result.code == 0, result.stderr
    return {int(stage): float(step) for stage, step in
            re.findall(r"^(\d) \S+ +([\d.]+) ", result.stdout, re.M)}


def test_the_16384_gpu_figures_are_what_simulate_says():
    """docs/collectives.md: the ZeRO paper's model on 2048 nodes of 8, the tuner's choice against
    one ring per collective (NCCL_ALGO=Ring's counterpart)."""
    tuned = step_s(str(ZERO_PAPER), "--set", "cluster.nodes=2048")
    ring = step_s(str(ZERO_PAPER), "--set", "cluster.nodes=2048", "--set",
                  "cluster.collective_algorithm=ring", "--stage", "0")
    assert (f"At {2048 * 8} GPUs the tree takes DDP's all-reduce: stage 0 of the ZeRO paper's "
            f"model takes {tuned[0]:.2f} s a step, where one ring per collective took "
            f"{ring[0]:.2f} s." in prose("docs/collectives.md"))
    assert tuned[1] == tuned[2]
    assert f"stay latency-bound ({tuned[1]:.1f} s)" in prose("docs/collectives.md")


def test_the_100_gbps_example_is_what_simulate_says():
    """docs/zero-family.md: 100 Gb/s per node is 12.5 GB/s over 8 GPUs, 1.5625 GB/s each."""
    per_gpu_GBps = 100 / 8 / 8
    assert per_gpu_GBps == 1.5625
    assert f"--set cluster.inter_node_bandwidth_GBps={per_gpu_GBps}" in PAGES["docs/zero-family.md"]
    zero3 = step_s(str(ROOT / "scenarios/llama2_7b_64gpu.toml"), "--stage", "3", "--set",
                   f"cluster.inter_node_bandwidth_GBps={per_gpu_GBps}")[3]
    assert (f"On the 64 A100s with 100 Gb/s per node, where ZeRO-3 takes {zero3:.2f} s:"
            in prose("docs/zero-family.md"))
