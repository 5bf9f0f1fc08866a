"""[variation]: departures from a perfectly uniform cluster (stragglers, degraded links, jitter).
Any of them makes the engine simulate more than one representative rank."""

from __future__ import annotations

from dataclasses import dataclass

from zerosim.errors import InputError
from zerosim.scenario.checks import positive as _positive


@dataclass(frozen=True, kw_only=True)
class VariationConfig:
    """[variation]: departures from a perfectly uniform cluster, for `zerosim simulate`.
    Any of them makes the engine simulate every rank instead of one representative."""

    slow_ranks: tuple[int, ...] = ()
    """Ranks whose compute is slower (stragglers), e.g. [3]."""
    slowdown: float = 1.5
    """Compute time multiplier of the slow ranks (1.5 = 50% slower)."""
    degraded_links: tuple[int, ...] = ()
    """Ranks whose outgoing links (both tiers) run at link_bandwidth_factor of nominal."""
    link_bandwidth_factor: float = 0.5
    """Bandwidth of a degraded link as a fraction of nominal."""
    jitter_pct: float = 0.0
    """Each compute interval is scaled by 1 + u * jitter_pct / 100, u uniform in [-1, 1]."""
    seed: int = 0
    """Seed of the jitter: the same scenario and seed give byte-identical results."""

    def __post_init__(self) -> None:
        _positive("variation.slowdown", self.slowdown)
        if self.slowdown < 1:
            raise InputError(f"variation.slowdown = {self.slowdown} must be >= 1 (a multiplier of "
                             f"compute time; 1 = no slowdown)")
        _positive("variation.link_bandwidth_factor", self.link_bandwidth_factor)
        if self.link_bandwidth_factor > 1:
            raise InputError(f"variation.link_bandwidth_factor = {self.link_bandwidth_factor} must "
                             f"be <= 1 (a fraction of nominal bandwidth)")
        _positive("variation.jitter_pct", self.jitter_pct, allow_zero=True)
        if self.jitter_pct >= 100:
            raise InputError(f"variation.jitter_pct = {self.jitter_pct} must be < 100 (a compute "
                             f"interval cannot shrink to nothing)")
        _positive("variation.seed", self.seed, allow_zero=True)

    @property
    def slow(self) -> frozenset[int]:
        """Ranks that really compute slower (none when slowdown is 1)."""
        return frozenset(self.slow_ranks) if self.slowdown != 1 else frozenset()

    @property
    def degraded(self) -> frozenset[int]:
        """Ranks whose links really run slower (none when the factor is 1)."""
        return frozenset(self.degraded_links) if self.link_bandwidth_factor != 1 else frozenset()

    @property
    def is_uniform(self) -> bool:
        return not self.slow and not self.degraded and self.jitter_pct == 0
