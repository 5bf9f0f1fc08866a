"""The analytic model: what a configuration holds and computes, in closed form, without time.

model.py counts parameters, gather units, FLOPs and activations; memory.py is the ZeRO paper's
per-rank memory, exact, over the shard group, with what frameworks hold beyond it asked of
their classes (zerosim/frameworks/); host_memory.py host and NVMe bytes under offload beside
DeepSpeed's own estimators.
"""
