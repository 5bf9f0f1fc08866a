"""TOML and JSON as a user writes them (scenario files, `--set` and `--vary` values, Hugging Face
and DeepSpeed configs, calibration profiles), parsed within limits.

Both parsers recurse once per nesting level, so 5000 nested arrays end in RecursionError, and
TOML's dotted keys (`a.b.c... = 1`) build a deep table without recursing at all, which then
breaks whatever walks it (repr, json.dumps). The real inputs nest a few levels (a profile's fit:
seven), so anything deeper than MAX_NESTING is refused in one line, as is text longer than
MAX_TEXT_CHARS and a number too long for Python to convert (4300 digits).
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

from zerosim.errors import InputError
from zerosim.files import read_text

MAX_NESTING = 32
MAX_TEXT_CHARS = 16 * 2**20  # the committed profile is 0.2 MB; a scenario, a few KB

TOMLDecodeError = tomllib.TOMLDecodeError


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


def has_date(value: Any) -> bool:
    """Whether a parsed TOML value holds a date or a time anywhere: no key takes one, and JSON
    (a sweep's rows and its checks) cannot hold one."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (datetime.date, datetime.time)):
            return True
        if isinstance(item, (dict, list)):
            stack.extend(item.values() if isinstance(item, dict) else item)
    return False


def _check_length(text: str, origin: str) -> None:
    if len(text) > MAX_TEXT_CHARS:
        raise InputError(f"{origin}: {len(text):,} characters, more than the {MAX_TEXT_CHARS:,} "
                         f"zerosim reads")


def parse_toml(text: str, origin: str) -> dict[str, Any]:
    """A TOML document; its syntax errors raise tomllib.TOMLDecodeError (the caller words them),
    everything else that cannot be used is an InputError."""
    _check_length(text, origin)
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise InputError(f"{origin}: nested more than {MAX_NESTING} levels deep") from None
    except tomllib.TOMLDecodeError:
        raise
    except ValueError as exc:  # an integer of more than 4300 digits
        raise InputError(f"{origin}: {exc}") from None
    check_nesting(data, origin)
    return data


def parse_json(text: str, origin: str) -> Any:
    _check_length(text, origin)
    try:
        data = json.loads(text)
    except RecursionError:
        raise InputError(f"{origin}: nested more than {MAX_NESTING} levels deep") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{origin}: invalid JSON: {exc}") from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise InputError(f"{origin}: invalid JSON: {exc}") from None
    check_nesting(data, origin)
    return data


def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """A JSON file that must hold an object; `what` names it in errors ("profile", ...)."""
    data = parse_json(read_text(path, what), f"{what} {path}")
    if not isinstance(data, dict):
        raise InputError(f"{what} {path}: expected a JSON object, got {type(data).__name__}")
    return data
