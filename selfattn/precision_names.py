"""The precisions, the one list, with the bytes each stores per element (pure Python, imports nothing).

The configs' order (fp64 first). selfattn.point (the `precision` axis), selfattn.precision (their dtypes),
the back ends' declarations (selfattn/backends/contract.py) and conf/precision/ read it;
tests/test_precisions.py holds every table keyed by precision to it.
"""

from __future__ import annotations

ELEMENT_BYTES: dict[str, int] = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}
PRECISIONS: tuple[str, ...] = tuple(ELEMENT_BYTES)
