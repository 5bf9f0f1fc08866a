"""Launch configs: what an Accelerate config YAML, a torchtitan job TOML or a Megatron-LM argument
list says about a run, as scenario keys (the readers: accelerate.py, torchtitan.py, megatron.py).

Each reader returns a `Launch`: the keys it takes, table by table, which load.py applies after the
scenario file and before `--set` (scenario < launch config < --set, as for --deepspeed); what
needs the world size (a global batch, a hybrid shard group left to "the rest", the ranks the file
fixes), settled by `settle` once --set has fixed the cluster; and the note the CLI prints: what
was taken, defaulted (absent: the launcher's own default applies, as it would there), kept
(absent with no default: the scenario's value stays), and every key not used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zerosim.errors import InputError, brief
from zerosim.scenario.checks import MAX_VALUE, is_finite_number
from zerosim.scenario.model_table import SHAPE_KEYS

KINDS = ("accelerate", "torchtitan", "megatron")
"""The launch configs, each a flag: --accelerate, --torchtitan, --megatron-args."""
SIZING_KEYS = ("params", "hf_config", *SHAPE_KEYS, "layers")
"""[model] keys that size a model: one of them given, the scenario's model is not left open."""


@dataclass
class Launch:
    """What one launch config contributes; `tables` holds scenario keys by table."""

    origin: str
    tables: dict[str, dict[str, Any]] = field(default_factory=lambda: {
        "model": {}, "cluster": {}, "training": {}, "parallelism": {}})
    whole_model: bool = False
    """The file gives the model's whole shape: the scenario's [model] is not used but for
    `model_kept` (Megatron's arguments)."""
    model_kept: tuple[str, ...] = ()
    model_if_open: dict[str, Any] = field(default_factory=dict)
    """[model] keys taken only where the scenario's [model] gives no shape (torchtitan's
    hf_assets_path config.json)."""
    unsized: str | None = None
    """The one line to raise when, after --set, [model] still says nothing of the model's size
    (torchtitan names a flavor, not a shape)."""
    global_batch: int | None = None
    """Sequences per optimizer step over all data-parallel ranks: gradient_accumulation =
    global / (local_batch x data-parallel ranks) x (local_batch / micro_batch)."""
    local_batch: int | None = None
    """Sequences a rank takes per chunk of the global batch, where that is not the micro-batch
    (torchtitan under a pipeline splits its local batch into micro-batches)."""
    ranks: tuple[int, str] | None = None
    """The world size the file fixes, and the arithmetic that gives it, checked against the
    scenario's."""
    shard_replicas: int | None = None
    """Hybrid sharding whose shard degree is "the rest": shard_group = data-parallel ranks / this."""
    deepspeed: Path | dict[str, Any] | None = None
    """A ds_config the file names (a path) or describes (its keys), read by deepspeed.py."""
    defaulted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)
    unmodeled: list[str] = field(default_factory=list)
    """What the file's run does that zerosim does not model and the answer leaves out."""

    def fail(self, message: str) -> InputError:
        return InputError(f"{self.origin}: {message}")

    def set(self, table: str, key: str, value: Any) -> None:
        self.tables[table][key] = value

    def note(self) -> str:
        taken = ", ".join(f"{table}.{key}={shown(value)}" for table, keys in self.tables.items()
                          for key, value in keys.items())
        parts = [f"from {self.origin}: {taken or 'nothing'}"]
        if self.whole_model:
            kept = f" but {', '.join(self.model_kept)}" if self.model_kept else ""
            parts.append(f"the scenario's [model] replaced{kept}")
        for label, items in (("defaults for", self.defaulted),
                             ("kept the scenario's", self.kept), ("not used:", self.unused),
                             ("not modeled:", self.unmodeled)):
            if items:
                parts.append(f"{label} {', '.join(items)}")
        return "; ".join(parts)


