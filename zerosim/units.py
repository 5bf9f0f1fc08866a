"""Unit constants and conversions, applied once at the edge: scenario keys carry their unit
(`hbm_GiB`, `reduce_bucket_MiB`, `inter_node_bandwidth_GBps`), everything inside is SI bytes and
seconds.

Decimal prefixes (GB, MB) are powers of ten; binary ones (GiB, MiB) powers of two. Confusing the
two is a 7% error at GiB scale: keep them apart by name.
"""

from __future__ import annotations

KB, MB, GB = 10**3, 10**6, 10**9
KiB, MiB, GiB = 2**10, 2**20, 2**30
TERA = 10**12
US = 1e-6  # a microsecond, in seconds

# Bytes of one element of each training precision (training.precision); optimizer states are fp32.
BYTES_PER_ELEMENT = {"fp32": 4, "bf16": 2, "fp16": 2}
FP32_BYTES = BYTES_PER_ELEMENT["fp32"]


def mib_to_bytes(value_MiB: float) -> int:
    return round(value_MiB * MiB)
