"""The physical floor (selfattn/measure/floor.py): a time below what the device can do is incorrect, with both
numbers in the reason; honest times and nominal peaks are left alone."""

from __future__ import annotations

import pytest
import torch

from selfattn.measure import floor
from selfattn.point import Point
from selfattn.results import Row


def test_the_reason_names_the_time_the_floor_and_both_terms():
    f = floor.Floor(floor_ms=2.0, flops_ms=2.0, bytes_ms=0.5, peak_tflops=0.3, peak_gbps=12.0)
    assert f.of == "flops" and f.reason(0.6) == ""  # within the slack
    reason = f.reason(0.004)
    assert reason.startswith("time 0.004 ms is below the physical floor 2 ms / slack 4")
    assert "0.3 TFLOP/s matmul peak = 2 ms" in reason and "12 GB/s = 0.5 ms" in reason
    assert floor.Floor(1.0, 0.2, 1.0, 1.0, 1.0).of == "bytes"


def test_the_floor_follows_the_point_and_the_measured_peaks(monkeypatch):
    from selfattn.measure import device

    peaks = {torch.float32: 0.5, torch.bfloat16: 0.05}
    monkeypatch.setattr(device, "device_peak_tflops", lambda d, dtype, remeasure=False: peaks[dtype])
    monkeypatch.setattr(device, "device_peak_gbps", lambda d, remeasure=False: 10.0)
    monkeypatch.setattr(floor, "last_level_cache_bytes", lambda: 2**20)
    point = Point(backend="sdpa", heads=2, seq_len=256, head_dim=64)
    f = floor.point_floor(point, "cpu", torch.float32)
    assert f.flops_ms == pytest.approx(4 * 2 * 256 * 256 * 64 / 0.5e12 * 1e3)
    assert f.bytes_ms is None  # its 512 KiB fit twice in the cache: the bytes floor is not judged on a CPU
    big = Point(backend="sdpa", heads=8, seq_len=8192, head_dim=64)
    assert floor.point_floor(big, "cpu", torch.float32).bytes_ms == pytest.approx(4 * 8 * 8192 * 64 * 4 / 10e9 * 1e3)
    # bf16 on a CPU: the fp32 GEMM (an upcasting kernel's) is the faster one, so it sets the floor
    bf16 = Point(backend="sdpa", heads=2, seq_len=256, head_dim=64, precision="bf16")
    assert floor.point_floor(bf16, "cpu", torch.bfloat16).peak_tflops == 0.5
    assert floor.point_floor(bf16, "cuda", torch.bfloat16).peak_tflops == 0.05
    # CUDA: a cold L2 (flushed before every call) judges the bytes; a warm one only past twice the L2
    monkeypatch.setattr(floor, "_gpu_l2_bytes", lambda: 50 * 2**20)
    assert floor.point_floor(point, "cuda", torch.float32).bytes_ms is not None
    assert floor.point_floor(point, "cuda", torch.float32, l2="warm").bytes_ms is None
    assert floor.point_floor(big, "cuda", torch.float32, l2="warm").bytes_ms is None  # 16 MiB < 2 x 50 MiB


def test_judge_fills_the_row_and_leaves_nominal_peaks_and_recurrences_alone(monkeypatch):
    from selfattn.measure import device

    monkeypatch.setattr(device, "device_peak_tflops", lambda d, dtype, remeasure=False: 0.5)
    monkeypatch.setattr(device, "device_peak_gbps", lambda d, remeasure=False: 10.0)
    monkeypatch.setattr(floor, "_one_thread_peak", lambda d, dtype: 0.1)
    point = Point(backend="sdpa", heads=2, seq_len=256, head_dim=64)
    row = Row()
    assert floor.judge(point, "cpu", torch.float32, 1.0, row, measured_peaks=True) == ""
    assert row.floor_ms == pytest.approx(0.0671, rel=1e-2) and row.floor_of == "flops"
    assert "below the physical floor" in floor.judge(point, "cpu", torch.float32, 1e-3, Row(), measured_peaks=True)
    nominal = Row()
    assert floor.judge(point, "cpu", torch.float32, 1e-3, nominal, measured_peaks=False) == ""
    assert nominal.floor_ms is None
    lstm = Point(backend="naive", scope="lstm", seq_len=64, heads=1)
    assert floor.judge(lstm, "cpu", torch.float32, 1e-9, Row(), measured_peaks=True) == ""


def test_a_peak_collapsed_on_every_thread_does_not_make_an_honest_time_impossible(monkeypatch):
    from selfattn.measure import device

    monkeypatch.setattr(device, "device_peak_tflops", lambda d, dtype, remeasure=False: 0.002)  # a collapsed probe
    monkeypatch.setattr(floor, "_one_thread_peak", lambda d, dtype: 0.3)
    point = Point(backend="naive", heads=2, seq_len=64, head_dim=16)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert floor.judge(point, "cpu", torch.float32, 0.0368, Row(), measured_peaks=True) == ""
    finally:
        torch.set_num_threads(before)


def test_a_collapsed_cuda_probe_cannot_raise_the_floor_past_the_spec_sheet(monkeypatch):
    """A GEMM probe measured while other jobs load the GPU (a tiny peak) would put an honest kernel under the floor:
    on CUDA the floor's peak is never below the spec sheet's, so the honest time stands and a lookup is still caught."""
    from selfattn.measure import device

    monkeypatch.setattr(device, "device_peak_tflops", lambda d, dtype, remeasure=False: 5.0)  # collapsed: H100 ~800
    monkeypatch.setattr(device, "device_peak_gbps", lambda d, remeasure=False: 3000.0)
    monkeypatch.setattr(floor, "_gpu_name", lambda: "NVIDIA H100 80GB HBM3")
    point = Point(backend="sdpa", heads=16, seq_len=4096, head_dim=128, precision="bf16", device="cuda")
    honest_ms = 4 * 16 * 4096 * 4096 * 128 / 600e12 * 1e3  # 600 TFLOP/s: a fast, honest kernel (~0.23 ms)
    assert floor.point_floor(point, "cuda", torch.bfloat16).peak_tflops == 989.5
    assert floor.judge(point, "cuda", torch.bfloat16, honest_ms, Row(), measured_peaks=True) == ""
    assert "below the physical floor" in floor.judge(point, "cuda", torch.bfloat16, honest_ms / 100, Row(),
                                                     measured_peaks=True)
    # a GPU not on any sheet keeps the measured peak: the floor there is what the probe says
    monkeypatch.setattr(floor, "_gpu_name", lambda: "Some Future GPU")
    assert floor.point_floor(point, "cuda", torch.bfloat16).peak_tflops == 5.0
    assert floor.spec_tflops("cpu", torch.float32) == 0.0
