"""Memory mechanisms priced: the bytes a calibration profile's measured or derived mechanisms
(zerosim.calibration.fit_memory) add beyond the analytic model, at a scenario's counts (tokens,
logits, norms, the attention's elements and scores), by the StepShape term each joins.

In the analytic layer because the memory model's cap check (memory.check_scale) and the step's
shape (sim/costs.memory_terms) both ask it; it reads the profile the scenario carries.
"""

from __future__ import annotations

from zerosim.analytic.model import gather_units, grad_bytes_per_element, gradient_units
from zerosim.contract import STAGE2_LIVE_BUCKETS
from zerosim.frameworks import framework_of
from zerosim.scenario.profile_schema import RECORD_DTYPE_OF
from zerosim.parallel.mesh import mesh_of
from zerosim.parallel.tensor import rank_model
from zerosim.units import BYTES_PER_ELEMENT, FP32_BYTES, mib_to_bytes


# The memory mechanisms a profile prices (zerosim.calibration.fit_memory), and the StepShape term
# each one's bytes join: activations (kept from forward to backward), residue (held from the end
# of backward through the step), workspace (backward's transient), optimizer_per_element (the
# optimizer step's transient per element of its shard), bucket_pool (ZeRO-2's bucket buffers
# kept from step to step), last_unit_kept (ZeRO-3's last unit, gathered from its forward through
# its backward), tied_grad_kept (ZeRO-3's tied matrix's whole gradient, from the head's backward
# to the embedding's).
MEMORY_MECHANISMS = {
    "loss_backward": "workspace", "optimizer_grad": "optimizer_per_element",
    "optimizer_step": "optimizer_per_element",
    "norm_saved": "activations", "attention_saved": "activations", "saved_ids": "activations",
    "math_attention_batch1": "activations",
    "head_kept": "residue",
    "bucket_pool": "bucket_pool", "last_unit_kept": "last_unit_kept",
    "tied_grad_kept": "tied_grad_kept",
}
TERMS = ("activations", "residue", "workspace", "optimizer_per_element", "bucket_pool",
         "last_unit_kept", "tied_grad_kept")


