"""zerosim's Python API: what the commands do, for a notebook, a CI check or another tool.

    import zerosim

    s = zerosim.load("scenarios/llama2_7b_64gpu.toml", sets={"training.zero_stage": 3})
    s = zerosim.load(model={"hf_config": "config.json"}, cluster={"gpu": "H100-80GB", "nodes": 8})
    zerosim.memory(s).table()           # one row per stage: a list of flat dicts (pandas-ready)
    zerosim.simulate(s, stage=3).to_dict()
    zerosim.plan(s).to_dict()
    zerosim.sweep("scenarios/llama2_7b_64gpu.toml", {"cluster.nodes": [1, 2, 4]})
    zerosim.report_page(s, tokens="2T", price_per_gpu_hour=2.5).write("report.html")

Every function takes what the command of the same name takes and returns what its `--json`
prints, as `.to_dict()`, the same numbers (the commands call the same library); `.table()` is
the same figures as a list of flat rows; `str()` is the command's text. A scenario is always
built the way a scenario file is: a cluster named by its `gpu` gets that preset's figures, and
every value is checked (bad input raises zerosim.errors.InputError, one line naming the key).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerosim.errors import InputError
from zerosim.scenario.config import Scenario

Sets = Mapping[str, Any] | Iterable[str]


def load(source: str | Path | Mapping[str, Mapping[str, Any]] | None = None, *,
         sets: Sets = (), deepspeed: str | Path | None = None,
         accelerate: str | Path | None = None, torchtitan: str | Path | None = None,
         megatron_args: str | Path | None = None, **tables: Mapping[str, Any]) -> Scenario:
    """A scenario from a file (a path), from its tables (a dict {"model": {...}, "cluster":
    {...}, ...}) or from keyword arguments (model=..., cluster=..., training=...); `sets`
    overrides keys as `--set` does ({"training.zero_stage": 3} or ["training.zero_stage=3"]);
    `deepspeed` reads a ds_config as `--deepspeed` does, and `accelerate`, `torchtitan` and
    `megatron_args` a launch config as their flags do (one of them, with a file only). Relative
    paths in a dict or keywords (hf_config, profile) are taken from the working directory."""
    from zerosim.analytic.memory import check_scale
    from zerosim.scenario.load import build_scenario, load_scenario, parse_override, split_tables
    from zerosim.sim.device import check_device_scale

    overrides = override_texts(sets)
    if source is not None and tables:
        raise TypeError("zerosim.load: give a file or tables, as a dict or as keywords, not both")
    launches = [(kind, path) for kind, path in (("accelerate", accelerate),
                                                ("torchtitan", torchtitan),
                                                ("megatron", megatron_args)) if path is not None]
    if len(launches) > 1:
        raise TypeError("zerosim.load: give one of accelerate=, torchtitan=, megatron_args=")
    if isinstance(source, (str, Path)):
        scenario = load_scenario(source, overrides, deepspeed,
                                 launch=launches[0] if launches else None)
    else:
        if deepspeed is not None or launches:
            raise TypeError("zerosim.load: deepspeed= and the launch configs go with a "
                            "scenario file")
        raw = {name: dict(table) for name, table in dict(source or tables).items()}
        parsed = split_tables(raw, "zerosim.load")
        for text in overrides:
            table, key, value = parse_override(text, "sets")
            parsed[table][key] = value
        scenario = build_scenario(parsed, base_dir=Path.cwd(), source="(zerosim.load)")
    return check_device_scale(check_scale(scenario))


def override_texts(sets: Sets) -> list[str]:
    """`--set` texts: a mapping's values written as TOML literals (JSON's are TOML's for
    strings, numbers, booleans and arrays of them)."""
    if isinstance(sets, Mapping):
        return [f"{key}={json.dumps(value)}" for key, value in sets.items()]
    if isinstance(sets, str):
        return [sets]
    return list(sets)


@dataclass(frozen=True)
class MemoryResult:
    """`zerosim memory`: the per-rank memory of each stage, in closed form."""

    scenario: Scenario
    rows: list

    def to_dict(self) -> dict[str, Any]:
        """What `zerosim memory --json` prints."""
        from zerosim import report

        return report.memory_json(self.scenario, self.rows)

    def table(self) -> list[dict[str, Any]]:
        """One flat row per stage: its name and every number of `to_dict()`'s stage entry."""
        return [_flat(row) for row in self.to_dict()["stages"]]

    def __str__(self) -> str:
        from zerosim import report

        return report.format_memory_table(self.scenario, self.rows)


@dataclass(frozen=True)
class SimulationResult:
    """`zerosim simulate`: one simulated training step per stage (StageResult each)."""

    scenario: Scenario
    stages: list

    def to_dict(self) -> list[dict[str, Any]]:
        """What `zerosim simulate --json` prints: one object per stage."""
        return [result.as_dict() for result in self.stages]

    def table(self) -> list[dict[str, Any]]:
        """One flat row per stage (nested figures as "outer.inner" columns)."""
        return [_flat(row) for row in self.to_dict()]

    def __str__(self) -> str:
        from zerosim import report

        return report.format_simulation_table(self.scenario, self.stages)


