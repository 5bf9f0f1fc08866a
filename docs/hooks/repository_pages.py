"""Repository pages as a site: mkdocs hooks that make README.md the home page and keep the
links the pages write for GitHub (relative to each file in the repository) true on the site.

The pages are read on GitHub as much as on the site, so they stay written for the repository:
the README links `docs/scenarios.md`, a page under docs/ links `../README.md` or a test file.
On the site the README is `index.md`, so its links into docs/ lose their `docs/` prefix, a
page's link to `../README.md` becomes the home page, and its other links keep their target (a
README link to `references/README.md` becomes `../references/README.md`, as a page under docs/
writes it). A link that leaves docs/ for another repository file (a test, a script) cannot be
on the site; mkdocs reports it as not found, which `--strict` turns into a failure, so such a
report is lowered to INFO where, and only where, the file exists in the repository: a link to
nothing stays a warning. mkdocs.yml names this module in `hooks:`.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = "README.md"
HOME = "index.md"

FENCED = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")
# mkdocs 1.6's words for a link whose target is not a page (structure/pages.py, path_to_url).
NOT_FOUND = re.compile(r"Doc file '([^']+)' contains a link '([^']+)', but the target")


def _outside_code(markdown: str, change) -> str:
    """`change` applied to the text between fenced blocks and inline code spans, not in them."""
    def prose(text: str) -> str:
        spans = INLINE_CODE.split(text)
        codes = INLINE_CODE.findall(text)
        return "".join(change(s) + (codes[i] if i < len(codes) else "")
                       for i, s in enumerate(spans))

    out, end = [], 0
    for block in FENCED.finditer(markdown):
        out += [prose(markdown[end:block.start()]), block.group(0)]
        end = block.end()
    return "".join(out + [prose(markdown[end:])])


def _site_target(page_dir: str, site_dir: str, target: str) -> str:
    """`target`, written relative to the page's directory in the repository (`page_dir`), as
    the page at `site_dir` (its directory under docs/) must write it."""
    if re.match(r"[a-zA-Z][a-zA-Z+.-]*:|#|/", target):
        return target  # a URL, an anchor on the page, or an absolute path: left as written
    path, hash_, anchor = target.partition("#")
    in_repo = posixpath.normpath(posixpath.join(page_dir, path))
    if in_repo == README:
        in_site = HOME
    elif in_repo.startswith("docs/"):
        in_site = in_repo[len("docs/"):]
    else:
        in_site = posixpath.join("..", in_repo)  # outside docs/: as a page under docs/ writes it
    return posixpath.relpath(in_site, site_dir or ".") + hash_ + anchor


def on_files(files, config):
    """README.md, read from the repository root, becomes the site's home page."""
    from mkdocs.structure.files import File  # here, so that the tests read this module without it

    text = (REPO / README).read_text(encoding="utf-8")
    files.append(File.generated(config, HOME, content=text))
    return files


def on_page_markdown(markdown, page, config, files):
    site_dir = posixpath.dirname(page.file.src_uri)
    page_dir = "" if page.file.src_uri == HOME else posixpath.join("docs", site_dir)

    def relink(text: str) -> str:
        return LINK.sub(lambda m: m.group(1) + _site_target(page_dir, site_dir, m.group(2))
                        + m.group(3), text)

    return _outside_code(markdown, relink)


class _RepositoryFiles(logging.Filter):
    """mkdocs's not-found report lowered to INFO for a link to a file of the repository
    outside docs/ (read on GitHub, where it leads to that file); every other report kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        found = NOT_FOUND.match(record.getMessage())
        if found and record.levelno == logging.WARNING:
            page, target = found.groups()
            path = posixpath.normpath(posixpath.join("docs", posixpath.dirname(page),
                                                     target.partition("#")[0]))
            if not path.startswith(("docs/", "../")) and (REPO / path).is_file():
                record.levelno, record.levelname = logging.INFO, "INFO"
        return True


_FILTER = _RepositoryFiles()


def on_config(config):
    logger = logging.getLogger("mkdocs.structure.pages")
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return config


def on_serve(server, config, builder):
    """`mkdocs serve` rebuilds when README.md changes, as it does for the pages under docs/."""
    server.watch(str(REPO / README))
    return server
