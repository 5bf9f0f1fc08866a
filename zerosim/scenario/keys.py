"""The scenario keys' reference (`zerosim keys`): every key the scenario tables accept, read from
their dataclasses, with its type, default, unit and the first sentence of its docstring.

Nothing here is written twice: the keys are the dataclasses' fields (load.py accepts exactly
these), the defaults what the dataclasses give, the units what the key's name ends in (the house
writes units into names) or, for a count, the word its docstring measures it in, and the line the
field's attribute docstring (the string right after the field in the class body, read with `ast`
as Python keeps no such docstring). A field without one has an empty line, which
tests/zerosim/test_keys.py refuses, so every key a user can write is documented.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
from dataclasses import MISSING, dataclass, fields
from functools import lru_cache
from typing import Any

from zerosim.errors import InputError, brief
from zerosim.scenario.config import TABLES
from zerosim.scenario.presets import GPU_PRESETS

MAX_LINE = 100
"""Characters per line of the text table."""

_NAME_UNITS = (("_Melements_per_s_per_core", "Melements/s/core"), ("_MiB", "MiB"),
               ("_GiB", "GiB"), ("_GBps", "GB/s"), ("_tflops", "TFLOP/s"), ("_us", "us"),
               ("_s", "s"), ("_W", "W"), ("_pct", "%"), ("_elements", "elements"),
               ("_bytes", "bytes"))
"""A key's name suffix and the unit it names (longest first: `_per_s_per_core` ends in `_s`)."""

_DOC_UNITS = re.compile(r"^(tokens|sequences)\b|\((tokens|elements)\)|"
                        r"\b(?:this many|parameter) (elements)\b", re.IGNORECASE)
"""The unit a count's docstring measures it in where its name carries none: its first word
("Tokens per sequence"), a unit in parentheses ("Rows of ... (tokens)"), or "this many
elements"."""

_UNSET = re.compile(r"(?:^|[.;]\s+|\()(?:Default|default|Unset|unset|None)\b"
                    r"(?:\s*\([^)]*\))?:?\s*")
"""Where a docstring says what an unset (None) key means: "Default: heads.", "Unset: the preset
node's (...)", "None: the framework's default (1e9).", "(unset: DEFAULT_COMPUTE_EFFICIENCY)"."""


@dataclass(frozen=True)
class Key:
    """One scenario key: `table.name`, its type, its default as the dataclass gives it (a
    factory's value), what that default means where it is None and the code computes one, its
    unit (None: a count or a choice), and the first sentence of its docstring."""

    table: str
    name: str
    type: str
    default: Any
    unset_means: str | None
    unit: str | None
    doc: str
    preset: str | None = None
    """The GPU whose preset the default is, for a [cluster] key that `cluster.gpu` fills (the
    dataclass's default is the default GPU's figure, and another GPU brings its own)."""

    @property
    def key(self) -> str:
        return f"{self.table}.{self.name}"

    def as_dict(self) -> dict:
        return {"table": self.table, "key": self.name, "type": self.type,
                "default": list(self.default) if isinstance(self.default, tuple)
                else self.default, "unit": self.unit, "doc": self.doc,
                "filled_by_gpu": self.preset is not None}

    @property
    def default_text(self) -> str:
        """The default as a scenario file writes it (TOML), or what leaving it unset means."""
        if self.preset is not None:
            shown = (self.unset_means or "unset") if self.default is None \
                else json.dumps(self.default)
            return f"{shown} ({self.preset} preset)"
        if self.default is None:
            return self.unset_means or "none"
        if self.default is MISSING:
            return "required"
        return json.dumps(self.default, ensure_ascii=False)


