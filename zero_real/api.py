"""zero_real's Python API: a measured run, as `zero-real run` makes it, for a notebook or a script
(`measure`: `zero_real.run` is the package of runs).

    import zero_real
    measured = zero_real.measure("scenarios/tiny_gpt_4rank_cpu.toml", stage=3, nproc=2, steps=2,
                             timed_steps=5, sets={"training.micro_batch": 3})
    measured["ranks"][0]["peak_bytes"], measured["losses"]

Every keyword is the command's flag of the same name (nproc=2 is --nproc 2, fake_world_size=8
is --fake-world-size 8, sequence_parallel=True is --sequence-parallel), read by the command's
own parser, so the same checks and refusals hold: bad input raises zerosim.errors.InputError
(the command's one line), before any rank starts. The run returns its measurement, what `--out`
writes and `zerosim validate` reads; a rank that fails raises RuntimeError naming it. Needs
torch (pip install -e ".[real]"), as the command does.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from zerosim.errors import InputError

Sets = Mapping[str, Any] | Iterable[str]


def measure(scenario: str | Path, *, stage: int, sets: Sets = (), out: str | Path | None = None,
        **flags: Any) -> dict[str, Any] | None:
    """`zero-real run SCENARIO --stage STAGE [--set ...] [--FLAG VALUE ...]`: its measurement
    (None on a torchrun rank but the first); with `out`, also written there as the command
    writes it."""
    from zero_real import cli
    from zero_real.run.launch import RankFailed
    from zerosim.files import write_text

    argv = ["run", str(scenario), "--stage", str(stage), *_set_flags(sets), *_flags(flags)]
    args = _parsed(cli.build_parser(), argv + ([f"--out={out}"] if out is not None else []))
    try:
        result = cli.measure(args)
    except RankFailed as exc:
        raise RuntimeError(str(exc)) from None
    if result is not None and out is not None:
        write_text(Path(out), json.dumps(result, indent=1), "out")
    return result


def _set_flags(sets: Sets) -> list[str]:
    """`--set` pairs, each text as zerosim.load's `sets` writes it (override_texts)."""
    from zerosim.api import override_texts

    return [arg for text in override_texts(sets) for arg in ("--set", text)]


def _flags(flags: Mapping[str, Any]) -> list[str]:
    """Keywords as the command's flags: True a bare switch, False and None left out."""
    argv: list[str] = []
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-")
        if flag in ("--help", "--out", "--stage", "--set"):
            raise InputError(f"zero_real.measure: {name}= is not a flag it takes (stage, sets "
                             f"and out are its own arguments)")
        if value is True:
            argv.append(flag)
        elif value is not False and value is not None:
            argv.append(f"{flag}={value}")  # one word: a value may begin with '-'
    return argv


def _parsed(parser, argv: list[str]):
    """The parser's namespace, or its one-line refusal as InputError (not SystemExit)."""
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            return parser.parse_args(argv)
    except SystemExit:
        message = _COMMAND_LINE.sub("", errors.getvalue().strip())
        raise InputError(message) from None


_COMMAND_LINE = re.compile(r"^zero-real(?: run)?: error: | \(see zero-real(?: run)? --help\)$")
"""What only a command line says around the parser's refusal: its prog and the help hint."""
