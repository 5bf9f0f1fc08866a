"""zerosim: per-rank memory and step time of DDP, ZeRO-1/2/3, FSDP2, offload and hybrid sharding
on a simulated GPU cluster.

Pure Python (numpy, simpy, plotly); never imports torch or zero_real. Its layers, lowest first
(docs/architecture.md): the foundation (contract.py, units.py, errors.py, files.py,
commandline.py); hardware/ (one record per GPU and node); frameworks/ (what each framework
holds and runs); scenario/ (what a user gives); parallel/ (the mesh); analytic/ (memory and
FLOPs in closed form); sim/ (one step, simulated); report.py; calibration/ and tradeoffs/;
cli/ (the commands); api.py (the same, for Python).

The Python API (zerosim/api.py, docs/python-api.md), loaded on first use:

    import zerosim
    scenario = zerosim.load("scenarios/llama2_7b_64gpu.toml", sets={"training.zero_stage": 3})
    zerosim.memory(scenario).table(); zerosim.simulate(scenario, stage=3).to_dict()
"""

from zerosim.version import __version__

__all__ = ["load", "memory", "simulate", "plan", "sweep", "report_page", "InputError",
           "MemoryResult", "SimulationResult", "PlanResult", "ReportPage", "Scenario",
           "__version__"]


def __getattr__(name: str):
    """The API's names, imported when first asked for (PEP 562): `import zerosim` alone stays
    as light as the commands need."""
    if name in ("load", "memory", "simulate", "plan", "sweep", "report_page", "MemoryResult",
                "SimulationResult", "PlanResult", "ReportPage"):
        from zerosim import api

        return getattr(api, name)
    if name == "InputError":
        from zerosim.errors import InputError

        return InputError
    if name == "Scenario":
        from zerosim.scenario.config import Scenario

        return Scenario
    raise AttributeError(f"module 'zerosim' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
