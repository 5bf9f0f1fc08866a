"""What both command lines (`zerosim`, `zero-real`) run on: argparse whose usage error is one line
(`Parser`), and the dispatcher that runs a parsed command (`dispatch`): bad input is one line and
exit 2, never a traceback; Ctrl-C exits 130, SIGTERM 143 and SIGHUP (a closed terminal) 129, all
unwinding, so a sweep's pool is stopped and a file being written is removed; a number in a flag
is written in ASCII digits (`whole_number`). Neither knows a command: the commands live in
zerosim/cli/ and zero_real/cli.py, which both import this module without climbing above their
own layers."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading

from zerosim.contract import EXIT_BAD_INPUT, EXIT_OK
from zerosim.errors import InputError


def whole_number(text: str) -> int | None:
    """The one rule for a whole number in a flag of either command line: ASCII digits 0-9 and
    nothing else, else None. int() also takes '٣' (review I14: `zero-real run --stage ٣` ran
    stage 3 where `zerosim simulate --stage ٣` was refused), ' 3', '+3' and '3_0'."""
    if text.isascii() and text.isdigit() and len(text) <= 4300:  # int()'s limit on digits
        return int(text)
    return None


def foreign_digits(text: str) -> bool:
    """Whether `text` writes a digit or number other than in ASCII ('٣', '３', '²', '½'): float()
    takes some of them too, so every typed flag is refused them (Parser._get_value)."""
    return any(not c.isascii() and c.isnumeric() for c in text)


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage block) and exit code 2, and a number in
    any flag is written in ASCII digits (foreign_digits), whatever its type reads."""

    def _get_value(self, action, arg_string):
        if action.type is not None and foreign_digits(arg_string):
            name = "/".join(action.option_strings) or action.dest
            self.error(f"argument {name}: {arg_string!r}: numbers are written in ASCII digits "
                       f"(0-9)")
        return super()._get_value(action, arg_string)

    def error(self, message: str) -> None:  # type: ignore[override]
        message = " ".join(message.split())  # a line break inside a user's flag stays on one line
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _get_values(self, action, arg_strings):
        """`--flag=--` is refused: argparse strips the "--" from the value and stores an empty
        list, which reached the commands as a list (zero-real's --nproc=-- was a TypeError deep
        in calibrate)."""
        if action.option_strings and action.nargs is None and arg_strings == ["--"]:
            self.error(f"argument {'/'.join(action.option_strings)}: expected one argument")
        return super()._get_values(action, arg_strings)


class Terminated(SystemExit):
    """SIGTERM or SIGHUP, raised in the main thread so that a command unwinds as it does for
    Ctrl-C: a sweep's workers are stopped instead of left behind, a file being written is
    removed; the exit code is the shell's for the signal, 128 + 15 or 128 + 1."""


def _terminate(signum: int, frame) -> None:
    raise Terminated(128 + signum)


UNWINDING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP")
                          if hasattr(signal, name))
"""Signals that end a command as Ctrl-C does. SIGHUP's default (the terminal closed, an ssh
session dropped) killed the process at once, leaving a sweep's workers and temporaries behind."""


@contextlib.contextmanager
def _sigterm_unwinds():
    """SIGTERM and SIGHUP raise Terminated for the duration (only the main thread may set
    handlers); a SIGHUP ignored by the caller (nohup) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for signum in UNWINDING_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN or signum == signal.SIGTERM:
            previous[signum] = signal.signal(signum, _terminate)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def dispatch(prog: str, args: argparse.Namespace) -> int:
    """Run the parsed command: bad input is one line on stderr and exit 2, never a traceback;
    Ctrl-C exits 130, SIGTERM 143 and SIGHUP 129, all unwinding (files are written whole or not
    at all: files.write_bytes); a closed pipe (`zerosim memory ... | head`) ends quietly."""
    try:
        with _sigterm_unwinds():
            return args.func(args)
    except InputError as exc:
        print(f"{prog}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Terminated as exc:
        print(f"{prog}: terminated", file=sys.stderr)
        return exc.code
    except BrokenPipeError:
        sys.stderr.close()
        return EXIT_OK
