"""The scenario layer: everything a user gives, read and checked, as one frozen Scenario.

config.py (a dataclass per TOML table) and variation.py; presets.py (GPU systems) and
hardware.py (their numbers in SI units, converted once); load.py (TOML, `--set`, precedence) and
the companion files it reads: hf.py (Hugging Face config.json), deepspeed.py (ds_config.json),
profile.py (a calibration profile: read-only lookups); checks.py (value checks). Nothing here
simulates; everything above builds on it.
"""
