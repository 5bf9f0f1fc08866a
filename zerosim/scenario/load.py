"""Scenario files in, a validated Scenario out.

Precedence, lowest first: dataclass defaults < GPU preset < scenario file (< Hugging Face config for
the model shape, which explicit [model] keys override) < launch config (an Accelerate YAML, a
torchtitan TOML or Megatron-LM's arguments: launch.py) < DeepSpeed config (given, or named by
Accelerate's) < `--set` overrides.
Every key from any of these is checked against the dataclass fields: a typo fails, naming the key
and the allowed ones.
"""

from __future__ import annotations

import difflib
from dataclasses import fields
from pathlib import Path
from typing import Any, Iterable

from zerosim.errors import InputError
from zerosim.files import read_text
from zerosim.hardware import DEFAULT_GPU
from zerosim.scenario.checks import MAX_VALUE, is_finite_number, utf8_text
from zerosim.frameworks import REGISTRY
from zerosim.scenario.config import (FETCH_KNOBS, TABLES, ClusterConfig, ModelConfig,
                                     ParallelismConfig, Scenario, TrainingConfig)
from zerosim.scenario.parallelism_table import (LEGACY_TRAINING_KEYS, PARALLELISM_KEYS,
                                                canonical_key)
from zerosim.scenario.parse import TOMLDecodeError, has_date, parse_toml
from zerosim.scenario.defaults import default_notes
from zerosim.scenario.presets import GPU_PRESETS, preset_of_hardware
from zerosim.scenario.variation import VariationConfig
from zerosim.units import BYTES_PER_ELEMENT

_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a float", str: "a string",
               list: "an array", dict: "a table"}


def _describe(value: Any) -> str:
    return f"{value!r} ({_TYPE_NAMES.get(type(value), type(value).__name__)})"


def _field_types(cls) -> dict[str, str]:
    """Field name -> its base type name ('int', 'float', 'str', 'bool'); '| None' dropped."""
    return {f.name: str(f.type).split(" | ")[0] for f in fields(cls)}


def allowed_keys(table: str) -> list[str]:
    return list(_field_types(TABLES[table]))


def _coerce(key: str, value: Any, base: str) -> Any:
    """Check a TOML value against a field's type; integral floats (7.5e9) become ints."""
    if base.startswith("tuple"):  # a list of ranks
        if not isinstance(value, list):
            what = "layers" if key.endswith("_layers") else "ranks"
            raise InputError(f"{key} must be an array of {what} such as [3], got "
                             f"{_describe(value)}")
        return tuple(_coerce(f"{key}[{i}]", item, "int") for i, item in enumerate(value))
    if base == "bool":
        if isinstance(value, bool):
            return value
        raise InputError(f"{key} must be true or false, got {_describe(value)}")
    if base == "str":
        if isinstance(value, str):
            return utf8_text(key, value)
        raise InputError(f"{key} must be a string, got {_describe(value)}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = "an integer" if base == "int" else "a number"
        raise InputError(f"{key} must be {kind}, got {_describe(value)}")
    if base == "int":
        if isinstance(value, float):
            if not is_finite_number(value) or value != int(value):
                raise InputError(f"{key} must be a whole number, got {value!r}")
            return int(value)
        return value
    if isinstance(value, int) and abs(value) > MAX_VALUE:
        # float() would round 2**53 + 1 down to 2**53 and let it past the cap checked later
        raise InputError(f"{key} = {value} is beyond what zerosim models (at most 2**53 = {MAX_VALUE})")
    try:
        return float(value)
    except OverflowError:
        raise InputError(f"{key} = {value} is too large") from None


def check_keys(table: str, keys: Iterable[str], origin: str) -> None:
    allowed = allowed_keys(table)
    moved = list(LEGACY_TRAINING_KEYS) if table == "training" else []
    for key in keys:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed + moved, n=1)
            hint = ""
            if close:  # a moved key is suggested in its new table
                suggestion = ".".join(canonical_key(table, close[0])) if close[0] in moved else close[0]
                hint = f"; did you mean {suggestion!r}?"
            raise InputError(
                f"{origin}: unknown key {table}.{key}{hint} (allowed in [{table}]: "
                f"{', '.join(allowed)})")


def read_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    text = read_text(path, "scenario file")
    try:
        return parse_toml(text, str(path))
    except TOMLDecodeError as exc:
        raise InputError(f"{path}: TOML syntax error: {exc}") from None


