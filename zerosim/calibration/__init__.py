"""The calibration layer: from what zero_real measured to the simulator's parameters, and back.

fit.py fits a profile from `zero-real calibrate`'s microbenchmarks: the collectives' and the
optimizer's lines, the box's op-model record (fit_ops.py) and its memory mechanisms
(fit_memory.py); the real stages' own steps are measured, never fitted. validate.py re-simulates
a `zero-real run` measurement and reports the error metric by metric. No torch.
"""