def shown(value: Any) -> str:
    """A value as --set takes it (true, not True)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


_WHOLE = re.compile(r"-?[0-9]+")
"""A whole number written out in ASCII digits (not "--5", not "²", which str.isdigit takes)."""


def integer(launch: Launch, value: Any, key: str, minimum: int = 1) -> int:
    """A whole number in [minimum, 2**53]; a YAML or argument string of digits is one too."""
    if isinstance(value, str) and _WHOLE.fullmatch(value.strip()):
        if len(value.strip()) > 4000:  # int() refuses past 4300 digits; 2**53 has 16
            raise launch.fail(f"{key} = {brief(value)} must be between {minimum} and 2**53")
        value = int(value)
    if not is_finite_number(value) or value != int(value):
        raise launch.fail(f"{key} must be a whole number, got {brief(value)}")
    if not minimum <= value <= MAX_VALUE:
        raise launch.fail(f"{key} = {value} must be between {minimum} and 2**53")
    return int(value)


def boolean(launch: Launch, value: Any, key: str) -> bool:
    """true/false (YAML's or TOML's), or the strings accelerate writes ("true", "false")."""
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise launch.fail(f"{key} must be true or false, got {brief(value)}")
    return value


def choice(launch: Launch, value: Any, key: str, mapping: dict[Any, Any]) -> Any:
    """mapping[value] (strings compared without case), or one line naming what is modeled."""
    found = value.upper() if isinstance(value, str) else value
    table = {k.upper() if isinstance(k, str) else k: v for k, v in mapping.items()}
    if not isinstance(found, (str, int, float)) or isinstance(found, bool) or found not in table:
        known = ", ".join(str(k) for k in mapping)
        raise launch.fail(f"{key} = {brief(value)} is not modeled (zerosim knows {known})")
    return table[found]


def unused_keys(data: dict[str, Any], used: set[str], prefix: str = "") -> list[str]:
    """The dotted keys of `data` not in `used`; a table none of whose keys is used is named
    whole (`[job]`), so the note stays a line."""
    out = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if name in used:
            continue
        inner = [u for u in used if u.startswith(name + ".")]
        if isinstance(value, dict) and inner:
            out.extend(unused_keys(value, used, name + "."))
        else:
            out.append(f"[{name}]" if isinstance(value, dict) and value else name)
    return out


def apply(tables: dict[str, dict[str, Any]], launch: Launch) -> None:
    """The launch config's keys over the scenario's, in place."""
    if launch.whole_model:
        tables["model"] = {k: v for k, v in tables["model"].items() if k in launch.model_kept}
    if launch.unsized and any(key in tables["model"] for key in SIZING_KEYS):
        launch.unused.append("its [model] (the scenario's [model] gives the shape)")
        launch.unsized = None
    elif launch.unsized:
        launch.tables["model"].update(launch.model_if_open)
    for table, keys in launch.tables.items():
        tables[table].update(keys)


def check_sized(tables: dict[str, dict[str, Any]], launch: Launch) -> None:
    """After --set: a launch config that names its model without a shape needs the scenario's."""
    if launch.unsized and not any(key in tables["model"] for key in SIZING_KEYS):
        raise InputError(launch.unsized)


@dataclass(frozen=True)
class Layout:
    """What settling needs of the scenario once --set is applied: its world, its model-parallel
    degrees and its batch."""

    world: int
    tensor_parallel: int
    pipeline_parallel: int
    micro_batch: int
    gradient_accumulation: int


def settle(launch: Launch, layout: Layout, from_cli: set[tuple[str, str]]) -> dict[str, Any]:
    """[training] and [parallelism] keys that need the world size, as {"table.key": value}; the
    ranks the file fixes checked against the scenario's world (after --set)."""
    world = layout.world
    if launch.ranks is not None and launch.ranks[0] != world:
        count, arithmetic = launch.ranks
        raise launch.fail(f"{arithmetic} = {count} ranks, but the scenario's cluster has {world} "
                          f"(cluster.nodes x cluster.gpus_per_node): set them to match")
    model_ways = layout.tensor_parallel * layout.pipeline_parallel
    if world % model_ways:
        return {}  # axes.py refuses the layout in its own words
    data_ranks = world // model_ways
    out: dict[str, Any] = {}
    if launch.shard_replicas is not None and ("parallelism", "shard_group") not in from_cli:
        replicas = launch.shard_replicas
        if data_ranks % replicas or data_ranks == replicas:
            raise launch.fail(f"data_parallel_replicate_degree {replicas} leaves "
                              f"{data_ranks} / {replicas} = {data_ranks / replicas:g} ranks to "
                              f"shard over (world {world} / (tp x pp) {model_ways}): give a "
                              f"whole data_parallel_shard_degree > 1")
        out["parallelism.shard_group"] = data_ranks // replicas
    if launch.global_batch is not None:
        out.update(_accumulation(launch, layout, data_ranks, from_cli))
    return out


def _accumulation(launch: Launch, training: Layout, data_ranks: int, from_cli) -> dict[str, Any]:
    """Micro-steps per optimizer step from the global batch, as Megatron's num_microbatches and
    torchtitan's gradient_accumulation_steps are: global / (local x data-parallel ranks), times
    the micro-batches a local batch is split into."""
    total, micro = launch.global_batch, training.micro_batch
    local = launch.local_batch or micro
    per = local * data_ranks
    if total % per:
        raise launch.fail(f"global batch {total} is not a multiple of local batch {local} x "
                          f"data-parallel ranks {data_ranks} = {per}")
    if local % micro:
        raise launch.fail(f"local batch {local} is not a multiple of micro-batch {micro}")
    steps = total // per * (local // micro)
    given = ("training", "gradient_accumulation") in from_cli
    if given and training.gradient_accumulation != steps:
        raise launch.fail(f"global batch {total} != micro-batch {micro} x gradient_accumulation "
                          f"{training.gradient_accumulation} x data-parallel ranks {data_ranks} "
                          f"= {micro * training.gradient_accumulation * data_ranks}")
    return {"training.gradient_accumulation": steps}

