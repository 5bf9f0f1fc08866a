"""The ZeRO paper's accounting (`framework = "zero"`, the default): model states, activations and
the stages' buffers, nothing a particular framework adds."""

from __future__ import annotations

from zerosim.contract import PASSES
from zerosim.frameworks.base import REST, TOKEN, Framework

HOOKED_STAGES = (0, 1, 2)
"""zero_real's stages with a hook on each parameter's gradient (register_post_accumulate_grad_hook,
zero_real/stages/replicated.py); ZeRO-3 reduces per unit, after its backward (zero3.py)."""


class Zero(Framework):
    """The paper's model: every stage, offload and ZeRO++ expressible, no framework's extras."""

    name = "zero"
    runs_in_zero_real = True  # zero_real's stages are the paper's

    def loss_blocks(self, m, t) -> dict[str, list[int]]:
        """None: the paper's accounting keeps only the log-probabilities activations() counts."""
        return {phase: [] for phase in PASSES}

    def gradient_hooks(self, m, t, stage: int) -> list[int] | None:
        """zero_real's modules (zero_real/parts/model.py): per block a norm before attention
        and before the MLP (LayerNorm's weight and bias, RMSNorm's weight), the fused QKV and the
        output projection, two linears (GELU) or three (SwiGLU), each with a bias where the
        model has them; the embedding's token and learned position matrices; the head's final
        norm and, untied, its matrix. A tied matrix is used twice and its hook fires twice:
        once in the head's backward (gradient_waiting), once in the embedding's."""
        if stage not in HOOKED_STAGES or m.is_bare:
            return None
        per_linear = 2 if m.bias else 1
        norm = 2 if m.norm_biased else 1
        mlp = 2 if m.mlp == "gelu" else 3
        attention = (2 if m.qkv_biased else 1) + per_linear + (2 * norm if m.qk_norm else 0)
        embedding = 1 + (1 if m.position == "learned" else 0)
        head = norm + 1  # the untied matrix, or the tied one's first use
        return [embedding] + [m.layer_norms * norm + attention + mlp * per_linear] * m.layers + [
            head]

    def gather_buffers(self, m, t, stage: int) -> list[list[str]] | None:
        """zero_real's ZeRO-3 (zero_real/stages/zero3.py) keeps a flat buffer per parameter
        group and gathers and reduce-scatters each on its own: the token matrix and the learned
        positions apart, each block, the head (final norm and an untied matrix); a tied head
        gathers the token matrix again (its gradient goes with the embedding's)."""
        if stage != 3 or m.is_bare:
            return None
        embedding = [TOKEN] + ([REST] if m.position == "learned" else [])
        head = [REST] + ([TOKEN] if m.tied_embeddings else [])
        return [embedding] + [[REST]] * m.layers + [head]