@lru_cache(maxsize=None)
def field_docstrings(cls: type) -> dict[str, str]:
    """Field name -> its attribute docstring, whitespace as inspect.cleandoc leaves it; a field
    without one is absent."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = next(node for node in tree.body if isinstance(node, ast.ClassDef)).body
    found = {}
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            found[node.target.id] = inspect.cleandoc(after.value.value)
    return found


def first_sentence(text: str) -> str:
    """Up to the first full stop outside parentheses that ends a sentence (not `e.g.` or
    `et al.`), on one line."""
    text = " ".join(text.split())
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if (char == "." and depth <= 0 and text[i + 1:i + 2] in (" ", "")
                and not text[:i].endswith(("e.g", "i.e", " al", " cf"))):
            return text[:i + 1]
    return text


def unset_meaning(doc: str) -> str | None:
    """What a docstring says an unset key means ("Unset: NCCL's table" -> "NCCL's table"), up to
    the end of its clause; None where it says nothing."""
    text = " ".join(doc.split())
    match = _UNSET.search(text)
    if match is None:
        return None
    rest, depth = text[match.end():], 0
    for i, char in enumerate(rest):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0 or (depth == 0 and char in ".;" and rest[i + 1:i + 2] in (" ", "")):
            return rest[:i].strip() or None  # depth < 0: the parenthesis it opened in closes
    return rest.strip() or None


def _constant(meaning: str | None, cls: type) -> str | None:
    """A meaning that names a constant of the table's module ("DEFAULT_COMPUTE_EFFICIENCY") as
    its value, which is what the code computes; any other meaning as it is."""
    value = getattr(inspect.getmodule(cls), meaning or "", None)
    if meaning and meaning.isidentifier() and isinstance(value, (int, float, str)):
        return json.dumps(value)
    return meaning


def type_of(annotation: str) -> str:
    """The TOML type of a field's annotation ('int | None' -> 'optional int')."""
    base, _, rest = str(annotation).partition(" | ")
    name = "array" if base.startswith(("tuple", "list")) else base
    return f"optional {name}" if rest == "None" else name


def unit_of(name: str, type_name: str, doc: str) -> str | None:
    """The unit the key's name ends in, else the one a count's first sentence names, else None."""
    for suffix, unit in _NAME_UNITS:
        if name.endswith(suffix):
            return unit
    if type_name.split()[-1] in ("int", "float"):
        match = _DOC_UNITS.search(first_sentence(doc))
        if match:
            return next(unit for unit in match.groups() if unit).lower()
    return None


def keys_of(table: str) -> list[Key]:
    """Every key of one table, in the dataclass's order."""
    cls = TABLES[table]
    docs = field_docstrings(cls)
    gpu = next((f.default for f in fields(cls) if f.name == "gpu"), None)
    filled = ({key for key, value in GPU_PRESETS.get(gpu, {}).items() if value is not None}
              if table == "cluster" else set())  # unset for this GPU: the docstring says why
    rows = []
    for f in fields(cls):
        default = f.default if f.default_factory is MISSING else f.default_factory()
        doc = docs.get(f.name, "")
        type_name = type_of(f.type)
        rows.append(Key(table, f.name, type_name, default,
                        _constant(unset_meaning(doc), cls) if default is None else None,
                        unit_of(f.name, type_name, doc), first_sentence(doc),
                        gpu if f.name in filled else None))
    return rows


def scenario_keys(table: str | None = None) -> list[Key]:
    """Every key of every table (or of `table`, refused unless a table's name)."""
    if table is None:
        return [key for name in TABLES for key in keys_of(name)]
    if table not in TABLES:
        raise InputError(f"--table {brief(table)} is not a scenario table; allowed: "
                         f"{', '.join(TABLES)}")
    return keys_of(table)


def format_keys(keys: list[Key]) -> str:
    """The keys as a text table, a block per table under its class's first sentence: key, type,
    unit and default aligned in columns (a long default wrapped in its own), the docstring's
    line under them; no line past MAX_LINE characters."""
    blocks = []
    for table in dict.fromkeys(k.table for k in keys):
        title = first_sentence(inspect.getdoc(TABLES[table]) or f"[{table}]")
        blocks.append("\n".join([*textwrap.wrap(title, MAX_LINE),
                                 *_table_rows([k for k in keys if k.table == table])]))
    return "\n\n".join(blocks)


def _table_rows(keys: list[Key]) -> list[str]:
    """One table's header and rows, its columns as wide as its own longest cell."""
    header = ("key", "type", "unit")
    cells = [(k.key, k.type, k.unit or "") for k in keys]
    widths = [max(len(cell) for cell in column) for column in zip(header, *cells)]
    indent = 2 + sum(w + 2 for w in widths)

    def row(cells: tuple[str, str, str], default: str) -> list[str]:
        lead = "  " + "".join(cell.ljust(w + 2) for cell, w in zip(cells, widths))
        wrapped = textwrap.wrap(default, MAX_LINE - indent, break_on_hyphens=False) or [""]
        return [(lead + wrapped[0]).rstrip(), *(" " * indent + more for more in wrapped[1:])]

    lines = row(header, "default")
    for k, line in zip(keys, cells):
        lines += row(line, k.default_text)
        lines += textwrap.wrap(k.doc, MAX_LINE, initial_indent=" " * 6,
                               subsequent_indent=" " * 6, break_on_hyphens=False)
    return lines


def keys_json(keys: list[Key]) -> list[dict]:
    """The keys as `zerosim keys --json` prints them."""
    return [k.as_dict() for k in keys]
