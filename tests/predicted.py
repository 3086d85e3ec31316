"""The analytic predictions of a point as measure_point makes them: its back end resolved once (resolve_point) on
its own device, then passed to the predictors, which never resolve it themselves."""

from __future__ import annotations

from typing import Any

from selfattn.backends.resolved import Resolved, resolve_point
from selfattn.measure.device import resolve_device
from selfattn.measure.predict import predict_call_s, predict_mem_bytes, predict_point_s


def resolved(point: Any) -> Resolved:
    return resolve_point(point, resolve_device(point.device))


def predicted_mem_bytes(point: Any) -> int:
    return predict_mem_bytes(point, resolved(point))


def predicted_call_s(point: Any, peak_tflops: float) -> float:
    return predict_call_s(point, peak_tflops, resolved(point))


def predicted_point_s(point: Any, peak_tflops: float, timing_s: float, rows: int) -> float:
    return predict_point_s(point, peak_tflops, timing_s, rows, resolved(point))
