"""A box's own record: the catalogue's `Gpu` shape, every op-model constant measured on the box.

`zero-real calibrate` measures the op model's constants by microbenchmarks of their own (GEMMs
over a grid of shapes, attention by sequence length, each memory-bound op at several sizes,
launches, a linear's overhead beyond its GEMMs) and zerosim.calibration.fit_ops fits them into a
plain record, `fit.record[<processes>]` in the profile. Here that record becomes a `Gpu` with an
`OpModel`, so sim/op_costs.py prices a calibrated box exactly as it prices a catalogue GPU, from
constants instead of data sheets: the fitted GEMM rate is the peak, reached in full
(gemm_achievable_fraction = training_shapes_over_best = 1: the rate was fitted on training's
shapes), the measured copy bandwidth the HBM figure, reached in full.

The record holds only what the op model reads; its node, NCCL generation and memory size are
the catalogue's for the scenario's GPU (the links come from the profile's collectives).
"""

from __future__ import annotations

from typing import Any

from zerosim.hardware.gpus import Gpu
from zerosim.hardware.op_model import OpModel, OpRate


def _rate(entry: dict[str, Any] | None) -> OpRate | None:
    if entry is None:
        return None
    return OpRate(overhead_s=float(entry["overhead_s"]), per_s=float(entry["bytes_per_s"]))


def _host_dispatch(record: dict[str, Any]) -> tuple[float, float] | None:
    """(an aten op, a GEMM) seconds of host dispatch, where the record measured them."""
    host = record.get("host_dispatch_s")
    return None if host is None else (float(host[0]), float(host[1]))


def record_op_model(record: dict[str, Any]) -> OpModel:
    """The op model of a box's record (fit.record[n], checked by scenario/profile_schema.py)."""
    gemm = record["gemm"]
    attention = record.get("attention")
    measured_attention = ()
    if attention:
        curve = tuple((int(seq), float(fwd), float(bwd)) for seq, fwd, bwd in attention["by_seq"])
        measured_attention = ((attention["kernel"], tuple(map(float, attention["overhead_s"])),
                               tuple(map(float, attention.get("score_s", (0.0, 0.0)))), curve),)
    return OpModel(
        gemm_achievable_fraction=1.0, training_shapes_over_best=1.0,
        flash_fwd_tflops=None, flash_bwd_tflops=None,
        hbm_achievable_fraction=1.0,
        kernel_launch_us=float(record["launch_s"]) * 1e6,
        gemm_tile=(int(gemm["tile"][0]), int(gemm["tile"][1])),
        # a pass the fit left out (unfitted) is priced as the catalogue would; the copy's
        # forward is the bandwidth, never priced as an op
        memory_ops=tuple((op, _rate(passes.get("forward")), _rate(passes.get("backward")))
                         for op, passes in sorted(record.get("memory_ops", {}).items())
                         if op != "copy"),
        measured_attention=measured_attention,
        linear_overhead_s=tuple(map(float, record.get("linear_overhead_s", (0.0, 0.0)))),
        gemm_launch_us=float(gemm["launch_s"]) * 1e6,
        backward_call_s=float(record.get("backward_call_s", 0.0)),
        unit_overhead_s=tuple((kind, float(fwd), float(bwd)) for kind, (fwd, bwd)
                              in sorted(record.get("unit_overhead_s", {}).items())),
        host_dispatch_s=_host_dispatch(record))


def record_gpu(record: dict[str, Any], base: Gpu) -> Gpu:
    """`base` (the scenario's catalogue record: node, generation, memory) with the box's
    measured compute: its GEMM rate as the peak, its units as the SMs, its op model."""
    gemm = record["gemm"]
    return Gpu(name=base.name, generation=base.generation, node=base.node,
               hbm_GiB=base.hbm_GiB, hbm_GBps=float(record["bandwidth_GBps"]),
               peak_dense_16bit_tflops=float(gemm["tflops"]), sm_count=int(gemm["units"]),
               l2_MiB=base.l2_MiB, collective_library=base.collective_library,
               cuda_context_MiB=base.cuda_context_MiB, op_model=record_op_model(record))


__all__ = ["record_gpu", "record_op_model"]
