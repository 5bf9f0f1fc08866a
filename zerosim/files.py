"""Files in and out: reading what a user names (scenarios, Hugging Face and DeepSpeed configs,
profiles, measurements), where every way a read can fail becomes one InputError line that names the
file; refusing what is no regular file before it is opened (refuse_special); checking before the
work that a result can be written there (check_writable), and writing results whole or not at
all, even under SIGKILL (write_text, write_bytes)."""

from __future__ import annotations

import contextlib
import errno
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
scenario a few KB); reading stops there, so a stray disk image ends at once (a device such as
/dev/urandom, or a named pipe, is refused before it is opened: refuse_special; os.devnull is
taken, read as empty and written as nothing: neither can wait or run on)."""


_PROC_FD = "/proc/self/fd"
"""Where Linux shows this process's descriptors as links: the one way to name a nameless file
(linkat(2), "O_TMPFILE" in open(2))."""

_SPECIAL_KINDS = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"),
                  (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def refuse_special(path: str | Path, role: str) -> None:
    """Refuse, before anything opens it, a `path` that names (through its links) no regular file
    or folder: open() on a named pipe waits for a writer or reader that may never come, and a
    device has no end. os.devnull passes (it ends at once both ways), and so does a missing path
    (an output not yet written; a reader reports it).
    Any other way the path cannot be looked at (a name past the system's limit, no permission, a
    loop of links) is one InputError line too: "{role} {path}: {why}", `role` as "cannot read
    hf_config", "cannot write --trace" or "--out"."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # no such file: the caller says why
        return
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise InputError(f"{role} {path}: {_reason(exc)}") from None
    if _is_null(path):
        return
    for is_kind, kind in _SPECIAL_KINDS:
        if is_kind(mode):
            # /dev/stdin names a pipe in `cat s.toml | zerosim memory /dev/stdin`
            stdin = ("; standard input is not read: write it to a file"
                     if is_kind is stat.S_ISFIFO else "")
            raise InputError(f"{role} {path}: {kind}, not a regular file (zerosim reads and "
                             f"writes files only{stdin})")


def _is_null(path: str | Path | int) -> bool:
    """Whether `path` (a descriptor too) names, through its links, os.devnull: the one device
    zerosim takes."""
    try:
        info = os.fstat(path) if isinstance(path, int) else os.stat(path)
        return os.path.samestat(info, os.stat(os.devnull))
    except (OSError, ValueError):
        return False


def _reason(exc: BaseException) -> str:
    """An OSError's words without its errno and repeated path ("File name too long")."""
    if isinstance(exc, OSError) and exc.errno == errno.ELOOP:
        return "a loop of symbolic links"
    return getattr(exc, "strerror", None) or str(exc)


