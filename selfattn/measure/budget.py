"""How much memory and time one point may take (the guard that enforces it up front, `over_budget`, is
selfattn/measure/guard.py's).

The guard runs before anything of the point is allocated: a naive n = 65536 point on a CPU
would need 2 x 65536^2 x 4 bytes = 32 GiB per head for its score matrices, so it must be
skipped on the prediction alone, never discovered by trying.

A compiled back end's first compilation of a shape is guarded apart, by `max_compile_s`, not
added to the point's time: it is a one-time cost of the process (the next point of that shape
reuses the code), an estimate until the first one is measured (selfattn.compile's guess is
60 s on CUDA), and adding it to `max_point_s` (60 s, 30 s in some studies) skipped every
compiled point on CUDA before one compile was ever measured. The default 120 s leaves room for a cold
compile (tens of seconds); the calls after it still face `max_point_s`.
"""

from __future__ import annotations

from dataclasses import dataclass

from selfattn.fields import spec, validate_instance
from selfattn.measure import noise


@dataclass(frozen=True)
class Budget:
    """Limits for one point (the sweep config's `budget` section mirrors these fields)."""

    mem_fraction: float = spec(0.8, gt=0, le=1, help="share of the device's free memory a point may be predicted to use")
    max_point_s: float = spec(60.0, gt=0, help="limit on the predicted time of the whole point (warm-up, timing, accuracy; "
                              "a first compilation apart: max_compile_s)")
    max_compile_s: float = spec(120.0, gt=0, help="limit on the predicted time of a compiled back end's first compilation "
                                "of the point's shape (compile_s)")
    timing_s: float = spec(1.0, gt=0, help="seconds of timed calls per point (at least timing.MIN_SAMPLES calls)")
    accuracy_rows: int = spec(128, ge=1, help="query rows sampled for accuracy and stability (all when fewer)")
    measure_device_peak: bool = spec(True, help="measure the GEMM peak once per process (false: nominal, no tflops fraction)")
    # what flags a row `noisy` (selfattn/measure/noise.py's limits are the defaults): NVBench's --max-noise in spirit
    noise_spread: float | None = spec(None, gt=0, help="a row is noisy when (p80 - p20) / median of its samples passes this; "
                                      f"null: {noise.SPREAD_LIMIT:g} on CUDA, {noise.CPU_SPREAD_LIMIT:g} on a CPU")
    noise_cpu: float = spec(noise.OTHER_CPU_LIMIT, gt=0, le=1, help="a CPU row is noisy when other processes took more than this share "
                            "of the machine's CPU time during its timed calls")

    def __post_init__(self) -> None:
        validate_instance(self)
