"""A model's module visits as a framework that gathers module by module sees them (DeepSpeed's
ZeRO-3, frameworks/deepspeed_fetch.py), and its fetch plan for a scenario.

The module tree is a GPT's as Hugging Face and Megatron-DeepSpeed write it: the root; the
token table and learned positions; per block a container holding its norms where its layout
puts them (model.layer_norms: one before attention and MLP in parallel, one before each, or one
after each too), an attention container (Q then its norm, K then its norm, V, where the model
has Q/K norms; one QKV module where model.qkv_is_fused; then the output projection), and an
MLP container (its first matrix, the parameter-free activation, the rest);
the final norm and the head, which under tied embeddings computes with the token table. Every
module is visited (its hooks fire) and owns only its own parameters (analytic/model.
unit_modules). Forward visits the tree in pre-order; backward visits each unit's tree with its
children reversed, a container before its children, since a module's backward hook fires when
its output's gradient is ready; a block under full checkpointing first recomputes its forward.
Each visit that owns parameters takes a share of its unit's compute in proportion to them
(weights are what matmuls cost), recomputation at a third of a backward visit's.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from functools import lru_cache

from zerosim.analytic.model import in_layer, unit_modules
from zerosim.frameworks import framework_of
from zerosim.frameworks.deepspeed_fetch import FetchPlan, Visit
from zerosim.scenario.family import zeropp
from zerosim.units import mib_to_bytes

MAX_PLANNED_LAYERS = 4096
"""Beyond this many blocks no plan is walked (the planner asks of 2**36): such a model is
gathered unit by unit (fetches_by_module)."""

Tree = tuple[tuple[int, ...], list["Tree"]]


def _trees(m) -> tuple[list[Tree], list[int]]:
    """Each gather unit's module tree, and each parameter's elements by id (creation order)."""
    sizes: list[int] = []

    def own(module: list[int]) -> tuple[int, ...]:
        ids = tuple(range(len(sizes), len(sizes) + len(module)))
        sizes.extend(module)
        return ids

    modules = unit_modules(m)
    trees: list[Tree] = [((), [(own(module), []) for module in modules[0]])]  # the root
    roles = _block_roles(m)
    for block in modules[1:-1]:
        trees.append(_block_tree(roles, [own(module) for module in block]))
    norm, matrix = modules[-1]
    head = (0,) if m.tied_embeddings else None
    norm_ids = own(norm)
    trees.append(((), [(norm_ids, []), (head or own(matrix), [])]))
    return trees, sizes


QK_NORMS = ("q_norm", "k_norm")


def _block_roles(m) -> list[str]:
    """What each of a block's modules (module_parts' order, analytic/model.in_layer's layout)
    is: "norm", an attention module ("q", "k", "v" or one "qkv", "o", the Q/K norms), "mlp"."""
    qkv = ["qkv"] if m.qkv_is_fused else ["q", "k", "v"]
    attention = [*qkv, "o", *(QK_NORMS if m.qk_norm else ())]
    return in_layer(m, ["norm"], attention, ["mlp"] * (2 if m.mlp == "gelu" else 3))


def _block_tree(roles: list[str], ids: list[tuple[int, ...]]) -> Tree:
    """A block as Hugging Face's decoder layers are built: its norms where the layout puts them
    (1, 2 or 4), an attention container calling Q (then its norm), K (then its norm), V, the
    output projection (Qwen3's and Gemma-3's q_norm/k_norm run on Q's and K's outputs,
    modeling_qwen3.py Qwen3Attention.forward), and an MLP container calling its first matrix,
    the parameter-free activation, then the rest."""
    children: list[Tree] = []
    attention: dict[str, tuple[int, ...]] = {}
    mlp: list[tuple[int, ...]] = []
    for role, params in zip(roles, ids):
        if role == "norm":
            children.append((params, []))
        elif role == "mlp":
            if not mlp:
                children.append(((), []))  # its place; filled below
                mlp_at = len(children) - 1
            mlp.append(params)
        else:
            if not attention:
                children.append(((), []))
                attention_at = len(children) - 1
            attention[role] = params
    called = (["qkv", *QK_NORMS] if "qkv" in attention else ["q", "q_norm", "k", "k_norm", "v"])
    children[attention_at] = ((), [(attention[r], []) for r in [*called, "o"] if r in attention])
    children[mlp_at] = ((), [(mlp[0], []), ((), [])] + [(p, []) for p in mlp[1:]])
    return ((), children)


def _order(tree: Tree, reverse: bool) -> list[tuple[int, ...]]:
    params, children = tree
    out = [params]
    for child in (reversed(children) if reverse else children):
        out.extend(_order(child, reverse))
    return out


def _visits(unit: int, phase: str, order: list[tuple[int, ...]], sizes: list[int],
            weight: float, recompute: bool = False) -> list[Visit]:
    total = sum(sizes[p] for params in order for p in params) or 1
    return [Visit(unit, phase, params, weight * sum(sizes[p] for p in params) / total, recompute)
            for params in order]


def module_visits(m, t) -> tuple[list[Visit], list[int]]:
    """(one micro-batch's visits in order, each parameter's elements by id)."""
    trees, sizes = _trees(m)
    last = len(trees) - 1
    forward = [v for u, tree in enumerate(trees)
               for v in _visits(u, "forward", _order(tree, False), sizes, 1.0)]
    backward: list[Visit] = []
    for u in reversed(range(len(trees))):
        back = _order(trees[u], True)
        if 0 < u < last and t.activation_checkpointing == "full":
            backward += _visits(u, "backward", _order(trees[u], False), sizes, 1 / 3, True)
            backward += _visits(u, "backward", back, sizes, 2 / 3)
        else:
            backward += _visits(u, "backward", back, sizes, 1.0)
    return forward + backward, sizes


@lru_cache(maxsize=32)
def planned(m, t, framework, grad_bytes: int) -> tuple[FetchPlan, list[Visit], list[int]]:
    """The framework's fetch plan of one micro-batch of the model `m` (a rank's slice), its
    gradient buckets of reduce_bucket_MiB in elements of `grad_bytes`, with the visits and the
    parameters' sizes it was made from (the memory model and the step both ask: made once)."""
    visits, sizes = module_visits(m, t)
    bucket = max(1, mib_to_bytes(t.reduce_bucket_MiB) // grad_bytes)
    return framework.fetch_plan(t, visits, sizes, bucket), visits, sizes


def fetch_memory(m, t, framework, grad_bytes: int) -> tuple[int, int, int]:
    """(the most elements gathered at once beyond the persistent ones, the persistent ones'
    elements, the largest reduce-scatter's elements: its flush copies it whole) of
    module-by-module ZeRO-3, from its plan."""
    plan, _, sizes = planned(m, t, framework, grad_bytes)
    largest = max((e for _, e in plan.reduce_scatters), default=0)
    return plan.peak_live_elements, sum(sizes[p] for p in plan.persistent), largest


def fetches_by_module(scenario, stage: int) -> bool:
    """Whether this stage gathers module by module: ZeRO-3 under a framework that does
    (Framework.fetch_defaults), for a model given by shape of at most MAX_PLANNED_LAYERS blocks,
    of any layout of norms (one, two or four a layer, Q/K norms or none: the tree above), without
    offload, hybrid sharding, ZeRO++ or tensor parallelism (their steps are modelled on whole
    units: those stay the unit-by-unit ZeRO-3, as a larger model does)."""
    t, p, m = scenario.training, scenario.parallelism, scenario.model
    return (stage == 3 and framework_of(t).fetch_defaults is not None
            and not m.is_bare and m.layers <= MAX_PLANNED_LAYERS
            and t.optimizer_offload == "none" and t.param_offload == "none"
            and not zeropp(t, p) and not p.shard_group and p.tensor_parallel == 1)


class FetchSteps:
    """A fetch plan indexed for the step (sim/stages/fetch.py): each unit's visits per pass,
    the gathers issued at each visit, the buckets flushed at each; the hooks' host seconds at
    each visit (hook_seconds) and the fetch events the host may leave outstanding."""

    def __init__(self, plan: FetchPlan, visits: list[Visit], host_s: list[float] | None = None,
                 events_ahead: int = 0) -> None:
        self.plan, self.visits = plan, visits
        self.host_s = host_s if host_s is not None else [0.0] * len(visits)
        self._visits: dict[tuple[int, str], list[int]] = {}
        for s, visit in enumerate(visits):
            self._visits.setdefault((visit.unit, visit.phase), []).append(s)
        self._gathers: dict[int, list[int]] = {}
        for g, gather in enumerate(plan.gathers):
            self._gathers.setdefault(gather.visit, []).append(g)
        self._flushes: dict[int, list[int]] = {}
        for s, elements in plan.reduce_scatters:
            self._flushes.setdefault(s, []).append(elements)
        gates = self._gates(events_ahead)
        self.hooks_free = bisect_right(gates, -1) - 1
        """The last visit whose hooks the host may run before the GPU reaches any."""
        self.hooks_after = [bisect_right(gates, s) - 1 for s in range(len(visits))]
        """Per visit, the last visit whose hooks the host may run once the GPU reached it."""

    def _gates(self, ahead: int) -> list[int]:
        """Per visit, the visit the GPU must have reached before the host may run its hooks:
        each parameter a visit waits for (the first visit after the gather that brought it)
        records a fetch event, and before each wait beyond `ahead` outstanding the host blocks
        on the oldest (DeepSpeed's __max_ongoing_fetch_events); visits that wait for nothing
        never block. Counted without dropping the events the GPU has already passed (blocking
        on one is a no-op)."""
        unwaited: set[int] = set()
        outstanding: deque[int] = deque()
        gates, gate = [], -1
        for s, visit in enumerate(self.visits):
            for g in self.gathers_at(s):
                if not self.plan.gathers[g].prefetch:
                    unwaited.update(self.plan.gathers[g].params)
            for p in visit.params:
                if p in unwaited:
                    unwaited.discard(p)
                    if len(outstanding) > ahead:
                        gate = outstanding.popleft()  # in visit order: never earlier
                    outstanding.append(s)
            gates.append(gate)
            for g in self.gathers_at(s):
                if self.plan.gathers[g].prefetch:
                    unwaited.update(self.plan.gathers[g].params)
        return gates

    def visits_of(self, unit: int, phase: str) -> list[int]:
        return self._visits.get((unit, phase), [])

    def gathers_at(self, s: int) -> list[int]:
        return self._gathers.get(s, [])

    def flushes_at(self, s: int) -> list[int]:
        return self._flushes.get(s, [])


def fetch_steps(scenario, m, stage: int, grad_bytes: int) -> FetchSteps | None:
    """The step's plan (m: the rank's model) where it fetches module by module and the model is
    small enough to walk; None where it gathers whole units."""
    if not fetches_by_module(scenario, stage):
        return None
    t = scenario.training
    framework = framework_of(t)
    plan, visits, _ = planned(m, t, framework, grad_bytes)
    return FetchSteps(plan, visits, hook_seconds(t, framework, plan, visits),
                      framework.fetch_events_ahead)


def hook_seconds(t, framework, plan: FetchPlan, visits: list[Visit]) -> list[float]:
    """The host seconds each visit's hooks take: training.module_hook_us each where given, else
    the framework's measured figure for a visit of a module owning these non-persistent
    parameters (Framework.hook_us)."""
    if t.module_hook_us is not None:
        return [t.module_hook_us * 1e-6] * len(visits)
    return [framework.hook_us(sum(p not in plan.persistent for p in v.params)) * 1e-6
            for v in visits]
