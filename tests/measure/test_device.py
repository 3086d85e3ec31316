"""Environment columns and the GEMM peak: measured once per process, cheap afterwards."""

import time

import pytest
import torch

from selfattn.measure import device_peak_tflops, environment
from selfattn.measure.device import resolve_device
from selfattn.results import COLUMNS, SCHEMA_VERSION


def test_environment_names_row_columns_and_is_cached():
    env = environment("cpu")
    assert set(env) <= set(COLUMNS)
    assert env["device"] == "cpu" and env["schema_version"] == SCHEMA_VERSION
    assert env["num_threads"] == torch.get_num_threads() and env["torch_version"] == torch.__version__
    assert env["cpu_model"] and env["hostname"] and env["timestamp"].endswith("+00:00")
    start = time.perf_counter()
    for _ in range(100):
        environment("cpu")
    assert time.perf_counter() - start < 0.1  # no subprocess (git) per row


def test_git_sha_is_a_commit_or_empty():
    sha = environment("cpu")["git_sha"]
    assert sha == "" or len(sha.removesuffix("-dirty")) == 40


def test_cpu_peak_is_plausible_quick_and_cached():
    start = time.perf_counter()
    peak = device_peak_tflops("cpu", torch.float32)
    first_s = time.perf_counter() - start
    assert 1e-4 < peak < 100  # 0.1 GFLOP/s .. 100 TFLOP/s
    assert first_s < 3.0  # well under a second on an idle machine; slack for a busy one
    start = time.perf_counter()
    assert device_peak_tflops("cpu", torch.float32) == peak
    assert time.perf_counter() - start < 0.01


def test_resolve_device():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="device"):
        resolve_device("tpu")


@pytest.mark.gpu
def test_cuda_environment_and_peak():
    env = environment("cuda")
    assert env["device_name"] and env["device_capability"] and env["device_mem_bytes"] > 0
    assert device_peak_tflops("cuda", torch.float16) > device_peak_tflops("cuda", torch.float64)


def test_a_peak_measured_in_a_bad_moment_is_corrected_before_skipping(monkeypatch):
    import selfattn.measure.device as device_module
    from selfattn import Point
    from selfattn.measure import Budget, measure_point

    key = ("cpu", torch.float32, False)
    device_peak_tflops("cpu", torch.float32)
    monkeypatch.setattr(device_module, "_REMEASURED", {})
    monkeypatch.setitem(device_module._PEAKS, key, 1e-9)  # as if measured while the CPU was swamped
    row = measure_point(Point(heads=2, seq_len=1024, head_dim=16), Budget(timing_s=0.02, accuracy_rows=16))
    assert row.status == "ok", row.error
    assert row.device_peak_tflops > 1e-6 and device_module._REMEASURED[key] == 1
