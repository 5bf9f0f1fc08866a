"""How Collectives waits for a native collective: gloo between processes on CPU, started
asynchronously and polled through the work's future (never work.is_completed(), which can deadlock
against gloo's thread under the profiler), then work.wait(), which raises the collective's error;
NCCL, the ring, the fake process group and a single rank as torch.distributed waits. No process
group: torch.distributed's collective is replaced by a recording stand-in."""

import pytest

torch = pytest.importorskip("torch")

from zerosim.contract import ALL_REDUCE, COLLECTIVE_IMPLS

NATIVE, RING = COLLECTIVE_IMPLS


class Future:
    """Done after `pending` polls."""

    def __init__(self, log: list, pending: int):
        self.log, self.pending = log, pending

    def done(self) -> bool:
        self.log.append("done?")
        self.pending -= 1
        return self.pending < 0


class Work:
    """gloo's asynchronous work, as far as waiting goes; `error` is what its wait() raises."""

    def __init__(self, log: list, pending: int = 2, error: Exception | None = None):
        self.log, self.future, self.error = log, Future(log, pending), error

    def get_future(self) -> Future:
        return self.future

    def is_completed(self) -> bool:
        raise AssertionError("is_completed() holds the GIL while it takes the work's lock")

    def wait(self) -> None:
        self.log.append("wait")
        if self.error is not None:
            raise self.error


def test_a_polled_wait_asks_the_future_until_done_then_waits_once():
    from zero_real.parts.collectives import wait_yielding

    log: list = []
    wait_yielding(Work(log, pending=2))
    assert log == ["done?", "done?", "done?", "wait"]


def test_a_polled_wait_raises_what_wait_raises():
    """gloo's timeout (or a peer's error) completes the work: the polling ends and wait() raises."""
    from zero_real.parts.collectives import wait_yielding

    log: list = []
    with pytest.raises(RuntimeError, match="Timed out"):
        wait_yielding(Work(log, pending=0, error=RuntimeError("Timed out waiting 5000ms")))
    assert log == ["done?", "wait"]


def _all_reduce_through(monkeypatch, mode: str, world_size: int, backend: str, device="cpu"):
    """Collectives(mode, ...).all_reduce of 4 floats with dist.all_reduce recording its calls:
    (the calls' keyword arguments, the wait log, the recorded comm events)."""
    from zero_real.parts import collectives
    from zero_real.parts.measure import Recorder

    calls, log = [], []

    def all_reduce(t, **kwargs):
        calls.append(kwargs)
        return Work(log, pending=1) if kwargs.get("async_op") else None

    monkeypatch.setattr(collectives.dist, "all_reduce", all_reduce)
    recorder = Recorder(0, torch.device("cpu"), profile_memory=False)
    comm = collectives.Collectives(mode, 0, world_size, recorder, backend, timeout_s=5)
    comm.all_reduce(torch.zeros(4, device=device), name="bucket 3")
    return calls, log, [(e["name"], e["op"], e["bytes"]) for e in recorder.events]


def test_native_gloo_between_processes_is_started_async_and_polled(monkeypatch):
    calls, log, events = _all_reduce_through(monkeypatch, NATIVE, 2, "gloo")
    assert calls == [{"async_op": True}]
    assert log == ["done?", "done?", "wait"]
    assert events == [("bucket 3", ALL_REDUCE, 16)]  # recorded as a blocking one is


@pytest.mark.parametrize("backend, world_size, device", [
    ("nccl", 2, "cpu"), ("fake", 2, "cpu"), ("gloo", 2, "meta")])
def test_nccl_the_fake_group_and_non_cpu_tensors_wait_as_torch_does(monkeypatch, backend,
                                                                     world_size, device):
    calls, log, events = _all_reduce_through(monkeypatch, NATIVE, world_size, backend, device)
    assert calls == [{}] and log == []
    assert events == [("bucket 3", ALL_REDUCE, 16)]


def test_a_single_rank_calls_no_collective(monkeypatch):
    calls, log, events = _all_reduce_through(monkeypatch, NATIVE, 1, "gloo")
    assert calls == [] and log == [] and events == [("bucket 3", ALL_REDUCE, 16)]


def test_only_native_gloo_on_cpu_between_processes_polls():
    from zero_real.parts.collectives import Collectives

    cpu = torch.zeros(1)
    assert Collectives(NATIVE, 0, 2, None, "gloo", timeout_s=5).polls(cpu)
    assert not Collectives(RING, 0, 2, None, "gloo", timeout_s=5).polls(cpu)
    assert not Collectives(NATIVE, 0, 1, None, "gloo", timeout_s=5).polls(cpu)
    assert not Collectives(NATIVE, 0, 2, None, "nccl", timeout_s=5).polls(cpu)
    assert not Collectives(NATIVE, 0, 2, None, "fake", timeout_s=5).polls(cpu)
    assert not Collectives(NATIVE, 0, 2, None, "gloo", timeout_s=5).polls(torch.zeros(1, device="meta"))
