"""zero_real: DDP and ZeRO-1/2/3 run for real on torch.distributed (NCCL on GPUs, gloo on CPU),
measuring memory and time so that zerosim can be calibrated and report its own error.

Its packages, lowest first: parts/ (the model, flat buffers, Adam, collectives, what a rank
measures) and checks/ (the flags' ranges, the refusals before a run); stages/ (DDP, ZeRO-1/2/3);
run/ (a run: its config, launch and supervision, progress, each rank's training, the summary);
calibration/ (`zero-real calibrate`); then the command line, cli.py (`python -m zero_real`).

Importing this package does not import torch; the commands that need it do, and say how to get it.
From Python, `zero_real.measure(...)` (api.py) is `zero-real run`, loaded on first use.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """The API's `measure`, imported when first asked for (PEP 562), as zerosim's API is."""
    if name == "measure":
        from zero_real import api

        return api.measure
    raise AttributeError(f"module 'zero_real' has no attribute {name!r}")
