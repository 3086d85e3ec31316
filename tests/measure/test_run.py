"""measure_point end to end on the CPU: statuses, accuracy, stability and the row's columns."""

import dataclasses
import json

import pytest
import torch

import selfattn.measure.run as run_module
import selfattn.measure.workload as workload_module
from selfattn import Point
from selfattn.measure import Budget, measure_point
from selfattn.results import COLUMNS, SCHEMA_VERSION, STATUSES

# A generous max_point_s: on a busy shared machine the time guard must not skip these points.
QUICK = Budget(timing_s=0.02, accuracy_rows=32, max_point_s=600.0)
ENV_COLUMNS = ("device_name", "cpu_model", "num_threads", "hostname", "torch_version", "timestamp")


def _small(**fields) -> Point:
    return Point(**{"heads": 2, "seq_len": 64, "head_dim": 16, **fields})


@pytest.mark.parametrize("backend", ["naive", "sdpa", "chunked"])
@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
@pytest.mark.parametrize("scope", ["core", "layer"])
def test_ok_row_is_complete_and_accurate(backend, mode, scope):
    point = _small(backend=backend, mode=mode, scope=scope, causal=True, batch=2)
    row = measure_point(point, QUICK)
    assert row.status == "ok", row.error
    assert row.error == "" and row.status in STATUSES
    assert row.time_ms > 0 and row.time_ms_p20 <= row.time_ms <= row.time_ms_p80
    assert row.time_samples >= 3
    assert row.peak_mem_bytes is not None and row.predicted_mem_bytes > 0
    assert row.flops > 0 and row.tflops == pytest.approx(row.flops / (row.time_ms * 1e-3) / 1e12)
    assert row.device_peak_tflops > 0
    assert row.accuracy_rows == 32 and row.nonfinite_frac == 0.0
    assert row.rel_rms_err < 1e-5 and row.max_abs_err < 1e-4  # fp32 vs the float64 reference
    if mode == "fwd_bwd":
        assert row.grad_rel_rms_err < 1e-5
    else:
        assert row.grad_rel_rms_err is None
    assert 0 < row.softmax_entropy <= 1 and 0 < row.max_weight <= 1
    assert row.grad_norm_q > 0 and row.grad_nonfinite_frac == 0.0
    assert 0 < row.measure_s < row.point_wall_s
    assert row.kernel and json.loads(row.backend_options) == {}
    assert row.schema_version == SCHEMA_VERSION and set(row.to_dict()) == set(COLUMNS)


def test_point_columns_and_auto_device():
    row = measure_point(_small(device="auto", scale="none", q_len=16, seed=3), QUICK)
    assert row.status == "ok", row.error
    assert row.device == ("cuda" if torch.cuda.is_available() else "cpu")
    assert (row.q_len, row.seq_len, row.scale, row.scale_value, row.seed) == (16, 64, "none", 1.0, 3)
    assert row.d_model == 32 and row.accuracy_rows == 16  # all rows when fewer than asked


@pytest.mark.parametrize(
    "fields,status,text",
    [
        ({"heads": 0}, "invalid", "heads"),
        ({"backend": "nope"}, "invalid", "backend"),
        ({"backend": "chunked", "backend_options": {"q_chunk": 0}}, "invalid", "q_chunk"),
        ({"backend": "naive", "backend_options": {"kernel": "flash"}}, "invalid", "kernel"),
        ({"causal": True, "q_len": 65}, "invalid", "causal"),
        ({"backend_options": ["q_chunk"]}, "invalid", "backend_options"),
        ({"device": "tpu"}, "invalid", "device"),
        ({"precision": "tf32", "device": "cpu"}, "unsupported", "tf32"),
    ],
    ids=["heads0", "unknown-backend", "chunk0", "foreign-option", "causal-q-gt-seq", "options-list", "tpu", "tf32-cpu"],
)
def test_failures_become_rows(fields, status, text):
    row = measure_point(_small(**fields), QUICK)
    assert row.status == status and text in row.error
    assert "\n" not in row.error
    for column in ENV_COLUMNS:  # every row says where it was measured, whatever its status
        if column == "device_name" and row.device not in ("cpu", "cuda"):
            continue  # a device that does not exist has no name
        assert getattr(row, column) not in ("", None), column
    assert row.backend == _small(**fields).backend and row.seq_len == 64


def test_time_guard_skips_before_running(monkeypatch):
    monkeypatch.setattr(workload_module, "build", lambda *a, **k: pytest.fail("built a skipped point"))
    row = measure_point(_small(seq_len=4096, heads=8), Budget(max_point_s=0.01))
    assert row.status == "skipped_budget" and "time" in row.error
    assert row.predicted_time_ms > 0 and row.time_ms is None


def test_guard_after_warm_up_catches_a_bad_prediction(monkeypatch):
    monkeypatch.setattr(run_module, "predict_point_s", lambda *args, **kwargs: 0.0)  # "free"
    row = measure_point(_small(), Budget(max_point_s=1e-4))
    assert row.status == "skipped_budget" and "warm-up" in row.error and row.time_ms is None