def read_text(path: Path, what: str) -> str:
    """The file's UTF-8 text, at most MAX_TEXT_CHARS; `what` names it in errors ("scenario
    file", "hf_config", ...). What is no regular file is refused before it is opened
    (refuse_special), and opened without waiting, in case it became one since."""
    refuse_special(path, f"cannot read {what}")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with open(fd, encoding="utf-8") as file:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectoryError
            if not stat.S_ISREG(mode) and not _is_null(fd):  # os.devnull: empty
                raise InputError(f"{what} {path}: not a regular file (zerosim reads files only)")
            os.set_blocking(fd, True)
            text = file.read(MAX_TEXT_CHARS + 1)
    except FileNotFoundError:
        raise InputError(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise InputError(f"{what} is a directory, not a file: {path}") from None
    except InputError:  # an InputError is a ValueError: not to be wrapped in another
        raise
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
    """Fail before the work, not after it: `path` is a regular file or none (refuse_special), its
    folder exists and takes a new file (tried with a nameless temporary where Linux offers one).
    write_bytes still reports what can only fail at the end (a full disk)."""
    if _stream(path) is not None or _is_null(path):  # own stdout or stderr, or os.devnull
        return
    refuse_special(path, f"cannot write {what}")
    try:
        target = Path(os.path.realpath(path))
        if target.is_dir():
            raise InputError(f"cannot write {what} {path}: it is a folder")
        if not target.parent.exists():
            raise InputError(f"cannot write {what} {path}: no folder {target.parent}")
        if not target.parent.is_dir():
            raise InputError(f"cannot write {what} {path}: {target.parent} is a file, not a folder")
        os.close(_temporary(target)[0])
    except InputError:  # an InputError is a ValueError: not to be wrapped in another
        raise
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise InputError(f"cannot write {what} {path}: {_reason(exc)}") from None


def write_text(path: Path, text: str, what: str) -> None:
    """write_bytes of the text in UTF-8 (AtomicFile.write_text)."""
    with AtomicFile(path, what) as out:
        out.write_text(text)


def write_bytes(path: Path, data: bytes, what: str) -> None:
    """Write a whole file or nothing, even if the process is killed (SIGKILL) at any instant:
    AtomicFile with one piece."""
    with AtomicFile(path, what) as out:
        out.write(data)


class AtomicFile:
    """A file written in pieces, whole or not at all, even if the process is killed (SIGKILL)
    at any instant: the pieces go to a nameless file in the target's folder (Linux's
    O_TMPFILE), synced to disk when the block ends without an exception (a full disk shows
    here, not after the rename), given a hidden name (`.NAME.PID.tmp`) only then and renamed
    over the target at once. A temporary a killed writer left in that instant (or for the whole
    write, where O_TMPFILE is missing) is removed by the next write to the target. A failure is
    one InputError line naming `what` and the path; an exception of the block (a bad point,
    Ctrl-C) passes through unchanged and leaves the previous file. A link is followed (the file
    it names is replaced, the link stays); a loop of links, a named pipe, a socket or a device
    is refused (refuse_special): opening them would wait forever or never end. This process's
    own stdout or stderr (/dev/stdout, /dev/fd/1, even when it is a file or a pipe) is written
    through its stream, in order with what the command prints; os.devnull takes nothing."""

    def __init__(self, path: str | Path, what: str) -> None:
        self.path, self.what = path, what
        self._file = None
        self._stream = _stream(Path(path))
        self._null = self._stream is None and _is_null(path)
        self._tmp: Path | None = None
        self._named = False

    def __enter__(self) -> "AtomicFile":
        if self._stream is not None:
            self._guard(self._stream.flush)
            return self
        if self._null:  # its folder, /dev, takes no temporary, and its content is thrown away
            return self
        refuse_special(self.path, f"cannot write {self.what}")
        self._target = Path(os.path.realpath(self.path))
        self._tmp = self._target.with_name(f".{self._target.name}.{os.getpid()}.tmp")
        try:
            _remove_stale(self._target)
            fd, self._named = _temporary(self._target, self._tmp)
            self._file = os.fdopen(fd, "wb")
        except BaseException as exc:  # __exit__ does not run: a signal here must not leak tmp
            self._clean()
            self._raise(exc)
        return self

    def write(self, data: bytes) -> None:
        if self._null:
            return
        self._guard(lambda: (self._stream.buffer if self._stream is not None
                             else self._file).write(data))

    def write_text(self, text: str) -> None:
        """The text in UTF-8. A character UTF-8 cannot hold (a lone surrogate from a JSON
        string) is written as its escape, as zerosim's stdout does, not lost to a traceback."""
        self.write(text.encode("utf-8", errors="backslashreplace"))

    def __exit__(self, kind, exc, tb) -> None:
        if self._stream is not None:
            if kind is None:
                self._guard(self._stream.buffer.flush)
            return
        if self._null:
            return
        try:
            if kind is None:
                self._guard(self._finish)
        finally:
            self._clean()

    def _finish(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        if not self._named:
            _link(self._file.fileno(), self._tmp)
        os.replace(self._tmp, self._target)  # at once: a kill between the two leaves tmp, complete

    def _clean(self) -> None:
        """Whatever was linked or made goes, however the write ended (a signal's too)."""
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
        with contextlib.suppress(OSError, ValueError):
            self._tmp.unlink(missing_ok=True)  # renamed already, or left by a failure

    def _guard(self, action) -> None:
        try:
            action()
        except BaseException as exc:
            self._raise(exc)

    def _raise(self, exc: BaseException):
        if isinstance(exc, (OSError, ValueError)) and not isinstance(exc, InputError):
            # ValueError: a NUL in the path
            raise InputError(f"cannot write {self.what} {self.path}: {_reason(exc)}") from None
        raise exc


def _temporary(target: Path, tmp: Path | None = None) -> tuple[int, bool]:
    """A new file for writing in target's folder, with the mode open() would give it: nameless
    (O_TMPFILE; False) where the system and file system offer it, else created as `tmp` (True).
    A nameless file that is to get the name `tmp` needs /proc (_link): without it, as in a
    container or chroot with no /proc mounted, `tmp` is created at once instead."""
    folder = target.parent
    if hasattr(os, "O_TMPFILE") and (tmp is None or os.path.isdir(_PROC_FD)):
        try:
            return os.open(folder, os.O_TMPFILE | os.O_WRONLY, 0o666), False
        except OSError as exc:  # EISDIR, EOPNOTSUPP, EINVAL: a kernel or file system without it
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
    if tmp is None:
        fd, name = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
        os.unlink(name)
        return fd, True
    return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666), True


def _link(fd: int, tmp: Path) -> None:
    """Give the nameless file `fd` the name `tmp`: linkat(2) following /proc's link to it.
    os.link calls linkat, which follows it, only when given a folder's descriptor; without one it
    calls link(2), which links the /proc link itself (EXDEV)."""
    folder = os.open(tmp.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.link(f"{_PROC_FD}/{fd}", tmp.name, dst_dir_fd=folder, follow_symlinks=True)
    finally:
        os.close(folder)


def _remove_stale(target: Path) -> None:
    """Remove the `.NAME.PID.tmp` temporaries of target that a writer killed before its rename
    left; one whose writer still runs (the PID is alive) is its, and stays. One with this
    process's PID is stale too: this write names its temporary only at its end, and a PID comes
    again (a container's first processes have the same few), so a dead writer's would make that
    linkat fail (EEXIST) after all the work."""
    prefix = f".{target.name}."
    try:
        names = [n for n in os.listdir(target.parent)
                 if n.startswith(prefix) and n.endswith(".tmp")]
    except OSError:
        return
    for name in names:
        pid = name[len(prefix):-len(".tmp")]
        if not (pid.isascii() and pid.isdigit()):
            continue
        if int(pid) != os.getpid() and _alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            os.unlink(target.parent / name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # OverflowError: no PID is that large
        return False
    except OSError:  # EPERM: another user's process
        return True
    return True


def _stream(path: Path):
    """sys.stdout or sys.stderr when `path` names the very file or pipe it writes to."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if os.path.samestat(os.stat(path), os.fstat(stream.fileno())):
                return stream
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            continue  # no such path, or a stream with no file (captured by a test)
    return None