def split_tables(raw: dict[str, Any], origin: str) -> dict[str, dict[str, Any]]:
    """The three tables of a parsed scenario, each a fresh dict; anything else is an error."""
    for name, value in raw.items():
        if name not in TABLES:
            raise InputError(
                f"{origin}: unknown table [{name}] (allowed: "
                f"{', '.join('[' + t + ']' for t in TABLES)})")
        if not isinstance(value, dict):
            raise InputError(f"{origin}: {name} must be a table [{name}], got {_describe(value)}")
    if "model" not in raw:
        raise InputError(f"{origin}: no [model] table (give params = Ψ or a transformer shape)")
    tables = {name: dict(raw.get(name, {})) for name in TABLES}
    relocate_legacy(tables, origin)
    for name, table in tables.items():
        check_keys(name, table, origin)
    return tables


def relocate_legacy(tables: dict[str, dict[str, Any]], origin: str) -> None:
    """Move the [training] keys that are [parallelism]'s now (LEGACY_TRAINING_KEYS) to their
    table, in place; one key given in both is refused, whatever the values."""
    training, parallelism = tables["training"], tables.setdefault("parallelism", {})
    for key in LEGACY_TRAINING_KEYS:
        if key in training:
            if key in parallelism:
                raise InputError(f"{origin}: training.{key} and parallelism.{key} are both given "
                                 f"(the first is the old spelling of the second): keep one")
            parallelism[key] = training.pop(key)


def parse_override(text: str, flag: str = "--set") -> tuple[str, str, Any]:
    """'table.key=value' -> (table, key, value); value parsed as TOML, else taken as a string.
    `flag` names where the text came from in errors (--set, or --vary for one of its values)."""
    lhs, sep, rhs = text.partition("=")
    table, dot, key = lhs.strip().partition(".")
    if not sep or not dot or not key or "." in key:
        raise InputError(f"{flag} {text!r}: expected table.key=value, e.g. {flag} cluster.nodes=16")
    if table not in TABLES:
        raise InputError(f"{flag} {text!r}: unknown table {table!r} (allowed: {', '.join(TABLES)})")
    table, key = canonical_key(table, key)  # the old spelling of a [parallelism] key
    check_keys(table, [key], f"{flag} {text!r}")
    rhs = rhs.strip()
    if not rhs:
        raise InputError(f"{flag} {text!r}: no value after '='")
    try:
        parsed = parse_toml(f"value = {rhs}", f"{flag} {table}.{key}")
        value = parsed["value"] if list(parsed) == ["value"] else rhs
    except TOMLDecodeError:
        value = rhs  # a bare word such as bf16 or path/to/config.json
    if has_date(value):
        raise InputError(f"{flag} {text!r}: {rhs} is a TOML date or time, which no key takes "
                         f"(quote it for text: '{rhs}')")
    return table, key, value


def _resolve_cluster(table: dict[str, Any], base_dir: Path | None) -> tuple[ClusterConfig, Any]:
    """The cluster, and the calibration profile it names (None when it names none), relative to
    base_dir (None: as given, from the working directory). Precedence: preset < profile < the
    scenario's own keys."""
    gpu = _coerce("cluster.gpu", table.get("gpu", DEFAULT_GPU), "str")
    if gpu not in GPU_PRESETS:
        raise InputError(f"cluster.gpu = {gpu!r} is not a preset; known: {', '.join(GPU_PRESETS)}")
    profile, measured = None, {}
    if table.get("profile"):  # "" means none (zero-real calibrate, writing the profile, sets it)
        from zerosim.scenario.profile import load_profile

        path = Path(_coerce("cluster.profile", table["profile"], "str"))
        profile = load_profile(path if base_dir is None or path.is_absolute() else base_dir / path)
        impl = _coerce("cluster.collective_impl", table.get("collective_impl", "native"), "str")
        measured = profile.cluster_numbers(impl)
    preset = {k: v for k, v in GPU_PRESETS[gpu].items() if v is not None}  # None: the default
    cluster = ClusterConfig(**_typed("cluster", {**preset, **measured, **table, "gpu": gpu}))
    if profile is not None:
        check_profile_fits(profile, cluster)
    return cluster, profile


def check_profile_fits(profile, cluster: ClusterConfig) -> None:
    """A profile prices the box it was measured on: one from a CPU box under an H100 scenario
    (or an H100's under an A100's, gloo's under NCCL's) would be silently wrong by orders of
    magnitude. Refused in one line naming both."""
    p = profile.provenance if isinstance(profile.provenance, dict) else {}
    device, hardware, backend = p.get("device"), str(p.get("hardware", "")), p.get("backend")
    gpu_box = cluster.generation is not None
    ran_on = preset_of_hardware(hardware) if device == "cuda" else None
    wrong = None
    if device == "cpu" and gpu_box or device == "cuda" and not gpu_box:
        wrong = f"was measured on {device} ({hardware})"
    elif ran_on is not None and ran_on != cluster.gpu:  # a GPU the catalogue lacks: its own
        wrong = f"was measured on {hardware}, an {ran_on}"
    elif backend is not None and backend != cluster.collective_library:
        wrong = f"measured {backend}'s collectives"
    if wrong is not None:
        raise InputError(f"cluster.profile = {profile.path} {wrong}, but the scenario's cluster "
                         f"is {cluster.gpu} with {cluster.collective_library}: calibrate on "
                         f"such a box (zero-real calibrate), or set cluster.gpu and "
                         f"cluster.collective_library to the profile's")


