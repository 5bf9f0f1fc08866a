"""The simulated cluster: nodes x GPUs, each GPU with an outgoing link per tier, on simpy.

`env.now` is seconds. A link is a resource that transfers share: every transfer in flight on a link
gets an equal share of its bandwidth (processor sharing, the flow-level model of network simulators
such as SimGrid), recomputed whenever a transfer starts or ends. So a ZeRO-3 prefetch all-gather
that runs during a reduce-scatter slows both, and neither is charged twice.

Latency is not a transfer: it is paid as a plain delay before the bytes move (Thakur et al. 2005,
the α of the α-β model), so it takes no bandwidth from anyone.
"""

from __future__ import annotations

import simpy

from zerosim.scenario.config import Scenario

INTRA, INTER = "intra", "inter"
D2H, H2D, CPU_ADAM, NVME_READ, NVME_WRITE = "d2h", "h2d", "cpu_adam", "nvme_read", "nvme_write"
HOOKS = "hooks"
HOST_OPS = (D2H, H2D, CPU_ADAM, NVME_READ, NVME_WRITE, HOOKS)
"""Host operations (sim/offload.py), each over a link of the rank's own of that name: its host
link in each direction, its CPU cores (in elements per second), its share of the node's drives;
and the host thread that runs a framework's module hooks (sim/stages/fetch.py), whose "size"
is the seconds they take."""


def host_rates(scenario: Scenario) -> dict[str, float]:
    """Each host link's rate for one rank (bytes/s; the CPU step: elements/s; NVMe unset: 1,
    never used: family.check_scenario refuses nvme offload without its rates)."""
    h = scenario.cluster.host
    def unset(rate):
        return 1.0 if rate is None else rate

    return {D2H: h.d2h_bytes_per_s, H2D: h.h2d_bytes_per_s, CPU_ADAM: h.adam_elements_per_s,
            NVME_READ: unset(h.nvme_read_bytes_per_s), NVME_WRITE: unset(h.nvme_write_bytes_per_s),
            HOOKS: 1.0}

# Transfers finishing together with the timed one: fewer bytes than this fraction of them remain
# (float round-off only).
_DONE_FRACTION = 1e-9


class Link:
    """One direction of one GPU's link in one tier, shared fairly by the transfers on it."""

    def __init__(self, env: simpy.Environment, name: str, bandwidth_bytes_per_s: float,
                 latency_s: float) -> None:
        self.env = env
        self.name = name
        self.bandwidth_bytes_per_s = bandwidth_bytes_per_s
        self.latency_s = latency_s
        self._remaining: dict[simpy.Event, list[float]] = {}  # done event -> [left, total]
        self._updated_s = env.now
        self._timer_token: object | None = None

    def transfer(self, size_bytes: float) -> simpy.Event:
        """An event that fires when size_bytes have crossed this link."""
        done = self.env.event()
        if size_bytes <= 0:
            return done.succeed()
        self._advance()
        self._remaining[done] = [float(size_bytes), float(size_bytes)]
        self._schedule()
        return done

    def _advance(self) -> None:
        elapsed_s = self.env.now - self._updated_s
        if elapsed_s > 0 and self._remaining:
            moved = elapsed_s * self.bandwidth_bytes_per_s / len(self._remaining)
            for left_total in self._remaining.values():
                left_total[0] -= moved
        self._updated_s = self.env.now

    def _schedule(self) -> None:
        """One timer for the transfer that will finish first at the current share."""
        if not self._remaining:
            self._timer_token = None
            return
        share = self.bandwidth_bytes_per_s / len(self._remaining)
        first = min(self._remaining, key=lambda done: self._remaining[done][0])
        token = self._timer_token = object()
        timer = self.env.timeout(max(self._remaining[first][0], 0.0) / share)
        timer.callbacks.append(lambda _event: self._on_timer(token, first))

    def _on_timer(self, token: object, first: simpy.Event) -> None:
        if token is not self._timer_token:
            return  # a transfer started or ended since: a newer timer is in charge
        self._advance()
        for done, (left, total) in list(self._remaining.items()):
            if done is first or left <= total * _DONE_FRACTION:
                del self._remaining[done]
                done.succeed()
        self._schedule()


class Cluster:
    """nodes x gpus_per_node ranks; rank r lives on node r // gpus_per_node. Each rank owns one
    outgoing link per tier; only the ranks being simulated get link objects (one representative
    rank stands for all of a uniform cluster)."""

    def __init__(self, env: simpy.Environment, scenario: Scenario, ranks: list[int] | None = None):
        hardware, v = scenario.cluster.hardware, scenario.variation
        self.env = env
        tiers = {INTRA: hardware.intra, INTER: hardware.inter}
        self.ranks = list(range(scenario.world_size)) if ranks is None else list(ranks)
        self.links: dict[tuple[int, str], Link] = {}
        for rank in self.ranks:
            factor = v.link_bandwidth_factor if rank in v.degraded else 1.0
            for name, tier in tiers.items():
                # no latency of its own (None): every NCCL phase carries the tuner's
                latency_s = 0.0 if tier.latency_s is None else tier.latency_s
                self.links[rank, name] = Link(env, f"rank{rank}.{name}",
                                              tier.bandwidth_bytes_per_s * factor, latency_s)
            for name, rate in host_rates(scenario).items():  # offload's host operations
                self.links[rank, name] = Link(env, f"rank{rank}.{name}", rate, 0.0)

    def link(self, rank: int, tier: str) -> Link:
        return self.links[rank, tier]
