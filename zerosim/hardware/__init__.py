"""The hardware catalogue: one record per GPU and per node system, each figure with its source.

Below the scenario layer: it imports nothing of zerosim but the foundation. A scenario names a
record with `[cluster] gpu = "H100-80GB"`; zerosim/scenario/presets.py turns it into the
[cluster] keys it fills, sim/op_costs.py times kernels from its op model. gpus.py holds the GPU
records (`GPUS`, and `DEVICES` with the CPU box that stands in for GPUs on a laptop), nodes.py
the node systems, op_model.py the op model's shared constants, pcie.py the PCIe links.

Adding a GPU: write one `Gpu` record in gpus.py (its `name` is the string scenarios use, and
the only place in zerosim that writes it), every figure with its data sheet or microbenchmark
in a comment (never an end-to-end training run); name its `generation` (NCCL's tables) and
the node it comes in, adding a `Node` to nodes.py if none of them is it (GPUs, NVLink bandwidth
through its switch, NVLink SHARP, NICs and their rate, PCIe generation, host CPU and cores);
give it an `OpModel` if its GEMM, flash attention, streaming and launch figures are published
(else the flat model times it), and `gemm_tflops_by_power_W` if GEMMs were measured under a
power limit. Then list it in `GPUS`. Nothing else changes: presets, NCCL's model, the op model
and the host side all read the record. A figure from our own microbenchmark is committed under
profiles/ and a test recomputes it from the file (tests/zerosim/test_op_costs.py).

A box calibrated with `zero-real calibrate` has a record of its own, in the same shape, built
from its profile by measured.py: every op-model constant measured on the box.
"""

from zerosim.hardware.gpus import DEFAULT_GPU, DEVICES, GPUS, Gpu
from zerosim.hardware.nodes import Node
from zerosim.hardware.op_model import TRAINING_GEMMS_OVER_BEST, OpModel, OpRate

__all__ = ["DEFAULT_GPU", "DEVICES", "GPUS", "Gpu", "Node", "OpModel", "OpRate",
           "TRAINING_GEMMS_OVER_BEST"]
