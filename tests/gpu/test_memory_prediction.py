"""CUDA peak memory of the materialized (naive) back end matches its analytic prediction.

The caching allocator's counters are exact, so the model in selfattn/measure/predict.py
(which tensors of q_len x seq_len are alive at once) must hold within 10% on a real GPU.
"""

from __future__ import annotations

import pytest

from selfattn.measure import Budget, measure_point
from selfattn.point import Point

pytestmark = pytest.mark.gpu

BUDGET = Budget(timing_s=0.02, accuracy_rows=16, measure_device_peak=False)


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_naive_cuda_peak_within_10_percent_of_prediction(precision: str, causal: bool, mode: str) -> None:
    point = Point(backend="naive", precision=precision, device="cuda", batch=2, heads=8, seq_len=4096,
                  head_dim=64, causal=causal, mode=mode)
    row = measure_point(point, BUDGET)
    assert row.status == "ok", row.error
    # B2-H8-L4096: one score matrix is 2*8*4096^2 elements = 256 MiB in fp32; the peak is several.
    assert row.peak_mem_bytes > 2 * 8 * 4096**2
    ratio = row.peak_mem_bytes / row.predicted_mem_bytes
    assert 0.9 <= ratio <= 1.1, (
        f"measured {row.peak_mem_bytes / 2**20:.1f} MiB vs predicted {row.predicted_mem_bytes / 2**20:.1f} MiB"
    )


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_sdpa_math_cuda_peak_within_10_percent_of_prediction(precision: str, mode: str) -> None:
    # The math kernel upcasts fp16/bf16 to fp32 (9 B per score forward, 12 with backward): a model
    # of 2 s bytes per score let forced-math points past the guard into an OOM.
    point = Point(backend="sdpa", backend_options={"kernel": "math"}, precision=precision, device="cuda",
                  batch=2, heads=8, seq_len=4096, head_dim=64, causal=True, mode=mode)
    row = measure_point(point, BUDGET)
    assert row.status == "ok", row.error
    ratio = row.peak_mem_bytes / row.predicted_mem_bytes
    assert 0.9 <= ratio <= 1.1, (
        f"measured {row.peak_mem_bytes / 2**20:.1f} MiB vs predicted {row.predicted_mem_bytes / 2**20:.1f} MiB"
    )
