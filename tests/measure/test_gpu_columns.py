"""The CUDA row columns, tested on a CPU where they can be: the spec-sheet table (pure data), NVML's sampling
through a stand-in module, the kernel time's bookkeeping and timing.mode; the real thing under @pytest.mark.gpu."""

from __future__ import annotations

import sys
import time
import types

import pytest
import torch

from selfattn.measure import gpu_state, kernel_time, spec_peaks
from selfattn.measure.budget import Budget
from selfattn.measure.timing import summarize
from selfattn.measure.timing_options import TimingOptions
from selfattn.results import Row


@pytest.mark.parametrize("name, model", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200 SXM"), ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"), ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB"), ("NVIDIA B200", "B200"), ("NVIDIA L4", "L4"), ("NVIDIA L40S", "L40S"),
])
def test_each_gpu_of_the_table_is_found_by_its_device_name(name, model):
    assert spec_peaks.spec_for(name).model == model


def test_dense_numbers_and_percent_of_peak():
    h100 = spec_peaks.spec_for("NVIDIA H100 80GB HBM3")
    assert h100.tflops["bf16"] == 989.5 and h100.tflops["fp8"] == 2 * h100.tflops["bf16"] - 0.0  # dense, not sparse
    columns = spec_peaks.spec_columns("cuda", "NVIDIA H200", "bf16", tflops=494.75, gbps=2400.0)
    assert columns["spec_gpu"] == "H200 SXM" and columns["mfu_pct"] == pytest.approx(50.0)
    assert columns["bw_pct"] == pytest.approx(50.0) and columns["spec_gbps"] == 4800
    fp8 = spec_peaks.spec_columns("cuda", "NVIDIA L4", "fp8_e4m3", tflops=121.25, gbps=None)
    assert fp8["mfu_pct"] == pytest.approx(50.0) and fp8["bw_pct"] is None
    b200_fp32 = spec_peaks.spec_columns("cuda", "NVIDIA B200", "fp32", tflops=10.0, gbps=None)
    assert b200_fp32["spec_tflops"] is None and b200_fp32["mfu_pct"] is None  # not on the sheet: no number made up


def test_an_unknown_gpu_and_a_cpu_say_so():
    unknown = spec_peaks.spec_columns("cuda", "NVIDIA GeForce RTX 4090", "bf16", 100.0, 500.0)
    assert unknown == {"spec_gpu": "unknown: NVIDIA GeForce RTX 4090 (not in selfattn/measure/spec_peaks.py)"}
    assert spec_peaks.spec_columns("cpu", "", "fp32", 0.1, 10.0) == {}


def _fake_nvml(reasons: int = 0) -> types.ModuleType:
    nvml = types.ModuleType("pynvml")
    nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM, nvml.NVML_TEMPERATURE_GPU = 1, 2, 0
    nvml.calls = []
    nvml.nvmlInit = lambda: nvml.calls.append("init")
    nvml.nvmlShutdown = lambda: nvml.calls.append("shutdown")
    nvml.nvmlDeviceGetHandleByIndex = lambda index: ("handle", index)
    nvml.nvmlDeviceGetClockInfo = lambda handle, clock: 1980 if clock == 1 else 2619
    nvml.nvmlDeviceGetPowerUsage = lambda handle: 512_000
    nvml.nvmlDeviceGetTemperature = lambda handle, sensor: 61
    nvml.nvmlDeviceGetCurrentClocksEventReasons = lambda handle: reasons
    return nvml


