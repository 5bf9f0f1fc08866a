"""The calibration layer: from what zero_real measured to the simulator's parameters, and back.

fit.py fits a profile from `zero-real calibrate`'s microbenchmarks (fit_steps.py from the real
stages' own steps, re-simulated); validate.py re-simulates a `zero-real run` measurement and
reports the error metric by metric. No torch.
"""
