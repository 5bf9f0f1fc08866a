"""The scenario layer: everything a user gives, read and checked, as one frozen Scenario.

config.py (a dataclass per TOML table, with model_table.py, cluster.py and host.py,
parallelism_table.py and variation.py); family.py (what offload, hybrid sharding and ZeRO++ need
of each other); presets.py (a hardware record as the [cluster] keys it fills) and hardware.py
(the cluster's numbers in SI units, converted once); load.py (TOML, `--set`, precedence) and
the companion files it reads: hf.py (Hugging Face config.json), deepspeed.py (ds_config.json),
profile.py (a calibration profile: read-only lookups) and profile_schema.py (its every field,
checked once when it is read); parse.py (TOML and JSON within limits of nesting and size);
checks.py (value checks, the 2**53 cap). Nothing here simulates; everything above builds on it.
"""