def _resolve_model(table: dict[str, Any], base_dir: Path) -> ModelConfig:
    if "hf_config" in table:
        from zerosim.scenario.hf import read_hf_config
        from zerosim.scenario.hf_cache import resolve_hf_config

        given = _coerce("model.hf_config", table["hf_config"], "str")
        path = resolve_hf_config(given, base_dir)  # a model id in the local cache, else a path
        shape = read_hf_config(path, None if path == base_dir / given else given.split("@")[0])
        table = {**shape, **table}  # explicit [model] keys win over the file's
    return ModelConfig(**_typed("model", table))


def _typed(table: str, values: dict[str, Any]) -> dict[str, Any]:
    types = _field_types(TABLES[table])
    return {k: _coerce(f"{table}.{k}", v, types[k]) for k, v in values.items()}


def build_scenario(tables: dict[str, dict[str, Any]], *, base_dir: Path, source: str = "",
                   cli_hf_config: bool = False, cli_profile: bool = False) -> Scenario:
    """Scenario from already-merged tables (keys checked). hf_config and profile paths resolve
    against base_dir, or the working directory when the path came from the command line. The
    old [training] spelling of a [parallelism] key is taken here too (relocate_legacy)."""
    tables = {name: dict(tables.get(name, {})) for name in TABLES}  # a table left out: defaults
    relocate_legacy(tables, source or "scenario")
    model = _resolve_model(tables["model"], Path.cwd() if cli_hf_config else base_dir)
    training_table = dict(tables["training"])
    if "seq_len" not in training_table and not model.is_bare and model.max_seq_len is not None:
        training_table["seq_len"] = model.max_seq_len
    training = TrainingConfig(**_typed("training", training_table))
    cluster, profile = _resolve_cluster(tables["cluster"], None if cli_profile else base_dir)
    parallelism = ParallelismConfig(**_typed("parallelism", tables["parallelism"]))
    return Scenario(model=model, cluster=cluster, training=training, parallelism=parallelism,
                    variation=VariationConfig(**_typed("variation", tables["variation"])),
                    source=source, profile=profile,
                    default_notes=tuple(default_notes(tables, model, training, cluster,
                                                      profile)))


def load_scenario(path: str | Path, overrides: Iterable[str] = (),
                  deepspeed: str | Path | None = None, notes: list[str] | None = None,
                  launch: tuple[str, str | Path] | None = None) -> Scenario:
    """Read a scenario file, apply a launch config (`launch`: (kind, path), kind one of
    launch.KINDS) or a DeepSpeed config, then `--set` overrides, validate. What a launch or
    DeepSpeed config contributed is described in `notes` (for the CLI to show)."""
    path = Path(path)
    tables = split_tables(read_toml(path), str(path))
    launched = None if launch is None else _apply_launch(tables, launch, deepspeed, notes)
    if launched is not None:
        deepspeed = launched.deepspeed
    if deepspeed is not None:
        from zerosim.scenario.deepspeed import TRAIN_BATCH, derive_batch, read_deepspeed_config

        precision = tables["training"].get("precision", TrainingConfig.precision)
        if not isinstance(precision, str) or precision not in BYTES_PER_ELEMENT:
            precision = TrainingConfig.precision  # the scenario's own error is raised below
        keys = read_deepspeed_config(deepspeed, precision=precision, notes=notes,
                                     origin=_named(deepspeed, launched))
        scenario_training = dict(tables["training"])  # before the ds_config's keys
        train_batch = keys.pop(TRAIN_BATCH, None)
        for key, value in keys.items():
            tables["parallelism" if key in PARALLELISM_KEYS else "training"][key] = value
    from_cli = set()
    for text in overrides:
        table, key, value = parse_override(text)
        tables[table][key] = value
        from_cli.add((table, key))
    if deepspeed is not None:
        _drop_unused_fetch_knobs(tables, keys, scenario_training, from_cli, notes)
    if launched is not None:
        _settle(tables, launched, from_cli, path, notes)
    scenario = build_scenario(tables, base_dir=path.parent, source=str(path),
                              cli_hf_config=("model", "hf_config") in from_cli,
                              cli_profile=("cluster", "profile") in from_cli)
    if deepspeed is not None and train_batch is not None:
        # DeepSpeed derives the micro-batch or the steps the run leaves open from
        # train_batch_size, or checks them: only now is the world (after --set) known.
        total, open_keys = train_batch
        open_keys = {key for key in open_keys if ("training", key) not in from_cli}
        t = scenario.training
        micro, steps = derive_batch(
            total, None if "micro_batch" in open_keys else t.micro_batch,
            None if "gradient_accumulation" in open_keys else t.gradient_accumulation,
            scenario.world_size, _named(deepspeed, launched))
        if (micro, steps) != (t.micro_batch, t.gradient_accumulation):
            tables["training"].update(micro_batch=micro, gradient_accumulation=steps)
            scenario = build_scenario(tables, base_dir=path.parent, source=str(path),
                                      cli_hf_config=("model", "hf_config") in from_cli,
                                      cli_profile=("cluster", "profile") in from_cli)
        if notes:
            notes[-1] += (f"; micro_batch={micro}, gradient_accumulation={steps} from "
                          f"train_batch_size={total} on {scenario.world_size} ranks")
    return scenario