def mechanism_counts(scenario, stage: int) -> dict[str, dict[str, float]]:
    """What each mechanism's bytes go by in this scenario: its fit's `per` names, `times` the
    copies of it a step holds (default 1), `fixed` whether its fixed bytes count (default 1;
    the optimizer's per element alone: StepShape multiplies by the shard; its step's
    temporaries are one optimizer's at a time, at stage 3 one per gather unit, zero_real's
    stages/zero3.py, so the largest unit's shard over the whole shard) and `counted` the bytes
    per unit the analytic model already counts (only the excess is added; never less than 0)."""
    m, t = rank_model(scenario), scenario.training
    w, b, s = BYTES_PER_ELEMENT[t.precision], t.micro_batch, t.seq_len
    tokens = b * s
    layer_qk = (m.layers * tokens * (m.q_width + m.n_kv_heads * m.head_dim)
                * BYTES_PER_ELEMENT[t.compute_dtype]  # activations: autocast's dtype
                if b == 1 and not t.flash_attention else 0)
    # zero_real's own stages (a framework that runs in it). ZeRO-2's pool: whole bucket buffers
    # in the training dtype (zero_real allocates bucket_elements each), one where one bucket
    # holds the whole gradient; with two buckets or more, whether two ever fill at once depends
    # on the hooks' order over the layout, and STAGE2_LIVE_BUCKETS, the most, is counted (review:
    # a 2-bucket layout whose hooks arrive in order pooled one buffer, 314,572 bytes held
    # against 629,144 here). ZeRO-3: its last gather unit, and a tied matrix's gradient.
    own = framework_of(t).runs_in_zero_real
    bucket = mib_to_bytes(t.reduce_bucket_MiB)
    buckets = -(-w * sum(gradient_units(m)) // bucket)
    pool = bucket * min(STAGE2_LIVE_BUCKETS, buckets) if own and stage == 2 else 0
    last_unit = w * gather_units(m)[-1] if own and stage == 3 else 0
    # The tied gradient in the gradient's dtype: zero_real reduces in the parameters' own
    # (preflight refuses reduce_dtype = "fp32"), so fp32 here extends its code, unmeasured.
    grad = grad_bytes_per_element(t, stage)
    tied = grad * m.vocab * m.hidden if own and stage == 3 and m.tied_embeddings else 0
    one_optimizer = 1.0
    if stage == 3:
        n = mesh_of(scenario, stage).dp_shard
        one_optimizer = (max(-(-u // n) for u in gradient_units(m))
                         / -(-sum(gradient_units(m)) // n))
    return {
        "loss_backward": {"logit": tokens * m.vocab},
        "optimizer_grad": {"element": 1, "fixed": 0},
        "optimizer_step": {"element": one_optimizer, "fixed": 0},
        "norm_saved": {"token": tokens, "token_hidden": tokens * m.hidden,
                       "times": 2 * m.layers + 1},  # two per block and the final one
        "attention_saved": {  # Korthikanti's Q, K, V and softmax output (or flash's row stats)
            "qkv_element": tokens * (m.q_width + 2 * m.n_kv_heads * m.head_dim),
            "score": b * m.heads * s * s, "row": b * m.heads * s, "times": m.layers,
            "counted": {"qkv_element": w, "score": 0 if t.flash_attention else w,
                        "row": FP32_BYTES if t.flash_attention else 0}},
        "saved_ids": {"token": tokens, "position": s if m.position == "learned" else 0},
        "math_attention_batch1": {"layer_token_qk_bytes": layer_qk},
        "head_kept": {"token_hidden_bytes": tokens * m.hidden * w, "token": tokens},
        "bucket_pool": {"pool_bytes": pool},  # fixed_bytes 0 (fit_memory.DERIVED)
        "last_unit_kept": {"unit_bytes": last_unit},
        "tied_grad_kept": {"matrix_bytes": tied},
    }


def mechanism_terms(scenario, stage: int) -> dict[str, float]:
    """Bytes beyond the analytic model, by StepShape term, from the memory mechanisms the
    profile measured or derived (fit_memory) at this scenario's counts; zeros without a profile
    or for a bare-Ψ model. A mechanism measured on another norm or attention kernel than the
    scenario's adds nothing, nor one measured in another precision, nor the loss's backward
    where the framework already holds its buffers (Framework.loss_blocks).
    Every coefficient is >= 0, so is every term."""
    zero = {term: 0 for term in TERMS}
    profile, m = scenario.profile, scenario.model
    if profile is None or m.is_bare:
        return zero
    mechanisms = profile.memory_mechanisms(scenario.cluster.gpus_per_node)
    if not mechanisms:
        return zero
    counts, out = mechanism_counts(scenario, stage), dict(zero)
    t = scenario.training
    kernel = "flash" if t.flash_attention else "math"
    dtype = RECORD_DTYPE_OF[t.precision]
    framework_loss = any(framework_of(t).loss_blocks(m, t).values())
    held_by_framework = {"loss_backward"} if framework_loss else set()
    for name, entry in mechanisms.items():
        if entry.get("norm", m.norm) != m.norm or entry.get("kernel", kernel) != kernel:
            continue
        if entry.get("dtype", dtype) != dtype or name in held_by_framework:
            continue  # measured in another precision; or the framework's own loss buffers
        count, counted = counts[name], counts[name].get("counted", {})
        held = entry["fixed_bytes"] * count.get("fixed", 1) + sum(
            max(0.0, c - counted.get(unit, 0)) * count.get(unit, 0)
            for unit, c in entry["per"].items())
        out[MEMORY_MECHANISMS[name]] += count.get("times", 1) * held
    return out


__all__ = ["MEMORY_MECHANISMS", "TERMS", "mechanism_counts", "mechanism_terms"]
