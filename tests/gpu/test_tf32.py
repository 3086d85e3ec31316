"""tf32 runs on CUDA and differs from fp32 the way TF32 should: faster matmuls, ~1e-4 error.

TF32 keeps fp32's range but rounds matmul inputs to a 10-bit mantissa (unit roundoff 2^-11),
so against the float64 reference its error is orders of magnitude above fp32's (~1e-7) yet
well below bf16's; and the device's measured GEMM peak must be higher with TF32 on.
"""

from __future__ import annotations

import pytest
import torch

from selfattn.measure import Budget, measure_point
from selfattn.point import Point

pytestmark = pytest.mark.gpu


def _row(precision: str):
    point = Point(backend="naive", precision=precision, device="cuda", heads=4, seq_len=2048, head_dim=64)
    return measure_point(point, Budget(timing_s=0.05, accuracy_rows=64, measure_device_peak=True))


def test_tf32_runs_and_differs_from_fp32_as_expected() -> None:
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("TF32 tensor cores need capability >= 8.0 (Ampere)")
    flags = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    fp32, tf32 = _row("fp32"), _row("tf32")
    assert fp32.status == "ok" and tf32.status == "ok", (fp32.error, tf32.error)
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == flags, "TF32 flags leaked"

    assert fp32.rel_rms_err < 1e-5, fp32.rel_rms_err
    assert 1e-5 < tf32.rel_rms_err < 1e-2, tf32.rel_rms_err
    assert tf32.rel_rms_err > 10 * fp32.rel_rms_err
    # Same inputs, same math: only the rounding differs, so the stability columns agree.
    assert tf32.logit_std == pytest.approx(fp32.logit_std, rel=1e-2)
    assert tf32.device_peak_tflops > 2 * fp32.device_peak_tflops, (tf32.device_peak_tflops, fp32.device_peak_tflops)


@pytest.mark.parametrize("backend, options, computed_as", [
    ("naive", {}, "tf32"),  # cuBLAS matmuls honour TF32
    ("sdpa", {"kernel": "math"}, "tf32"),  # the math kernel is matmuls too
    ("sdpa", {"kernel": "efficient"}, "fp32"),  # its own fp32 scheme: the flag changes nothing
    ("sdpa", {}, "fp32"),  # auto picks a fused kernel for fp32
], ids=["naive", "sdpa-math", "sdpa-efficient", "sdpa-auto"])
def test_tf32_row_says_whether_its_kernel_honoured_tf32(backend: str, options: dict, computed_as: str) -> None:
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("TF32 tensor cores need capability >= 8.0 (Ampere)")
    point = Point(backend=backend, backend_options=options, precision="tf32", device="cuda", heads=4,
                  seq_len=2048, head_dim=64)
    row = measure_point(point, Budget(timing_s=0.05, accuracy_rows=64, measure_device_peak=True))
    assert row.status == "ok", row.error
    assert row.computed_as == computed_as, (row.kernel, row.note)
    assert ("tf32 ignored" in row.note) == (computed_as == "fp32")
    if row.tflops > row.device_peak_tflops:
        assert "above the measured" in row.note