def _apply_launch(tables: dict, launch: tuple[str, str | Path], deepspeed, notes):
    """The launch config's keys over the scenario's tables (in place), its note in `notes`;
    the Launch comes back for what needs the world (settle) and the ds_config it names."""
    from zerosim.scenario.launch import apply

    if deepspeed is not None:
        raise InputError(f"--deepspeed and --{launch[0]} both describe the run: give one")
    launched = _read_launch(*launch)
    apply(tables, launched)
    if notes is not None:
        notes.append(launched.note())
    return launched


def _read_launch(kind: str, path: str | Path):
    """The launch config of `kind` (one of launch.KINDS) at `path`, read by its reader."""
    if kind == "accelerate":
        from zerosim.scenario.accelerate import read_accelerate_config as read
    elif kind == "torchtitan":
        from zerosim.scenario.torchtitan import read_torchtitan_config as read
    elif kind == "megatron":
        from zerosim.scenario.megatron import read_megatron_args as read
    else:
        raise ValueError(f"launch config kind {kind!r} is none of accelerate, torchtitan, megatron")
    return read(Path(path))


def _named(deepspeed: str | Path | dict, launched) -> str:
    """How errors name a ds_config: its path, or the launch config that described it."""
    return f"{launched.origin} deepspeed_config" if isinstance(deepspeed, dict) else str(deepspeed)


def _settle(tables: dict, launched, from_cli: set, path: Path, notes: list[str] | None) -> None:
    """The launch config's keys that need the world size (a global batch, a shard degree left
    to the ranks left), once --set has fixed the cluster, into `tables`; a launch config that
    names its model without a shape needs one by now."""
    from zerosim.scenario.launch import Layout, check_sized, settle

    check_sized(tables, launched)
    cluster, _ = _resolve_cluster(tables["cluster"],
                                  None if ("cluster", "profile") in from_cli else path.parent)
    par, training = tables["parallelism"], tables["training"]
    layout = [_coerce(f"{table}.{key}", where.get(key, getattr(cls, key)), "int")
              for table, where, cls, key in (
                  ("parallelism", par, ParallelismConfig, "tensor_parallel"),
                  ("parallelism", par, ParallelismConfig, "pipeline_parallel"),
                  ("training", training, TrainingConfig, "micro_batch"),
                  ("training", training, TrainingConfig, "gradient_accumulation"))]
    if min(layout) < 1:
        return  # refused in its own words when the scenario is built
    settled = settle(launched, Layout(cluster.world_size, *layout), from_cli)
    for dotted, value in settled.items():
        table, key = dotted.split(".")
        tables[table][key] = value
    if notes is not None and settled:
        shown = ", ".join(f"{k}={v}" for k, v in settled.items())  # whole numbers
        notes.append(f"from {launched.origin}, on {cluster.world_size} ranks: {shown}")


def _drop_unused_fetch_knobs(tables: dict, taken: dict, scenario_training: dict,
                             from_cli: set, notes: list[str] | None) -> None:
    """A ds_config's stage3_* fetch keys steer DeepSpeed's ZeRO-3; under a framework that gathers
    whole units they mean nothing, so they are left out with a note: the scenario's own value
    comes back where it gave one, and that or --set's is refused there in one line."""
    name = tables["training"].get("framework", TrainingConfig.framework)
    framework = REGISTRY.get(name) if isinstance(name, str) else None
    if framework is None or framework.fetch_defaults is not None:
        return
    dropped = [key for key in FETCH_KNOBS
               if key in taken and ("training", key) not in from_cli]
    for key in dropped:
        if key in scenario_training:
            tables["training"][key] = scenario_training[key]
        else:
            del tables["training"][key]
    if dropped and notes is not None:
        notes.append(f"ignored the ds_config's {', '.join(dropped)}: training.framework = "
                     f"{name!r} gathers whole units, not module by module")
