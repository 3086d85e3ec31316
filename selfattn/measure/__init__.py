"""selfattn.measure: time, memory, FLOPs, accuracy and numerical stability of one point.

    from selfattn import Point
    from selfattn.measure import Budget, measure_point
    row = measure_point(Point(backend="chunked", seq_len=2048), Budget(timing_s=0.5))

One module per job: timing (the field's timers), memory (real peaks), predict (the analytic
model the budget guard uses), flops, accuracy (float64 reference on sampled rows), stability,
device (environment columns, GEMM peak), workload (what a point runs), run (measure_point).
Knows nothing of Hydra, wandb or files.
"""

from selfattn.measure.budget import Budget
from selfattn.measure.device import device_peak_tflops, environment
from selfattn.measure.flops import point_flops, unmasked_pairs
from selfattn.measure.predict import predict_mem_bytes
from selfattn.measure.run import measure_point

__all__ = [
    "Budget",
    "device_peak_tflops",
    "environment",
    "measure_point",
    "point_flops",
    "predict_mem_bytes",
    "unmasked_pairs",
]
