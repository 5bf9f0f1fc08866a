"""A Hugging Face config.json found in the local Hugging Face cache by its model id, offline:
`hf_config = "mistralai/Mistral-7B-v0.1"` (or "org/name@revision") where no such file is
there relative to the scenario. zerosim never reaches the network; a model not in the cache
is one line saying where it looked and how to get the file.

The cache as huggingface_hub lays it out (https://huggingface.co/docs/hub/local-cache, and
huggingface_hub's guide "Understand caching"):

    <cache>/models--{org}--{name}/refs/{revision}          the commit the revision points at
    <cache>/models--{org}--{name}/snapshots/{commit}/config.json

with <cache> $HF_HUB_CACHE (which takes priority), else $HF_HOME/hub, else
~/.cache/huggingface/hub. A revision of 40 hexadecimal digits is a commit, read from its
snapshot directly; a model without an organisation (gpt2) is models--gpt2.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from zerosim.errors import InputError
from zerosim.files import read_text, refuse_special

MODEL_ID = re.compile(r"(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*(?:@[\w.-]+)?")
"""A Hub model id, optionally at a revision: "org/name", "name", "org/name@rev"."""
COMMIT = re.compile(r"[0-9a-f]{40}")
"""A revision that is a commit hash: its snapshot's folder name."""


def cache_root() -> Path:
    """Where huggingface_hub keeps its cache on this machine (the module's docstring)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def is_model_id(given: str) -> bool:
    """`given` reads as a Hub model id rather than a file: no .json at its end, at most one
    slash, the Hub's characters."""
    return MODEL_ID.fullmatch(given) is not None and not given.endswith(".json")


def resolve_hf_config(given: str, base_dir: Path) -> Path:
    """What hf_config names: `given` relative to base_dir where anything is there (a file, a
    folder, a broken link: its reader says what is wrong), else, when it reads as a model id,
    its config.json in the local cache; else the local path, which its reader reports missing."""
    local = base_dir / given
    if _present(local) or not is_model_id(given):
        return local
    return cached_config(given, local)


def cached_config(given: str, local: Path) -> Path:
    """The cached config.json of the model id `given` (`local`: where it was not found)."""
    repo, _, revision = given.partition("@")
    revision = revision or "main"
    root = cache_root()
    folder = root / ("models--" + repo.replace("/", "--"))
    get = (f"get it with `huggingface-cli download {repo} config.json"
           f"{'' if revision == 'main' else ' --revision ' + revision}` (zerosim reads the "
           f"cache offline, never the network)")
    if COMMIT.fullmatch(revision):
        commit = revision
    else:
        ref = folder / "refs" / revision
        refuse_special(ref, "cannot read hf_config")
        if not ref.is_file():
            raise InputError(f"hf_config {given!r}: no file {local}, and the Hugging Face "
                             f"cache {root} has no {ref.relative_to(root)}: {get}")
        commit = read_text(ref, "hf_config").strip()
        if not COMMIT.fullmatch(commit):
            raise InputError(f"hf_config {given!r}: {ref} holds {commit[:60]!r}, not a commit "
                             f"hash (a damaged cache?): {get}")
    config = folder / "snapshots" / commit / "config.json"
    if not _present(config):
        raise InputError(f"hf_config {given!r}: the cached snapshot {config.parent} has no "
                         f"config.json: {get}")
    return config


def _present(path: Path) -> bool:
    """Something (even a broken link) is at `path`, or something the system will not let us
    look at (a name past its length limit, a folder we may not enter): its reader says why."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except (OSError, ValueError):
        return True
    return True
