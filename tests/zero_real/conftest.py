"""`zero-real` in-process with launching turned into a record: argument errors, pre-checks and
what a command would launch are tested without starting a process."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import CliResult, run_main


class Launched(Exception):
    """Raised where launch.spawn would have started ranks."""


@dataclass
class DryRun:
    """What `zero-real ARGV` did: refused (`result`), or reached a launch of `launched` (the
    RunConfig or CalibrationWorld spawn was given, with its rank count `nproc`)."""

    result: CliResult | None
    launched: Any = None
    nproc: int | None = None


@pytest.fixture
def dry_run(monkeypatch):
    """dry_run(*argv) -> DryRun. launch.spawn (train.py's name for it too) records its request
    and stops the command there, so no rank starts."""
    pytest.importorskip("torch")
    from zero_real import cli
    from zero_real.run import launch, train

    asked: list = []

    def spawn(fn, nproc, cfg, timeout_s=None):
        asked.append((cfg, nproc))
        raise Launched

    monkeypatch.setattr(launch, "spawn", spawn)
    monkeypatch.setattr(train, "spawn", spawn)
    monkeypatch.setattr(cli, "start_fork_server", lambda: None)  # no process, no rank

    def call(*argv) -> DryRun:
        asked.clear()
        try:
            result = run_main(cli.main, *argv)
        except Launched:
            (cfg, nproc), = asked
            return DryRun(None, cfg, nproc)
        assert not asked
        return DryRun(result)
    return call


@pytest.fixture(scope="module")
def world_of_one():
    """A gloo world of one process in this one, for a module of tests (the calibration's
    timing.until all-reduces over the ranks)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore(),
                            timeout=datetime.timedelta(seconds=30))
    yield
    dist.destroy_process_group()
