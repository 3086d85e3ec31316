"""The precisions, the one list, with the bytes each stores per element (pure Python, imports nothing).

The configs' order (fp64 first). selfattn.point (the `precision` axis), selfattn.precision (their dtypes),
the back ends' declarations (selfattn/backends/contract.py) and the config group `precision` (made from it:
runners/config.py) read it; tests/test_precisions.py holds every table keyed by precision to it.

fp64: IEEE double, the reference precision; fp32: IEEE single, no TF32; tf32: fp32 storage, TF32 tensor-core
matmuls (CUDA Ampere and newer; unsupported on a CPU); fp16: IEEE half, max 65504 (unscaled logits can overflow
to inf); bf16: fp32's range, 8 bits of mantissa; fp8_e4m3 (largest value 448, saturating) and fp8_e5m2 (largest
57344, overflows to inf): Q, K, V, P quantized in naive and chunked (selfattn/fp8.py).
"""

from __future__ import annotations

ELEMENT_BYTES: dict[str, int] = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}
PRECISIONS: tuple[str, ...] = tuple(ELEMENT_BYTES)
