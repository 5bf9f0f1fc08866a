"""The ZeRO paper's accounting (`framework = "zero"`, the default): model states, activations and
the stages' buffers, nothing a particular framework adds."""

from __future__ import annotations

from zerosim.contract import PASSES
from zerosim.frameworks.base import Framework


class Zero(Framework):
    """The paper's model: every stage, offload and ZeRO++ expressible, no framework's extras."""

    name = "zero"
    runs_in_zero_real = True  # zero_real's stages are the paper's

    def loss_blocks(self, m, t) -> dict[str, list[int]]:
        """None: the paper's accounting keeps only the log-probabilities activations() counts."""
        return {phase: [] for phase in PASSES}
