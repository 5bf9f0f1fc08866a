"""Frameworks as objects: what `training.framework` changes, asked of a class, never decided by
comparing the framework's name.

| name | class | stages | what it adds to the ZeRO paper's accounting |
|---|---|---|---|
| zero | `Zero` (zero.py) | 0-3 | nothing: the paper's model (the default) |
| deepspeed | `DeepSpeed` (deepspeed.py) | 0-3 | fp32 gradient partition in the step; pinned host copy under offload |
| fsdp2 | `FSDP2` (fsdp2.py) | 2-3 | fp32 shards as master; gradients made in backward; stage 2 keeps gathered units; flat-buffer copies |
| ddp | `DDP` (ddp.py) | 0 | gradient buckets beside the gradients |
| fsdp1 | `FSDP1` (fsdp1.py) | 2-3 | as fsdp2, but the root unit kept gathered at stage 3, no per-tensor copies |

All but "zero" hold the loss's fp32 transients, and fsdp2, fsdp1 and ddp step with foreach Adam
(base.Framework). A new framework is a subclass in a module of its own, answering only what
it does differently, and a line in `REGISTRY`.
"""

from __future__ import annotations

from types import MappingProxyType

from zerosim.frameworks.base import Framework
from zerosim.frameworks.ddp import DDP
from zerosim.frameworks.deepspeed import DeepSpeed
from zerosim.frameworks.fsdp1 import FSDP1
from zerosim.frameworks.fsdp2 import FSDP2
from zerosim.frameworks.zero import Zero

REGISTRY: MappingProxyType[str, Framework] = MappingProxyType(
    {f.name: f for f in (Zero(), DeepSpeed(), FSDP2(), DDP(), FSDP1())})
FRAMEWORKS = tuple(REGISTRY)
"""The names `training.framework` takes, the default first."""


def framework_of(t) -> Framework:
    """The framework the [training] table names."""
    return REGISTRY[t.framework]
