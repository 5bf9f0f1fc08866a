"""Files in and out: reading what a user names (scenarios, Hugging Face and DeepSpeed configs,
profiles, measurements), where every way a read can fail becomes one InputError line that names the
file; and writing results whole or not at all (write_text)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from zerosim.errors import InputError


def read_text(path: Path, what: str) -> str:
    """The file's UTF-8 text; `what` names it in errors ("scenario file", "hf_config", ...)."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise InputError(f"{what} is a directory, not a file: {path}") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # ValueError: a NUL in the path
        raise InputError(f"cannot read {what} {path}: {exc}") from None


def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """A JSON file that must hold an object."""
    try:
        data = json.loads(read_text(path, what))
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} {path}: invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"{what} {path}: expected a JSON object, got {type(data).__name__}")
    return data


def write_text(path: Path, text: str, what: str) -> None:
    """Write a whole file or nothing: a temporary file beside it, renamed over it at the end.
    Any failure removes the temporary and becomes one InputError line naming `what` and the path.
    A link is followed (the file it names is replaced, the link stays); what is not a regular
    file (a pipe, /dev/stdout) cannot be replaced and is written to as it is."""
    target = Path(os.path.realpath(path))
    if target.exists() and not target.is_file() and not target.is_dir():
        try:
            with open(target, "w", encoding="utf-8", newline="") as out:
                out.write(text)
        except OSError as exc:
            raise InputError(f"cannot write {what} {path}: {exc.strerror or exc}") from None
        return
    path, folder = target, target.parent
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{Path(path).name}.", suffix=".tmp")
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot write {what} {path}: {getattr(exc, 'strerror', None) or exc}") \
            from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as open() would have made it (mkstemp makes it 0600)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise InputError(f"cannot write {what} {path}: {exc.strerror or exc}") from None
        raise
