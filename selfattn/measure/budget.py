"""How much memory and time one point may take, and the guard that enforces it up front.

The guard runs before anything of the point is allocated: a naive n = 65536 point on a CPU
would need 2 x 65536^2 x 4 bytes = 32 GiB per head for its score matrices, so it must be
skipped on the prediction alone, never discovered by trying.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from selfattn.point import Point


@dataclass(frozen=True)
class Budget:
    """Limits for one point (the sweep config's `budget` group)."""

    mem_fraction: float = 0.8  # share of the device's free memory a point may be predicted to use
    max_point_s: float = 60.0  # limit on the predicted time of the whole point (warm-up, timing, accuracy)
    timing_s: float = 1.0  # how long a point is timed (at least timing.MIN_SAMPLES calls)
    accuracy_rows: int = 128  # query rows sampled for accuracy and stability (all when fewer)
    measure_device_peak: bool = True  # measure the GEMM peak (False: nominal, no tflops fraction)

    def __post_init__(self) -> None:
        _positive_number("mem_fraction", self.mem_fraction)
        if self.mem_fraction > 1:
            raise ValueError(f"mem_fraction: expected a number in (0, 1], got {self.mem_fraction!r}")
        _positive_number("max_point_s", self.max_point_s)
        _positive_number("timing_s", self.timing_s)
        rows = self.accuracy_rows
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise ValueError(f"accuracy_rows: expected an integer >= 1, got {rows!r}")
        if not isinstance(self.measure_device_peak, bool):
            raise ValueError(f"measure_device_peak: expected true or false, got {self.measure_device_peak!r}")


def _positive_number(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: expected a positive finite number, got {value!r}")


def over_budget(
    point: Point, budget: Budget, need_bytes: int, free_bytes: int | None, point_s: float
) -> str | None:
    """Why `point` must be skipped (one line), or None when it fits.

    need_bytes: predicted bytes of inputs + the call's peak + the accuracy pass;
    free_bytes: what the device has free now (None: unknown, memory is not guarded);
    point_s: predicted seconds of the whole point.
    """
    if free_bytes is not None and need_bytes > budget.mem_fraction * free_bytes:
        return (
            f"predicted memory {need_bytes / 2**30:.2f} GiB exceeds {budget.mem_fraction:g} of the "
            f"{free_bytes / 2**30:.2f} GiB free on {point.device}"
        )
    if point_s > budget.max_point_s:
        return f"predicted time {point_s:.1f} s exceeds max_point_s={budget.max_point_s:g} s"
    return None
