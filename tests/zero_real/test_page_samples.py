"""The `zero-real run` outputs the pages show are what the command prints today: every line of
a sample, in order (an excerpt: the lines it shows, `...` for those left out), but for what
depends on the machine (torch build, architecture, cores) and the run's own seconds."""

import re

import pytest

pytest.importorskip("torch")

from tests.conftest import ROOT, run_main  # noqa: E402
from tests.test_readme import PAGES  # noqa: E402

SHOWN = [(page, kind, argv, text) for page, markdown in PAGES.items()
         for kind, argv, text in re.findall(
             r"<!-- (sample|excerpt): zero-real (.*?)(?: \(.*?\))? -->\n```text\n(.*?)```",
             markdown, re.S)]
VARIES = [(re.compile(r"torch \S+, \S+, \d+ CPUs?$"), "torch T, ARCH, C CPUs"),
          (re.compile(r", run \d+\.\d+ s$"), ", run S s")]


def steady(line: str) -> str:
    for pattern, stand_in in VARIES:
        line = pattern.sub(stand_in, line)
    return line


def test_the_pages_show_zero_real_outputs():
    assert [(page, kind) for page, kind, _, _ in SHOWN] == [
        ("docs/real-runs.md", "sample"), ("docs/zero-family.md", "excerpt")]


@pytest.mark.parametrize("page, kind, argv, shown", SHOWN,
                         ids=[f"{page}: {argv}" for page, _, argv, _ in SHOWN])
def test_a_pages_zero_real_output_is_the_real_output(tmp_path, monkeypatch, page, kind, argv,
                                                      shown):
    from zero_real import cli

    (tmp_path / "scenarios").symlink_to(ROOT / "scenarios")  # the path as typed; m.json here
    monkeypatch.chdir(tmp_path)
    result = run_main(cli.main, *argv.split())
    assert result.code == 0, result.stderr
    printed = [steady(line) for line in result.stdout.splitlines()]
    wanted = [steady(line) for line in shown.splitlines() if line != "..."]
    if kind == "sample":
        assert printed == wanted
    else:
        lines = iter(printed)
        assert wanted and all(line in lines for line in wanted)  # `in` consumes: in order
