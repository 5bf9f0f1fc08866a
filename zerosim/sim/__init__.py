"""The simulation layer: one training step of a stage on a simulated cluster (simpy).

stages/ is the stage programs (DDP, then what ZeRO-1, -2, -3 change, the family mixed in) and
the numbers they work from (stages/step_shape.py), priced by costs.py and op_costs.py (the GPU
record's op model, or a calibration profile); executor.py names the three ways a step runs and
their contracts: engine.py (which ranks to simulate, their collectives) with rank.py (what a
stage program may do on its rank), clock.py and sync.py, or lockstep/ (every rank at once);
network.py the links; collectives/ NCCL's and gloo's algorithms as phases over the links, on the
mesh's subgroups (groups.py); offload.py the host operations; timeline.py and allocator.py a
rank's memory, device.py what no allocator counts; collective_bench.py one collective alone
(`zerosim collective`); result.py and trace.py what comes back.
"""