@dataclass(frozen=True)
class PlanResult:
    """`zerosim plan`: which stage, how many GPUs and how large a model fit and run fastest."""

    result: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """What `zerosim plan --json` prints."""
        return self.result

    def table(self) -> list[dict[str, Any]]:
        """One flat row per stage of the plan."""
        return [_flat(row) for row in self.result["stages"]]

    def __str__(self) -> str:
        from zerosim.tradeoffs.plan import format_plan

        return format_plan(self.result)


def memory(scenario: Scenario) -> MemoryResult:
    """The per-rank memory of every stage the scenario's table shows."""
    from zerosim.analytic.memory import memory_table

    return MemoryResult(scenario, memory_table(scenario))


def simulate(scenario: Scenario, stage: int | None = None, *, mode: str = "auto",
             keep_events: bool = False) -> SimulationResult:
    """One training step of `stage` (default: each stage the table shows) on the simulated
    cluster; `keep_events` keeps every rank's events (for zerosim.sim.trace.chrome_trace)."""
    from zerosim.analytic.memory import table_stages
    from zerosim.sim.engine import check_steps, simulate as run

    stages = [stage] if stage is not None else list(table_stages(scenario))
    check_steps(scenario, stages, mode, keep_events)
    return SimulationResult(scenario, [run(scenario, s, mode=mode, keep_events=keep_events)
                                       for s in stages])


def plan(scenario: Scenario, gpu_memory_GiB: float | None = None, *, allow: Iterable[str] = (),
         mode: str = "auto") -> PlanResult:
    """`zerosim plan`: against `gpu_memory_GiB` per GPU (default: the cluster's hbm_GiB), with
    the schemes `allow` names ("offload", "hybrid", "zeropp", "tp", "pp")."""
    from zerosim.tradeoffs.plan import plan as run
    from zerosim.tradeoffs.plan_family import parse_allow
    from zerosim.units import GiB

    budget = gpu_memory_GiB if gpu_memory_GiB is not None else scenario.cluster.hbm_GiB
    schemes = parse_allow(allow if isinstance(allow, str) else ",".join(allow)) if allow else ()
    return PlanResult(run(scenario, round(budget * GiB), mode=mode, allow=schemes))


def sweep(scenario: str | Path, vary: Mapping[str, Iterable[Any]], *, sets: Sets = (),
          deepspeed: str | Path | None = None, jobs: int | None = 1,
          mode: str = "auto") -> list[dict[str, Any]]:
    """`zerosim sweep` of a scenario file over every combination of `vary`'s values
    ({"cluster.nodes": [1, 2, 4]}), the first key changing slowest: its rows, as its CSV and
    JSON files hold them. `jobs`: processes (default 1: in this one)."""
    from zerosim.tradeoffs.sweep import parse_vary, run_sweep

    varies = [parse_vary(f"{key}=" + ",".join(json.dumps(v) for v in values))
              for key, values in vary.items()]
    rows = run_sweep(str(scenario), varies, override_texts(sets),
                     None if deepspeed is None else str(deepspeed), jobs=jobs, mode=mode)
    try:
        return list(rows)
    finally:
        close = getattr(rows, "close", None)
        if close is not None:
            close()


@dataclass(frozen=True)
class ReportPage:
    """`zerosim report`: the page's data (what the commands' --json print, gathered) and the
    self-contained HTML page drawn from it."""

    gathered: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The data the page embeds: memory, simulate, budget, plan, the trade-off rows, notes."""
        return self.gathered["data"]

    def table(self) -> list[dict[str, Any]]:
        """One flat row per stage of the step table, with its budget where tokens were given."""
        data = self.gathered["data"]
        budgets = data["budget"] or [{} for _ in data["simulate"]]
        return [{**_flat(step), **_flat(cost, "budget.")}
                for step, cost in zip(data["simulate"], budgets)]

    def html(self) -> str:
        """The page, as `zerosim report -o` writes it."""
        from zerosim.tradeoffs.page import render

        return render(self.gathered)

    def write(self, path: str | Path) -> None:
        """The page to `path` (written whole or not at all)."""
        from zerosim.files import check_writable, write_text

        check_writable(Path(path), "path")
        write_text(Path(path), self.html(), "path")

    def __str__(self) -> str:
        return self.gathered["data"]["summary"]


def report_page(scenario: Scenario, *, tokens: int | str | None = None,
           price_per_gpu_hour: float | None = None, gpus: Iterable[int] = (),
           mode: str = "auto") -> ReportPage:
    """`zerosim report`: every table, figure and note of one scenario for one page; `tokens`
    (2 * 10**12 or "2T") adds the time to train them, their GPU-hours and, with
    `price_per_gpu_hour`, their cost; `gpus` the trade-off figures' world sizes."""
    from zerosim.tradeoffs.budget import check_price, parse_tokens
    from zerosim.tradeoffs.page import gather

    if price_per_gpu_hour is not None and tokens is None:
        raise TypeError("zerosim.report_page: price_per_gpu_hour prices a token budget: give tokens")
    check_price(price_per_gpu_hour)
    sizes = tuple(gpus)
    if any(type(g) is not int or not 1 <= g <= 2**20 for g in sizes):
        raise InputError(f"zerosim.report_page: gpus={list(sizes)!r} must be whole numbers of "
                         f"GPUs in 1..2**20")
    count = parse_tokens(str(tokens)) if tokens is not None else None
    return ReportPage(gather(scenario, tokens=count, price_per_gpu_hour=price_per_gpu_hour,
                             gpus=sizes, mode=mode))


def _flat(row: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as "outer.inner" keys; lists kept as they are."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
