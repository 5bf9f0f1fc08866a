"""TOML as a user writes it (scenario files, `--set` and `--vary` values), parsed within the
limits zerosim.files sets for JSON too.

tomllib recurses once per nesting level, so 5000 nested arrays end in RecursionError, and TOML's
dotted keys (`a.b.c... = 1`) build a deep table without recursing at all, which then breaks
whatever walks it (repr, json.dumps): anything deeper than files.MAX_NESTING is refused in one
line, as is text longer than files.MAX_TEXT_CHARS and a number too long for Python to convert
(4300 digits).
"""

from __future__ import annotations

import datetime
import sys
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

from zerosim.errors import InputError
from zerosim.files import MAX_NESTING, check_length, check_nesting

TOMLDecodeError = tomllib.TOMLDecodeError


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


def parse_toml(text: str, origin: str) -> dict[str, Any]:
    """A TOML document; its syntax errors raise tomllib.TOMLDecodeError (the caller words them),
    everything else that cannot be used is an InputError."""
    check_length(text, origin)
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
