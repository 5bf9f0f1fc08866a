"""What both command lines (`zerosim`, `zero-real`) run on: argparse whose usage error is one line
(`Parser`), and the dispatcher that runs a parsed command (`dispatch`): bad input is one line and
exit 2, never a traceback; Ctrl-C exits 130 and SIGTERM 143, both unwinding, so a sweep's pool is
stopped and a file being written is removed. Neither knows a command: the commands live in
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


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage block) and exit code 2."""

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
    """SIGTERM, raised in the main thread so that a command unwinds as it does for Ctrl-C: a
    sweep's workers are stopped instead of left behind, a file being written is removed; the
    exit code is the shell's for a SIGTERM, 128 + 15."""


def _terminate(signum: int, frame) -> None:
    raise Terminated(128 + signum)


@contextlib.contextmanager
def _sigterm_unwinds():
    """SIGTERM raises Terminated for the duration (only the main thread may set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def dispatch(prog: str, args: argparse.Namespace) -> int:
    """Run the parsed command: bad input is one line on stderr and exit 2, never a traceback;
    Ctrl-C exits 130 and SIGTERM 143, both unwinding (files are written whole or not at all:
    files.write_bytes); a closed pipe (`zerosim memory ... | head`) ends quietly."""
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
