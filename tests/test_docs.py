"""The pages hold together: every relative link in README.md and docs/*.md leads to a file (and
a heading, where it names one), and the Python on docs/python-api.md runs and prints what the page
shows."""

import contextlib
import io
import re

import pytest

from tests.conftest import ROOT
from tests.test_readme import PAGES

FENCED = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    return {slug(h) for h in re.findall(r"^#+ (.*)$", FENCED.sub("", markdown), re.M)}


def relative_links() -> list[tuple[str, str]]:
    """(page, target) for each link outside code that is neither a URL nor a mail address."""
    return [(page, target) for page, markdown in PAGES.items()
            for target in dict.fromkeys(LINK.findall(INLINE_CODE.sub("", FENCED.sub("", markdown))))
            if not re.match(r"[a-z][a-z+.-]*:", target)]


LINKS = relative_links()


def test_the_front_page_links_every_page():
    linked = {target for page, target in LINKS if page == "README.md"}
    assert {page for page in PAGES if page != "README.md"} <= linked


@pytest.mark.parametrize("page, target", LINKS, ids=[f"{p} -> {t}" for p, t in LINKS])
def test_relative_link_leads_somewhere(page, target):
    path, _, anchor = target.partition("#")
    file = ((ROOT / page).parent / path).resolve() if path else ROOT / page
    assert file.exists(), f"{page}: {target} is not a file of the repository"
    assert file.is_relative_to(ROOT), f"{page}: {target} leads out of the repository"
    if anchor:
        assert file.suffix == ".md" and anchor in anchors(file.read_text(encoding="utf-8")), (
            f"{page}: {target} names no heading of {file.relative_to(ROOT)}")


CODE = re.compile(r"```python\n(.*?)```\n(?:\n<!-- output -->\n```text\n(.*?)```)?", re.S)
RUNNABLE = [page for page, markdown in PAGES.items() if CODE.search(markdown)]


def test_the_python_page_has_code():
    assert "docs/python-api.md" in RUNNABLE


@pytest.mark.parametrize("page", RUNNABLE)
def test_python_blocks_run_and_print_what_the_page_shows(monkeypatch, page):
    """The page's blocks run in order in one namespace, from the repository root, as a reader
    would paste them; a block followed by `<!-- output -->` and a text block prints exactly it."""
    monkeypatch.chdir(ROOT)
    namespace: dict = {"__name__": "__main__"}
    for number, (code, expected) in enumerate(CODE.findall(PAGES[page]), 1):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code, f"{page}, python block {number}", "exec"), namespace)
        if expected:
            assert printed.getvalue() == expected, f"{page}, python block {number}"
