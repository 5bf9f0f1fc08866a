"""The README's promises stay true: its two commands, and the sample output it shows."""

import re

import pytest

from tests.conftest import ROOT, run_zerosim

README = (ROOT / "README.md").read_text(encoding="utf-8")
FIRST_BLOCKS = re.findall(r"```bash\n(.*?)```", README, flags=re.S)[:2]


def test_readme_opens_with_the_two_commands():
    install_and_run, run_tests = (block.strip() for block in FIRST_BLOCKS)
    assert install_and_run == "pip install -e . && zerosim simulate scenarios/zero_paper_7b5_64gpu.toml"
    assert run_tests == 'pip install -e ".[test]" && python -m pytest -q'
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert run_tests in ci.splitlines()  # CI runs the README's test command verbatim


SAMPLES = re.findall(r"<!-- sample: zerosim (.*?)(?: \(.*?\))? -->\n```text\n(.*?)```", README, re.S)


def test_readme_has_its_samples():
    assert [argv for argv, _ in SAMPLES] == ["simulate scenarios/zero_paper_7b5_64gpu.toml",
                                             "memory scenarios/zero_paper_7b5_64gpu.toml",
                                             "collective scenarios/llama2_7b_64gpu.toml --op all_reduce --sweep 4K:4G:4",
                                             "plan scenarios/zero_paper_7b5_64gpu.toml",
                                             "simulate scenarios/family_zero_offload_10b_v100.toml --stage 2",
                                             "simulate scenarios/llama2_7b_64gpu.toml --stage 3 --set "
                                             "training.shard_group=8 --set cluster.inter_node_bandwidth_GBps=1.5625",
                                             "simulate scenarios/llama2_7b_64gpu.toml --stage 3 --set "
                                             "training.framework=deepspeed --set training.hpz_partition=8 --set "
                                             "training.quantized_weights=true --set training.quantized_gradients=true "
                                             "--set cluster.inter_node_bandwidth_GBps=1.5625"]


def test_readme_shows_the_figures():
    images = re.findall(r"!\[[^\]]+\]\((docs/figures/\w+\.png)\)", README)
    assert images == [f"docs/figures/{kind}.png" for kind in
                      ("memory", "tradeoff", "timeline", "calibration")]
    for image in images:
        assert (ROOT / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, sample", SAMPLES, ids=[argv for argv, _ in SAMPLES])
def test_readme_sample_output_is_the_real_output(monkeypatch, argv, sample):
    monkeypatch.chdir(ROOT)  # the sample shows the path as typed in the README's command
    result = run_zerosim(*argv.split())
    assert result.code == 0
    assert result.stdout == sample


EXCERPTS = re.findall(r"<!-- excerpt: zerosim (.*?) -->\n```text\n(.*?)```", README, re.S)


@pytest.mark.parametrize("argv, excerpt", EXCERPTS, ids=[argv for argv, _ in EXCERPTS])
def test_readme_excerpts_are_lines_of_the_real_output(monkeypatch, argv, excerpt):
    """An excerpt shows some lines of a longer output: each is a line of it, as printed."""
    monkeypatch.chdir(ROOT)
    result = run_zerosim(*argv.split())
    assert result.code == 0
    lines = result.stdout.splitlines()
    assert EXCERPTS and all(line in lines for line in excerpt.splitlines())
