"""The docs site holds together: every page under docs/ is in mkdocs.yml's nav, every `:::`
identifier of the API reference names an object that imports, the public API is all on that
page, the hook maps the repository's links as the site needs them, and (with the extra [docs]
installed) `mkdocs build --strict` builds without a warning. mkdocs.yml is read without PyYAML."""

import importlib
import importlib.util
import logging
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

DOCS = ROOT / "docs"
CONFIG = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
REFERENCE = (DOCS / "reference.md").read_text(encoding="utf-8")
HOME = "index.md"  # made from README.md by the hook, not a file under docs/


def top_level(key: str, config: str = CONFIG) -> str:
    """The lines of mkdocs.yml's top-level `key:` block, up to the next top-level key."""
    block = re.search(rf"^{key}:[^\n]*\n((?:[ \t#][^\n]*\n|\n)*)", config, re.M)
    assert block, f"mkdocs.yml has no top-level {key}:"
    return block.group(1)


def nav_pages(config: str = CONFIG) -> list[str]:
    """Every page the nav names ("- Title: page.md" or "- page.md"), in order."""
    lines = [line.split("#")[0] for line in top_level("nav", config).splitlines()]
    return re.findall(r"^\s*-\s+(?:[^\n]*?:\s+)?(\S+\.md)\s*$", "\n".join(lines), re.M)


def test_nav_reader_reads_a_known_block():
    """The reader above, on a block written by hand: titled, untitled and nested entries."""
    config = ("site_name: x\nnav:\n  - Home: index.md\n  # a comment\n"
              "  - Notes:\n      - notes/a.md\n      - B: notes/b.md\n"
              "plugins:\n  - search\n  - x: {a: b.md}\n")
    assert nav_pages(config) == ["index.md", "notes/a.md", "notes/b.md"]


def test_every_page_under_docs_is_in_the_nav():
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    nav = nav_pages()
    assert len(nav) == len(set(nav)), "a page is twice in mkdocs.yml's nav"
    assert HOME in nav and not (DOCS / HOME).exists(), (
        "the home page is README.md, made index.md by docs/hooks/repository_pages.py")
    missing = sorted(set(pages) - set(nav))
    assert not missing, f"pages under docs/ missing from mkdocs.yml's nav: {missing}"
    assert sorted(set(nav) - {HOME}) == pages, "the nav names a page that is not under docs/"


IDENTIFIERS = re.findall(r"^:::[ \t]+(\S+)[ \t]*$", REFERENCE, re.M)


def resolve(identifier: str):
    """The object a dotted identifier names: its longest importable module, then attributes."""
    parts = identifier.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            target = getattr(target, name)
        return target
    raise ModuleNotFoundError(identifier)


def test_the_reference_page_has_identifiers():
    assert "zerosim.api.load" in IDENTIFIERS and len(IDENTIFIERS) >= 20


@pytest.mark.parametrize("identifier", IDENTIFIERS)
def test_reference_identifier_imports(identifier):
    resolve(identifier)


def test_the_public_api_is_on_the_reference_page():
    """What `import zerosim` hands out and every public name defined in zerosim/api.py is
    documented there: a new API function cannot be left off the reference."""
    import zerosim
    from zerosim import api

    shown = {id(resolve(identifier)) for identifier in IDENTIFIERS}
    public = [name for name in zerosim.__all__ if name != "__version__"]
    public += [name for name, value in vars(api).items() if not name.startswith("_")
               and getattr(value, "__module__", None) == "zerosim.api"]
    left_off = sorted({name for name in public
                       if id(getattr(zerosim, name, None) or getattr(api, name)) not in shown})
    assert not left_off, f"not on docs/reference.md: {left_off}"


def hook_module():
    spec = importlib.util.spec_from_file_location("repository_pages",
                                                  DOCS / "hooks" / "repository_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_hook_is_the_one_mkdocs_yml_names():
    assert "docs/hooks/repository_pages.py" in top_level("hooks")


@pytest.mark.parametrize("page_dir, site_dir, target, on_site", [
    # the README (repository root) is the site's index.md, at the top of the site
    ("", "", "docs/scenarios.md", "scenarios.md"),
    ("", "", "docs/scenarios.md#scenarios", "scenarios.md#scenarios"),
    ("", "", "references/README.md", "../references/README.md"),
    ("", "", "#layout", "#layout"),
    ("", "", "https://example.org/a.md", "https://example.org/a.md"),
    # a page under docs/ keeps its links, but the README's, which is the home page
    ("docs", "", "../README.md", "index.md"),
    ("docs", "", "../README.md#from-python", "index.md#from-python"),
    ("docs", "", "figures/memory.png", "figures/memory.png"),
    ("docs", "", "../tests/conftest.py", "../tests/conftest.py"),
    ("docs/research", "research", "../../README.md", "../index.md"),
    ("docs/research", "research", "../scenarios.md", "../scenarios.md"),
    ("docs/research", "research", "nccl_tuning.md#x", "nccl_tuning.md#x"),
])
def test_hook_maps_a_repository_link_to_the_site(page_dir, site_dir, target, on_site):
    assert hook_module()._site_target(page_dir, site_dir, target) == on_site


def test_hook_leaves_code_alone():
    hook = hook_module()
    markdown = "[a](docs/x.md) `[b](docs/y.md)`\n```text\n[c](docs/z.md)\n```\n[d](docs/w.md)\n"
    relinked = hook._outside_code(markdown, lambda text: text.replace("docs/", ""))
    assert relinked == "[a](x.md) `[b](docs/y.md)`\n```text\n[c](docs/z.md)\n```\n[d](w.md)\n"


@pytest.mark.parametrize("page, link, level", [
    ("testing.md", "../tests/conftest.py", logging.INFO),  # a file of the repository
    ("testing.md", "../tests/no_such_test.py", logging.WARNING),  # nothing there
    ("testing.md", "no_such_page.md", logging.WARNING),  # inside docs/: a broken page link
    ("research/nccl_tuning.md", "../../README.md", logging.INFO),
    ("index.md", "../references/README.md", logging.INFO),
])
def test_hook_lowers_only_links_to_repository_files(page, link, level):
    message = (f"Doc file '{page}' contains a link '{link}', but the target is not found among "
               f"documentation files.")
    record = logging.LogRecord("mkdocs.structure.pages", logging.WARNING, __file__, 0, message,
                               None, None)
    assert hook_module()._RepositoryFiles().filter(record)
    assert record.levelno == level


def test_mkdocs_build_strict(tmp_path):
    """The site builds with no warning (CI runs the same in .ci/run). Not --quiet: mkdocs then
    drops the warnings before --strict counts them, and a broken site builds."""
    pytest.importorskip("mkdocs", reason="the extra [docs] is not installed")
    pytest.importorskip("mkdocstrings", reason="the extra [docs] is not installed")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stdout + done.stderr
    assert (tmp_path / "site" / "reference" / "index.html").is_file()
