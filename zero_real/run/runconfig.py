"""What a run is, as frozen dataclasses: what every rank needs to start (RankSetup), a training run
of one stage (RunConfig), one calibration world (CalibrationWorld). The command line builds them
once, checked (checks/preflight.py); launch.py hands them to every rank unchanged, but for the
rank's own heartbeat file."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from zerosim.contract import COLLECTIVE_IMPLS

# Ranks start from a fork server that has already imported these: paid once, not once per rank
# (on a 2-core box four ranks importing torch and sympy take seconds each).
PRELOAD = ["torch", "torch.distributed", "torch.fx.experimental.symbolic_shapes",
           "zero_real.stages", "zero_real.run.train", "zero_real.run.launch",
           "zero_real.parts.tensor_model", "zero_real.parts.pipeline"]


def start_fork_server() -> None:
    """Start the ranks' fork server now, before this process imports torch, so that it imports
    PRELOAD while the launcher does (two imports of torch at once instead of one after the
    other). Not under torchrun, which starts the processes itself. Idempotent."""
    if "RANK" in os.environ:
        return
    import multiprocessing
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
    forkserver.ensure_running()

BACKENDS = ("gloo", "nccl")
"""torch.distributed backends a run may ask for ("fake" is chosen by --fake-world-size)."""
DEFAULT_TIMEOUT_S = 30.0
"""Limit on init and on each collective. Peers of a hung rank wait this long; well under the 60 s
in which a failed run must be over (timeout, then terminate and kill: launch.KILL_GRACE_S)."""


@dataclass(frozen=True, kw_only=True)
class RankSetup:
    """How each spawned rank starts."""

    backend: str
    """"gloo", "nccl", or "fake" (one rank against torch's fake process group)."""
    nproc: int
    """Processes on this box (they share its cores)."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    fake_world_size: int | None = None
    """With backend "fake": the world the one rank pretends to be part of."""
    progress_file: str | None = None
    """This rank's heartbeat (watch.Heartbeat); set by launch for each rank."""
    progress_path: str | None = None
    """Where rank 0 appends its progress lines for the launcher to show (progress.py)."""


@dataclass(frozen=True, kw_only=True)
class RunConfig(RankSetup):
    """One stage trained for real and measured (`zero-real run`, and calibrate's memory runs)."""

    scenario: Any
    """The zerosim Scenario, its cluster being this run's world."""
    stage: int
    collectives: str = COLLECTIVE_IMPLS[0]
    steps: int = 3
    """Steps measured for memory (under the CPU memory profiler)."""
    timed_steps: int = 0
    """Steps after those, without the profiler, for timings."""
    seed: int = 0
    lr: float = 1e-3
    scenario_path: str = ""
    """The scenario file as the command line named it (portable_path)."""
    overrides: tuple[str, ...] = ()
    run_timeout_s: float | None = None
    """Limit on the whole run; None: no limit."""
    profile_memory: bool = True
    """Measure CPU memory with torch's profiler (off: faster, no memory figures on CPU)."""
    return_params: bool = False
    """Return the trained parameters (the parity tests compare them)."""


@dataclass(frozen=True, kw_only=True)
class CalibrationWorld(RankSetup):
    """What every rank of one calibration world measures (calibration/bench.py: measure_world)."""

    scenario: Any
    collective_modes: tuple[str, ...] = COLLECTIVE_IMPLS
    sizes: tuple[int, ...] = ()
    """Collective buffers, bytes (nccl-tests' whole-buffer convention)."""
    seconds_per_size: float = 0.3
    rounds: int = 1
    """Rounds of the timed microbenchmarks (bench.measure_world: each row the median over them)."""
    micro_batches: tuple[int, ...] = ()
    optimizer_elements: tuple[int, ...] = ()
    lr: float = 1e-3
    memory_scenarios: dict[tuple[int, int], Any] = field(default_factory=dict)
    """(stage, micro-batch) -> the scenario its memory run trains."""
    visit_scenarios: dict[float, Any] = field(default_factory=dict)
    """Width scale -> the scenario whose ZeRO-3 visits are replayed (grad_path.visit_scenarios)."""


def portable_path(path: str) -> str:
    """A path for provenance (measurement files, profiles), which travel to other machines: a
    relative path as it was typed; an absolute one inside the working directory relative to it,
    so that no file records this machine's folders (a home directory) for a path the user could
    have typed shorter. An absolute path elsewhere stays as given: there was nothing shorter."""
    if not os.path.isabs(path):
        return path
    try:
        relative = os.path.relpath(path)
    except (ValueError, OSError):  # another drive (Windows); no working directory
        return path
    return path if relative == os.pardir or relative.startswith(os.pardir + os.sep) else relative
