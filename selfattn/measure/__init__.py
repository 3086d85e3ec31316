"""selfattn.measure: time, memory, FLOPs, accuracy and numerical stability of one point.

    from selfattn import Point
    from selfattn.measure import Budget, measure_point
    row = measure_point(Point(backend="chunked", seq_len=2048), Budget(timing_s=0.5))

One module per job: timing (the field's timers), memory (real peaks), predict (the analytic
model the budget guard uses), flops, accuracy (float64 reference on sampled rows), stability,
device (environment columns, GEMM peak), workload (what a point runs), run (measure_point).
Knows nothing of Hydra, wandb or files.
"""

from __future__ import annotations

from selfattn.lazy import lazy_exports

# Lazy, as the selfattn package is: `selfattn.measure.budget` (pure Python) is read by the command line's typo
# check, which must answer before torch has imported (seconds). public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "Budget": "selfattn.measure.budget",
    "device_peak_tflops": "selfattn.measure.device",
    "environment": "selfattn.measure.device",
    "measure_point": "selfattn.measure.run",
    "point_flops": "selfattn.measure.flops",
    "predict_mem_bytes": "selfattn.measure.predict",
    "unmasked_pairs": "selfattn.measure.flops",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports("selfattn.measure", _EXPORTS, globals())
