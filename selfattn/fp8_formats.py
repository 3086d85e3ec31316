"""The two FP8 formats as numbers (pure Python: the analysis reads them without torch).

e4m3 (torch.float8_e4m3fn: 4 exponent bits, 3 mantissa bits, no inf) has 448 as its largest
value; e5m2 (IEEE-like, with inf) has 57344. What a cast of a too-large value does was measured
on torch 2.13's CPU cast (round to nearest even): e4m3 saturates, so 500 and inf both give 448
(silent); e5m2 rounds to 57344 up to the midpoint of the next binade step, 61440, and to inf
beyond it (non-finite). A value "saturates" when it rounds to the format's largest magnitude:
from the midpoint between the two largest values, 432 (416..448) and 53248 (49152..57344)
(a tie rounds to the even one: 432 to 448, 53248 to 49152).
"""

from __future__ import annotations

# precision name -> format name (selfattn.point.PRECISIONS holds both precisions)
FORMAT_OF: dict[str, str] = {"fp8_e4m3": "e4m3", "fp8_e5m2": "e5m2"}
FORMAT_NAMES: tuple[str, ...] = tuple(FORMAT_OF.values())
MANTISSA_BITS: dict[str, int] = {"e4m3": 3, "e5m2": 2}
MIN_NORMAL_EXPONENT: dict[str, int] = {"e4m3": -6, "e5m2": -14}
FORMAT_MAX: dict[str, float] = {"e4m3": 448.0, "e5m2": 57344.0}
# |x| from which a cast gives the largest magnitude (round to nearest), and from which it gives inf
SATURATES_FROM: dict[str, float] = {"e4m3": 432.0, "e5m2": 53248.0}
OVERFLOWS_FROM: dict[str, float] = {"e4m3": float("inf"), "e5m2": 61440.0}


def fp8_format(precision: str) -> str | None:
    """The FP8 format of `precision` ("e4m3", "e5m2"), None for any other precision."""
    return FORMAT_OF.get(precision)
