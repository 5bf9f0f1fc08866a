"""The README's promises stay true, and so do its pages under docs/: the README's two commands,
and the sample output every page shows."""

import re
import sys

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pyproject.toml: tomli on Python 3.10
    import tomli as tomllib

from tests.conftest import ROOT, run_zerosim

README = (ROOT / "README.md").read_text(encoding="utf-8")
FIRST_BLOCKS = re.findall(r"```bash\n(.*?)```", README, flags=re.S)[:2]
PAGES = {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
         for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
"""README.md and the pages beside docs/architecture.md (docs/research/ holds notes, not pages)."""


def test_readme_opens_with_the_two_commands():
    install_and_run, run_tests = (block.strip() for block in FIRST_BLOCKS)
    assert install_and_run == "pip install -e . && zerosim simulate scenarios/zero_paper_7b5_64gpu.toml"
    assert run_tests == 'pip install -e ".[test]" && python -m pytest -q'
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert run_tests in ci.splitlines()  # CI runs the README's test command verbatim


def found(kind: str) -> list[tuple[str, str, str]]:
    """(page, argv, text) for each `<!-- KIND: zerosim ARGV -->` block of every page, in order."""
    pattern = rf"<!-- {kind}: zerosim (.*?)(?: \(.*?\))? -->\n```text\n(.*?)```"
    return [(page, argv, text) for page, markdown in PAGES.items()
            for argv, text in re.findall(pattern, markdown, re.S)]


SAMPLES = found("sample")
EXCERPTS = found("excerpt")
EXITS = {argv: int(code) for markdown in PAGES.values()
         for argv, code in re.findall(r"<!-- sample: zerosim (.*?) \(exit (\d)\b", markdown)}
"""A sample whose comment opens with `(exit N` shows a command that exits N (validate's 1)."""


def test_readme_has_its_samples():
    assert [(page, argv) for page, argv, _ in SAMPLES] == [
        ("README.md", "simulate scenarios/zero_paper_7b5_64gpu.toml"),
        ("docs/calibration.md", "validate " + " ".join(
            f"profiles/measurements/cpu_2026-11-28/m{run}.json" for run in (1, 2, 3))
         + " --profile profiles/measurements/cpu_2026-11-28/mybox.json"),
        ("docs/calibration.md", "validate profiles/measurements/h100_2026-11-24/gpt7b5_s3_w8.json "
         "--profile profiles/h100_record_2026-11-24.json"),
        ("docs/collectives.md",
         "collective scenarios/llama2_7b_64gpu.toml --op all_reduce --sweep 4K:4G:4"),
        ("docs/pipeline-parallel.md", "simulate scenarios/gpt3_175b_1024gpu_3d.toml --stage 1"),
        ("docs/scenarios.md", "memory scenarios/zero_paper_7b5_64gpu.toml"),
        ("docs/scenarios.md", "memory scenarios/llama2_7b_64gpu.toml --accelerate "
         "tests/fixtures/launch/accelerate/fsdp.yaml"),
        ("docs/tensor-parallel.md",
         "simulate scenarios/gpt3_175b_1024gpu.toml --stage 3 --set "
         "parallelism.tensor_parallel=8 --set parallelism.sequence_parallel=true"),
        ("docs/tradeoffs.md", "plan scenarios/zero_paper_7b5_64gpu.toml"),
        ("docs/zero-family.md", "simulate scenarios/family_zero_offload_10b_v100.toml --stage 2"),
        ("docs/zero-family.md",
         "simulate scenarios/llama2_7b_64gpu.toml --stage 3 --set "
         "parallelism.shard_group=8 --set cluster.inter_node_bandwidth_GBps=1.5625"),
        ("docs/zero-family.md",
         "simulate scenarios/llama2_7b_64gpu.toml --stage 3 --set "
         "training.framework=deepspeed --set parallelism.hpz_partition=8 --set "
         "training.quantized_weights=true --set training.quantized_gradients=true "
         "--set cluster.inter_node_bandwidth_GBps=1.5625")]


def test_readme_has_its_excerpts():
    """The front page shows a few lines of each job's command; the pages the rest."""
    assert [(page, argv) for page, argv, _ in EXCERPTS] == [
        ("README.md", "memory scenarios/zero_paper_7b5_64gpu.toml"),
        ("README.md", "collective scenarios/llama2_7b_64gpu.toml --op all_reduce --sweep 4K:4G:4"),
        ("README.md", "plan scenarios/zero_paper_7b5_64gpu.toml"),
        ("README.md", "plan scenarios/zero_paper_7b5_64gpu.toml --allow offload,hybrid,zeropp"),
        ("docs/zero-family.md", "plan scenarios/zero_paper_7b5_64gpu.toml --allow offload,hybrid")]


def test_readme_shows_the_figures():
    images = [(page, image) for page, markdown in PAGES.items()
              for image in re.findall(r"!\[[^\]]+\]\(([^)\s]+\.png)\)", markdown)]
    assert images == [("docs/pipeline-parallel.md", "figures/pipeline.png"),
                      ("docs/report.md", "figures/report.png")] + [
        ("docs/tradeoffs.md", f"figures/{kind}.png") for kind in
        ("memory", "tradeoff", "timeline", "calibration")]
    for page, image in images:
        assert ((ROOT / page).parent / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("page, argv, sample", SAMPLES, ids=[argv for _, argv, _ in SAMPLES])
def test_readme_sample_output_is_the_real_output(monkeypatch, page, argv, sample):
    monkeypatch.chdir(ROOT)  # the sample shows the path as typed in the page's command
    result = run_zerosim(*argv.split())
    assert result.code == EXITS.get(argv, 0)
    assert result.stdout == sample


@pytest.mark.parametrize("page, argv, excerpt", EXCERPTS,
                         ids=[f"{page}: {argv}" for page, argv, _ in EXCERPTS])
def test_readme_excerpts_are_lines_of_the_real_output(monkeypatch, page, argv, excerpt):
    """An excerpt shows some lines of a longer output: each is a line of it, as printed, in the
    order printed; a line `...` stands for lines left out."""
    monkeypatch.chdir(ROOT)
    result = run_zerosim(*argv.split())
    assert result.code == 0
    lines = iter(result.stdout.splitlines())
    shown = [line for line in excerpt.splitlines() if line != "..."]
    assert EXCERPTS and shown and all(line in lines for line in shown)  # `in` consumes: in order


def test_readme_says_how_its_test_counts_are_made():
    """The paragraph after the two commands quotes pytest's last line without torch and with it;
    the script it names makes both again, running the README's test command verbatim, and the
    extras it names are the project's, each bringing what the paragraph says."""
    paragraph = " ".join(
        README.split("The second command runs the test suite.", 1)[1].split("\n\n")[0].split())
    assert len(re.findall(r"`\d+ passed, \d+ skipped`", paragraph)) == 2
    script = ROOT / "bench" / "readme_counts.sh"
    assert "`bash bench/readme_counts.sh [--torch] [--no-browser]`" in paragraph
    lines = [line.strip() for line in script.read_text(encoding="utf-8").splitlines()]
    assert FIRST_BLOCKS[1].strip() in lines
    pin = "pip install torch==2.13.0"
    assert pin in paragraph  # the pin CI installs, and so does the script's --torch:
    assert pin.replace("install", "install --quiet") in lines
    assert pin.replace("install", "install --quiet") in (ROOT / ".ci" / "run").read_text(
        encoding="utf-8")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
        "project"]["optional-dependencies"]
    brings = {"real": "torch", "png": "kaleido", "ray": "ray"}
    for extra, package in brings.items():
        assert f"`[{extra}]`" in paragraph
        assert any(spec.startswith(package) for spec in extras[extra]), extra


def test_the_test_command_collects_without_torch():
    """The README's fresh machine has no torch: a test module that imports torch or zero_real at
    its top must skip first (`pytest.importorskip("torch")`), or collecting it is an error and
    the whole command fails (test_pipeline_mutants.py did, found by bench/readme_counts.sh)."""
    unguarded = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        imports = [i for i, line in enumerate(lines)
                   if re.match(r"(from|import) (torch|zero_real)\b", line)]
        skips = [i for i, line in enumerate(lines)
                 if re.match(r"(\w+ = )?pytest\.importorskip\(\"torch\"\)", line)]
        if imports and not (skips and skips[0] < imports[0]):
            unguarded.append(path.relative_to(ROOT).as_posix())
    assert unguarded == ["tests/zero_real/helpers.py"]  # imported only by modules that skip
