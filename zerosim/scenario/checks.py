"""Value checks shared by the scenario tables and the companion-file readers: each failure is an
InputError naming the key, the value and the bound."""

from __future__ import annotations

import math

from zerosim.errors import InputError


def one_of(key: str, value, allowed) -> None:
    if value not in allowed:
        same = [a for a in allowed if isinstance(a, str) and isinstance(value, str)
                and a.lower() == value.lower()]
        hint = f" (did you mean {same[0]!r}? the names are case-sensitive)" if same else ""
        raise InputError(f"{key} = {value!r} is not one of {', '.join(map(repr, allowed))}{hint}")


# Largest accepted number: 2**53 is exact as a float, and products of a few such values still
# convert to float for reports without overflow.
MAX_VALUE = 2**53


def is_finite_number(value) -> bool:
    """An int (never a bool) or a finite float; ints of any size are finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or math.isfinite(value)


def within_cap(what: str, value, arithmetic: str = "") -> None:
    """A quantity derived from several inputs (a product, a sum) that zerosim reports or computes
    with: at most 2**53 too, so that every number it prints is exact in JSON and as a float."""
    if value > MAX_VALUE:
        shown = f"{arithmetic} = " if arithmetic else ""
        raise InputError(f"{what} = {shown}{value:.4g} is beyond what zerosim models "
                         f"(at most 2**53 = {MAX_VALUE})")


def positive(key: str, value, *, allow_zero: bool = False) -> None:
    if not is_finite_number(value):
        raise InputError(f"{key} = {value} must be a finite number")
    if value > MAX_VALUE:
        raise InputError(f"{key} = {value} is beyond what zerosim models (at most 2**53 = {MAX_VALUE})")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise InputError(f"{key} = {value} must be {bound}")


def utf8_text(key: str, value: str) -> str:
    """The string, if UTF-8 can hold it. A byte the command line could not decode reaches Python
    as a lone surrogate ('\\udcff'), which no report or CSV file can write: refused here, once."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{key} = {ascii(value)[:80]} is not UTF-8 text (character "
                         f"{exc.start} is {ascii(value[exc.start])}, a byte that is not UTF-8?)") \
            from None
    return value