def test_nvml_is_sampled_over_the_window_and_its_columns_filled(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    with gpu_state.sampled("cuda", torch_index=1) as state:
        time.sleep(0.05)
    assert len(state.sm_clock_mhz) >= 2  # the start, the end, and samples between
    row = Row(noise="")
    state.fill(row)
    assert (row.gpu_sm_clock_mhz, row.gpu_mem_clock_mhz, row.gpu_power_w, row.gpu_temp_c) == (1980, 2619, 512.0, 61)
    assert row.throttled is False and row.gpu_throttle == "" and not row.noisy
    assert sys.modules["pynvml"].calls == ["init", "shutdown"]
    assert gpu_state._nvml_index(1) == 5


def test_a_throttled_window_makes_the_row_noisy(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(reasons=0x4 | 0x1))  # sw power cap, idle
    with gpu_state.sampled("cuda", torch_index=0) as state:
        pass
    row = Row(noise="spread 12% > 10%", noisy=True)
    state.fill(row)
    assert row.throttled is True and row.gpu_throttle == "gpu_idle,sw_power_cap"
    assert row.noise == "spread 12% > 10%; throttled during the timed calls (sw_power_cap)"


def test_without_nvidia_ml_py_the_row_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    with gpu_state.sampled("cuda", torch_index=0) as state:
        pass
    row = Row()
    state.fill(row)
    assert row.gpu_state == gpu_state.MISSING and row.gpu_sm_clock_mhz is None and row.throttled is None
    with gpu_state.sampled("cpu") as nothing:
        assert nothing is None


def test_timing_mode_chooses_what_time_ms_holds(monkeypatch):
    call = summarize([0.080, 0.082, 0.078], "cuda_events")
    graph = summarize([0.016, 0.015, 0.017], "cuda_graph")
    monkeypatch.setattr(kernel_time, "kernel_time", lambda *a, **k: kernel_time.KernelTime(graph))
    row = Row()
    assert kernel_time.record(row, lambda: None, call, 0.1, "call") is call
    assert (row.timing_mode, row.call_time_ms, row.kernel_time_ms) == ("call", 0.080, 0.016)
    assert row.l2 == "cold"
    assert row.launch_overhead_ms == pytest.approx(0.064)
    row = Row()
    assert kernel_time.record(row, lambda: None, call, 0.1, "kernel", l2="warm") is graph and row.timing_mode == "kernel"
    assert row.l2 == "warm"
    monkeypatch.setattr(kernel_time, "kernel_time", lambda *a, **k: kernel_time.KernelTime(None, "kernel time not "
                                                                                       "measured: capture failed"))
    row = Row()
    assert kernel_time.record(row, lambda: None, call, 0.1, "kernel") is call
    assert row.timing_mode == "call" and row.kernel_time_ms is None and "time_ms holds the call's" in row.kernel_time_note


def test_warm_replays_skip_the_l2_flush(monkeypatch):
    seen = {}

    def fake_kernel_time(call, timing_s, estimate, between=None, flush_l2=True):
        seen["flush"] = flush_l2
        return kernel_time.KernelTime(summarize([0.016, 0.015, 0.017], "cuda_graph"))

    monkeypatch.setattr(kernel_time, "kernel_time", fake_kernel_time)
    call = summarize([0.080, 0.082, 0.078], "cuda_events")
    kernel_time.record(Row(), lambda: None, call, 0.1, "call", l2="warm")
    assert seen["flush"] is False
    kernel_time.record(Row(), lambda: None, call, 0.1, "call")
    assert seen["flush"] is True


@pytest.mark.gpu
def test_a_cuda_row_has_the_kernel_time_clocks_and_percent_of_peak():
    from selfattn.measure import measure_point
    from selfattn.point import Point

    point = Point(backend="sdpa", heads=8, seq_len=1024, head_dim=64, precision="bf16", device="cuda")
    row = measure_point(point, Budget(timing_s=0.2), metrics=("traffic",))
    assert row.status == "ok", row.error
    assert row.timing_mode == "call" and row.call_time_ms == row.time_ms
    assert 0 < row.kernel_time_ms <= row.call_time_ms * 1.2, (row.kernel_time_ms, row.call_time_ms)
    assert row.floor_ms and row.time_ms >= row.floor_ms / 4
    assert row.spec_gpu and (row.spec_gpu.startswith("unknown") or row.mfu_pct > 0)
    assert row.gpu_state == gpu_state.MISSING or row.gpu_sm_clock_mhz > 0
    kernel = measure_point(point, Budget(timing_s=0.2), metrics=(), timing=TimingOptions(mode="kernel"))
    assert kernel.status == "ok" and kernel.timing_mode == "kernel" and kernel.time_ms == kernel.kernel_time_ms
    warm = measure_point(point, Budget(timing_s=0.2), metrics=(), timing=TimingOptions(l2="warm"))
    assert warm.status == "ok" and warm.l2 == "warm" and row.l2 == "cold"


@pytest.mark.gpu
def test_a_cached_answer_replays_no_kernel_and_is_below_the_floor(monkeypatch):
    from pathlib import Path

    from selfattn.measure import measure_point
    from selfattn.point import Point

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    point = Point(backend="plugins_for_tests.cheats:precomputed", heads=8, seq_len=4096, head_dim=64,
                  precision="bf16", device="cuda")
    row = measure_point(point, Budget(timing_s=0.2), metrics=(), timing=TimingOptions(mode="kernel"))
    assert row.status == "incorrect" and "physical floor" in row.error, row.error
