"""The host time DeepSpeed's ZeRO-3 spends per module visit (its hooks, its coordinator's fetch,
prefetch and release), measured on this box: a microbenchmark, not a training run. It asserts
nothing and fits nothing; it prints.

    pip install deepspeed   # not a dependency of the project; CPU accelerator, gloo
    DS_ACCELERATOR=cpu python bench/deepspeed_hooks.py [--modules 256] [--steps 20]

One process (world size 1, gloo), a stack of M small Linear layers (64 x 64, so their compute is
a few microseconds) trained with DeepSpeed ZeRO-3 (stage 3, fp32, its default fetch settings,
persistence threshold 0 so every module gathers) and, beside it, the same model under plain
torch with the same optimizer: the difference in forward+backward time per step, over the
module visits of a step (2 M: each Linear once in forward and once in backward, plus the
container's), is DeepSpeed's host time per visit. The median of the steps after the first
three (the first records the trace) is printed with the spread, for M and 4 M modules (a per-
visit cost is the same at both). This box's CPU is not a GPU host's: the figure says what the
code path costs on this CPU, and the order of magnitude a GPU host pays.

Measured 2026-11-28 on this project's 2-core CI-like box (DeepSpeed 0.16.4, torch 2.13.0+cpu):
128 modules 336 us per visit (+-19), 256: 351, 512: 420 (+-11), 1024: 516-528 (the growth is
the reduce bucket's bookkeeping over these tiny parameters: split() below); the split at 256
modules: 156.4 us per visit, 197.5 us per gathered parameter, the figures frameworks/deepspeed.py
takes. DeepSpeed prints its config too. About two minutes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings


def build(modules: int, gelus: bool = False):
    """M Linear(64, 64) in a Sequential; with `gelus`, a parameter-free GELU after each (a
    visit of hooks alone, as a container or an activation is in a transformer)."""
    import torch

    torch.manual_seed(0)
    layers = []
    for _ in range(modules):
        layers += [torch.nn.Linear(64, 64)] + ([torch.nn.GELU()] if gelus else [])
    return torch.nn.Sequential(*layers)


def timed_steps(step, steps: int) -> list[float]:
    out = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        out.append(time.perf_counter() - start)
    return out[3:]


def plain(modules: int, steps: int, gelus: bool = False) -> list[float]:
    import torch

    model = build(modules, gelus)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(8, 64)

    def step() -> None:
        model(x).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return timed_steps(step, steps)


def zero3(modules: int, steps: int, gelus: bool = False,
          reduce_bucket: int | None = None) -> list[float]:
    import deepspeed
    import torch

    zero = {"stage": 3, "stage3_param_persistence_threshold": 0}
    if reduce_bucket is not None:
        zero["reduce_bucket_size"] = reduce_bucket
    config = {"train_micro_batch_size_per_gpu": 8, "zero_allow_untested_optimizer": True,
              "optimizer": {"type": "SGD", "params": {"lr": 1e-3}}, "zero_optimization": zero}
    engine, *_ = deepspeed.initialize(model=build(modules, gelus), config=config)
    x = torch.randn(8, 64)

    def step() -> None:
        loss = engine(x).sum()
        engine.backward(loss)
        engine.step()

    return timed_steps(step, steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    import deepspeed
    import torch

    warnings.filterwarnings("ignore", category=FutureWarning)
    torch.set_num_threads(1)
    deepspeed.init_distributed(dist_backend="gloo")
    print(f"deepspeed {deepspeed.__version__}, torch {torch.__version__}, one process, gloo")
    print(f"{'modules':>8} {'plain ms':>9} {'ZeRO-3 ms':>10} {'visits':>7} {'us/visit':>9} "
          f"{'spread':>7}")
    for modules in (args.modules, 4 * args.modules):
        base, ds = plain(modules, args.steps), zero3(modules, args.steps)
        visits = 2 * (modules + 1)  # each Linear and the Sequential, forward and backward
        per = [(d - statistics.median(base)) / visits * 1e6 for d in ds]
        q = statistics.quantiles(per, n=4)
        print(f"{modules:>8} {statistics.median(base) * 1e3:>9.2f} "
              f"{statistics.median(ds) * 1e3:>10.2f} {visits:>7} {statistics.median(per):>9.1f} "
              f"{(q[2] - q[0]) / 2:>7.1f}")
    split(args.modules, args.steps)


def split(modules: int, steps: int) -> None:
    """The hooks' time split into what every visit costs and what each gathered parameter adds
    (frameworks/deepspeed.py's HOOK_VISIT_US and HOOK_PARAM_US), from two stacks of M Linears,
    the second with a parameter-free GELU after each: the GELUs' 2 M visits cost hooks alone.
    The reduce bucket holds REDUCE_BUCKET elements, a dozen of these parameters, as DeepSpeed's
    default 5e8 holds a few dozen of a large model's: the default would hold the whole stack,
    and its bucket bookkeeping (stage3.py's elements_in_ipg_bucket, a sum over the bucket's
    parameters, three times per gradient) then grows with M, which is what the table above
    shows and no large model pays."""
    extra = {}
    for gelus in (False, True):
        base = statistics.median(plain(modules, steps, gelus))
        ds = statistics.median(zero3(modules, steps, gelus, REDUCE_BUCKET))
        extra[gelus] = (ds - base) * 1e6
    visit_us = (extra[True] - extra[False]) / (2 * modules)
    linear_us = extra[False] / modules - 2 * visit_us  # the Sequential's own visits aside
    print(f"split at {modules} modules, reduce bucket {REDUCE_BUCKET} elements: "
          f"{extra[False] / 1e3:.2f} ms over plain torch without GELUs, "
          f"{extra[True] / 1e3:.2f} ms with; per visit {visit_us:.1f} us, per gathered "
          f"parameter {linear_us / 2:.1f} us (forward, backward and step together)")


REDUCE_BUCKET = 50_000


if __name__ == "__main__":
    main()