def test_simulated_cuda_oom_then_next_point_is_fine(monkeypatch):
    released = []
    real_build, real_release = workload_module.build, run_module.release_memory

    def oom_build(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB")

    monkeypatch.setattr(workload_module, "build", oom_build)
    monkeypatch.setattr(run_module, "release_memory", lambda device: (released.append(device), real_release(device)))
    row = measure_point(_small(), QUICK)
    assert row.status == "oom" and "out of memory" in row.error and released
    monkeypatch.setattr(workload_module, "build", real_build)
    assert measure_point(_small(), QUICK).status == "ok"


def test_unexpected_exception_is_an_error_row(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("kernel exploded\nwith a second line")

    monkeypatch.setattr(workload_module, "build", broken)
    row = measure_point(_small(), QUICK)
    assert row.status == "error" and row.error == "RuntimeError: kernel exploded with a second line"


def test_fp16_overflow_is_recorded_not_raised():
    # Unscaled fp16 logits with input_std=100: q.k has std 100^2 * sqrt(64) = 8e4 > 65504,
    # so scores overflow to inf and softmax returns NaN. That is a measurement, not an error.
    point = _small(precision="fp16", scale="none", input_std=100.0, backend="naive")
    row = measure_point(point, QUICK)
    assert row.status == "ok", row.error
    assert row.nonfinite_frac > 0
    scaled = measure_point(dataclasses.replace(point, scale="auto", input_std=1.0), QUICK)
    assert scaled.status == "ok" and scaled.nonfinite_frac == 0.0


def test_stability_moves_the_right_way_at_dk_1024():
    # Unscaled logits at d_k=1024 have std ~ sqrt(1024) = 32: softmax is nearly one-hot.
    common = dict(heads=1, seq_len=256, head_dim=1024, backend="naive")
    unscaled = measure_point(Point(scale="none", **common), QUICK)
    scaled = measure_point(Point(scale="auto", **common), QUICK)
    assert unscaled.status == scaled.status == "ok"
    assert unscaled.logit_std == pytest.approx(32, rel=0.1) and scaled.logit_std == pytest.approx(1, rel=0.1)
    assert unscaled.max_weight > 0.9 and unscaled.saturated_frac > 0.5
    assert scaled.max_weight < 0.2 and scaled.saturated_frac == 0.0
    assert unscaled.softmax_entropy < 0.1 < 0.8 < scaled.softmax_entropy


@pytest.mark.parametrize(
    "kwargs",
    [{"mem_fraction": 0}, {"mem_fraction": 1.5}, {"max_point_s": -1}, {"timing_s": float("nan")},
     {"accuracy_rows": 0}, {"accuracy_rows": 2.5}, {"measure_device_peak": "yes"}],
)
def test_budget_rejects_bad_fields(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        Budget(**kwargs)


def test_without_device_peak_the_column_is_empty():
    row = measure_point(_small(), dataclasses.replace(QUICK, measure_device_peak=False))
    assert row.status == "ok" and row.device_peak_tflops is None and row.predicted_time_ms > 0


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["naive", "sdpa", "chunked"])
def test_cuda_point(backend):
    row = measure_point(Point(backend=backend, device="cuda", seq_len=1024, mode="fwd_bwd"), Budget(timing_s=0.1))
    assert row.status == "ok", row.error
    assert row.device == "cuda" and row.device_capability and row.peak_mem_bytes > 0
    assert row.time_ms_p20 <= row.time_ms <= row.time_ms_p80 and row.rel_rms_err < 1e-3


def test_cpu_allocation_failure_is_oom(monkeypatch):
    def huge(*args, **kwargs):
        return torch.empty(2**62, dtype=torch.uint8)  # the CPU allocator refuses at once

    monkeypatch.setattr(workload_module, "build", huge)
    row = measure_point(_small(), QUICK)
    assert row.status == "oom" and "allocate" in row.error


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the row of a machine without CUDA")
def test_cuda_point_without_cuda_is_unsupported_with_host_columns():
    row = measure_point(_small(device="cuda"), QUICK)
    assert row.status == "unsupported" and "cuda" in row.error.lower()
    assert row.device == "cuda" and row.hostname and row.torch_version and row.timestamp


@pytest.mark.parametrize("scope,q_len", [("core", None), ("core", 40), ("layer", None)], ids=["core", "core-q40", "layer"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fp64_point_matches_the_reference_exactly(scope, q_len, causal):
    # In float64 the back end and the reference do the same math: any indexing or alignment slip
    # in the sampled-row reference (rows, causal offset, layer projections) would show here.
    point = _small(precision="fp64", scope=scope, q_len=q_len, causal=causal, mode="fwd_bwd", batch=2)
    row = measure_point(point, QUICK)
    assert row.status == "ok", row.error
    assert row.rel_rms_err < 1e-12 and row.grad_rel_rms_err < 1e-12


def test_failed_point_leaves_no_memory_behind(monkeypatch):
    from selfattn.measure.memory import rss_bytes

    def allocate_then_fail(*args, **kwargs):
        held = torch.ones(64 * 2**20)  # 256 MiB, referenced from the failing frame
        raise torch.OutOfMemoryError(f"CUDA out of memory while holding {held.numel()} floats")

    measure_point(_small(), QUICK)  # warm everything up first
    before = rss_bytes()
    if before is None:
        pytest.skip("needs /proc")
    monkeypatch.setattr(workload_module, "build", allocate_then_fail)
    assert measure_point(_small(), QUICK).status == "oom"
    assert rss_bytes() - before < 64 * 2**20
