"""Files in and out: reading what a user names (scenarios, Hugging Face and DeepSpeed configs,
profiles, measurements), where every way a read can fail becomes one InputError line that names the
file; checking before the work that a result can be written there (check_writable), and
writing results whole or not at all (write_text, write_bytes)."""

from __future__ import annotations

import io
import json
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from zerosim.errors import InputError


MAX_NESTING = 32
"""Tables, arrays and objects deeper than this are refused: the parsers recurse once per level
(5000 nested arrays end in RecursionError), and the real inputs nest a few levels (a profile's
fit: seven)."""
MAX_TEXT_CHARS = 16 * 2**20
"""The longest input zerosim reads (the committed profile is 0.2 MB, a measurement ~0.4 MB, a
scenario a few KB); reading stops there, so /dev/urandom or a stray disk image ends at once."""


def read_text(path: Path, what: str) -> str:
    """The file's UTF-8 text, at most MAX_TEXT_CHARS; `what` names it in errors ("scenario
    file", "hf_config", ...)."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read(MAX_TEXT_CHARS + 1)
    except FileNotFoundError:
        raise InputError(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise InputError(f"{what} is a directory, not a file: {path}") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # ValueError: a NUL in the path
        raise InputError(f"cannot read {what} {path}: {exc}") from None
    check_length(text, f"{what} {path}")
    return text


def check_length(text: str, origin: str) -> None:
    if len(text) > MAX_TEXT_CHARS:
        raise InputError(f"{origin}: longer than the {MAX_TEXT_CHARS:,} characters zerosim reads")


def check_nesting(value: Any, origin: str) -> None:
    """Tables, arrays and objects at most MAX_NESTING deep (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_NESTING:
                raise InputError(f"{origin}: nested more than {MAX_NESTING} levels deep")
            stack.extend((child, depth + 1)
                         for child in (item.values() if isinstance(item, dict) else item))


def parse_json(text: str, origin: str) -> Any:
    """JSON within the limits above; anything unusable is one InputError naming `origin`."""
    check_length(text, origin)
    try:
        data = json.loads(text)
    except RecursionError:
        raise InputError(f"{origin}: nested more than {MAX_NESTING} levels deep") from None
    except ValueError as exc:  # JSONDecodeError, or an integer of more than 4300 digits
        raise InputError(f"{origin}: invalid JSON: {exc}") from None
    check_nesting(data, origin)
    return data


def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """A JSON file that must hold an object; `what` names it in errors ("profile", ...)."""
    data = parse_json(read_text(path, what), f"{what} {path}")
    if not isinstance(data, dict):
        raise InputError(f"{what} {path}: expected a JSON object, got {type(data).__name__}")
    return data


def check_writable(path: Path, what: str) -> None:
    """Fail before the work, not after it: `path` is not a folder, its folder exists and takes a
    new file (tried with a temporary, removed at once). write_bytes still reports what can only
    fail at the end (a full disk)."""
    try:
        if _stream(path) is not None or _not_a_file(path):  # written as it is, not replaced
            if not os.access(path, os.W_OK):
                raise InputError(f"cannot write {what} {path}: permission denied")
            return
        target = Path(os.path.realpath(path))
        if target.is_dir():
            raise InputError(f"cannot write {what} {path}: it is a folder")
        if not target.parent.exists():
            raise InputError(f"cannot write {what} {path}: no folder {target.parent}")
        if not target.parent.is_dir():
            raise InputError(f"cannot write {what} {path}: {target.parent} is a file, not a folder")
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except InputError:  # an InputError is a ValueError: not to be wrapped in another
        raise
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise InputError(f"cannot write {what} {path}: {getattr(exc, 'strerror', None) or exc}") \
            from None
    os.close(fd)
    os.unlink(tmp)


def write_text(path: Path, text: str, what: str) -> None:
    """write_bytes of the text in UTF-8. A character UTF-8 cannot hold (a lone surrogate from a
    JSON string) is written as its escape, as zerosim's stdout does, not lost to a traceback."""
    write_bytes(path, text.encode("utf-8", errors="backslashreplace"), what)


def write_bytes(path: Path, data: bytes, what: str) -> None:
    """Write a whole file or nothing: a temporary file beside it, synced to disk (a full disk
    shows here, not after the rename) and renamed over it at the end. Any failure removes the
    temporary and becomes one InputError line naming `what` and the path. A link is followed (the
    file it names is replaced, the link stays). This process's own stdout or stderr (/dev/stdout,
    /dev/fd/1, even when it is a file) is written through its stream, in order with what the
    command prints; what else is not a regular file (a pipe, `>(cat)`, a device) cannot be
    replaced and is written to as it is."""
    def failed(exc: BaseException) -> InputError:
        return InputError(f"cannot write {what} {path}: {getattr(exc, 'strerror', None) or exc}")

    try:
        stream = _stream(path)
        if stream is not None:
            stream.flush()
            stream.buffer.write(data)
            stream.buffer.flush()
            return
        if _not_a_file(path):
            with open(path, "wb") as out:
                out.write(data)
            return
        target = Path(os.path.realpath(path))
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise failed(exc) from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as open() would have made it (mkstemp makes it 0600)
        os.replace(tmp, target)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise failed(exc) from None
        raise


def _stream(path: Path):
    """sys.stdout or sys.stderr when `path` names the very file or pipe it writes to."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if os.path.samestat(os.stat(path), os.fstat(stream.fileno())):
                return stream
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            continue  # no such path, or a stream with no file (captured by a test)
    return None


def _not_a_file(path: Path) -> bool:
    """An existing pipe, device or socket (stat follows the links of /dev/fd/N to it: its
    realpath, `pipe:[N]`, is no path at all)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)
