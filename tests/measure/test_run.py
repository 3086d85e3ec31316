"""measure_point end to end on the CPU: statuses, accuracy, stability and the row's columns."""

import dataclasses
import json

import pytest
import torch

import selfattn.measure.guard as guard_module
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
    monkeypatch.setattr(guard_module, "predict_point_s", lambda *args, **kwargs: 0.0)  # "free"
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


def test_ok_row_says_which_timer_measured_it_and_how_many_samples(monkeypatch):
    # every thread, as on a machine whose barriers do not collapse: the note must then be empty (whether this
    # machine's do is measure/threads.py's question, tested in tests/measure/test_threads.py)
    monkeypatch.setattr(run_module, "choose_threads",
                        lambda call, device, s, *budget_s: run_module.ThreadChoice(torch.get_num_threads(), 0.0, 0.0))
    row = measure_point(_small(), QUICK)
    assert row.status == "ok", row.error
    assert row.timer == "cpu_fresh" and row.time_samples >= 3
    assert row.computed_as == "fp32" and row.note == ""


def test_tf32_row_whose_kernel_ignores_the_flag_is_marked_as_fp32(monkeypatch):
    # On a CPU no kernel reads the TF32 flag, like SDPA's fused CUDA kernels: let tf32 run here
    # (it is Unsupported on a CPU) and the row must say it computed fp32.
    import selfattn.precision as precision_module

    monkeypatch.setattr(precision_module, "resolve_dtype", lambda precision, device="cpu": torch.float32)
    monkeypatch.setattr(precision_module, "tf32_reason", lambda device="cpu": None)  # capability.why_not asks it
    row = measure_point(_small(backend="sdpa", precision="tf32"), QUICK)
    assert row.status == "ok", row.error
    assert row.precision == "tf32" and row.computed_as == "fp32"
    assert "tf32 ignored" in row.note and "\n" not in row.note


def test_tflops_above_the_measured_peak_is_explained(monkeypatch):
    monkeypatch.setattr(guard_module, "predict_point_s", lambda *args, **kwargs: 0.0)
    for module in (guard_module, run_module):  # the guard's peak, and the one a faster call measures again
        monkeypatch.setattr(module, "device_peak_tflops", lambda *args, **kwargs: 1e-9)  # a peak every call beats
    row = measure_point(_small(), QUICK)
    assert row.status == "ok", row.error
    assert row.tflops > row.device_peak_tflops
    assert "above the measured fp32 GEMM peak" in row.note


@pytest.mark.parametrize("error, status", [
    (RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"), "oom"),
    (RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"), "oom"),
    (RuntimeError("cuDNN Frontend error: [cudnn_frontend] Error: No execution plans support the graph."), "unsupported"),
    (RuntimeError('"addmm_impl_cpu_" not implemented for \'Half\''), "unsupported"),
    (KeyError("boom"), "error"),
], ids=["cublas-alloc", "cuda-error-oom", "cudnn-no-plan", "no-dtype-kernel", "bug"])
def test_library_failures_map_to_their_status(monkeypatch, error, status):
    def failing(*args, **kwargs):
        raise error

    monkeypatch.setattr(workload_module, "build", failing)
    row = measure_point(_small(), QUICK)
    assert row.status == status, row.error
    assert "\n" not in row.error and row.error.startswith(type(error).__name__)


def test_error_row_keeps_its_traceback_for_the_runner(monkeypatch):
    from selfattn.measure import failures

    def broken(*args, **kwargs):
        raise KeyError("missing piece")

    monkeypatch.setattr(workload_module, "build", broken)
    assert measure_point(_small(), QUICK).status == "error"
    text = failures.take_traceback()
    assert text.startswith("Traceback") and "def broken" not in text and "in broken" in text and "KeyError" in text
    assert failures.take_traceback() == ""  # taken once
    monkeypatch.undo()
    monkeypatch.setattr(workload_module, "build", lambda *a, **k: (_ for _ in ()).throw(torch.OutOfMemoryError("x")))
    assert measure_point(_small(), QUICK).status == "oom" and failures.take_traceback() == ""  # only errors keep one


def test_runner_writes_the_traceback_of_an_error_row_next_to_it(tmp_path, monkeypatch):
    from runners import job

    def broken(*args, **kwargs):
        raise KeyError("missing piece")

    monkeypatch.setattr(workload_module, "build", broken)
    cfg = {"name": "t", "backend": {"name": "naive"}, "precision": {"name": "fp32"}, "device": "cpu",
           "heads": 2, "seq_len": 64, "head_dim": 16, "budget": {"timing_s": 0.02}, "wandb": {"mode": "disabled"}}
    context = job.JobContext(job_dir=tmp_path / "0", sweep_dir=tmp_path, multirun=True, index=0, sweep_id="t/x")
    row = job.run_job(cfg, context)
    assert row["status"] == "error" and row["error"] == "KeyError: 'missing piece'"
    text = (tmp_path / "0" / "error.txt").read_text()
    assert text.startswith("Traceback") and "in broken" in text and text.rstrip().endswith("KeyError: 'missing piece'")
    monkeypatch.undo()
    ok = job.run_job({**cfg, "seq_len": 32}, job.JobContext(job_dir=tmp_path / "1", sweep_dir=tmp_path, multirun=True,
                                                            index=1, sweep_id="t/x"))
    assert ok["status"] == "ok" and not (tmp_path / "1" / "error.txt").exists()


def _metric_columns(row) -> dict:
    from selfattn.metrics import METRICS

    return {m: {c: getattr(row, c) for c in columns} for m, columns in METRICS.items()}


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
def test_metrics_choose_what_a_point_measures_and_leave_the_rest_empty(mode, monkeypatch):
    from selfattn.metrics import ALL, METRICS

    # Every call on every thread: a busy machine can send one of these tiny points to one thread
    # (selfattn/measure/threads.py), and chunked's peak_alloc_bytes differs with its worker count
    monkeypatch.setattr(run_module, "choose_threads",
                        lambda call, device, s, *budget_s: run_module.ThreadChoice(torch.get_num_threads(), 0.0, 0.0))
    point = _small(backend="chunked", causal=True, mode=mode)
    every = measure_point(point, QUICK)
    assert every.status == "ok" and every.metrics == ",".join(ALL)
    full = _metric_columns(every)
    filled = {m for m, values in full.items() if all(v not in (None, "") for k, v in values.items()
                                                        if not k.startswith("grad_") or mode == "fwd_bwd")}
    # path length: scope=layer, lstm, gru only (test_path_length_is_a_metric_of_the_layer_scopes below)
    assert filled - {"path_length"} == set(ALL) - {"path_length"} and every.grad_far_near_ratio is None
    time_only = measure_point(point, QUICK, metrics=[])
    assert time_only.status == "ok" and time_only.metrics == "none" and time_only.time_ms > 0
    assert all(v in (None, "") for values in _metric_columns(time_only).values() for v in values.values())
    assert time_only.flops == every.flops and time_only.kv_cache_bytes == every.kv_cache_bytes
    for metric in ALL:  # each alone: its own columns, the same values as with every metric (timings aside)
        alone = measure_point(point, QUICK, metrics=[metric])
        assert alone.metrics == metric
        columns = _metric_columns(alone)
        for other, values in columns.items():
            if other != metric:
                assert all(v in (None, "") for v in values.values()), (metric, other, values)
        exact = {c: v for c, v in columns[metric].items() if c not in ("peak_mem_bytes", "gbps", "device_peak_gbps")}
        assert exact == {c: full[metric][c] for c in exact}, metric
        assert set(columns[metric]) == set(METRICS[metric])


def test_path_length_is_a_metric_of_the_layer_scopes():
    point = _small(backend="sdpa", scope="layer", seq_len=16)
    off = measure_point(point, QUICK, metrics=["accuracy"])
    on = measure_point(point, QUICK, metrics=["path_length"])
    assert off.status == on.status == "ok" and off.grad_far_near_ratio is None and not off.grad_by_distance
    assert on.metrics == "path_length" and on.grad_far_near_ratio is not None and on.grad_by_distance.startswith("[")
    assert on.rel_rms_err is None and off.rel_rms_err is not None


# --- positional encodings: every back end gets q and k rotated; the row's accuracy is against a float64 RoPE ---

@pytest.mark.parametrize("backend", ["naive", "sdpa", "chunked"])
@pytest.mark.parametrize("scope, pos_enc, extra", [
    ("core", "rope", {"causal": True}), ("core", "rope", {"q_len": 5, "kv_heads": 1}), ("layer", "rope", {}),
    ("layer", "sinusoidal", {"causal": True}), ("layer", "learned", {}),
], ids=["core-rope-causal", "core-rope-decode-gqa", "layer-rope", "layer-sinusoidal-causal", "layer-learned"])
@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
def test_a_positioned_point_matches_its_float64_reference(backend, scope, pos_enc, extra, mode):
    from selfattn.measure import measure_point
    from selfattn.measure.budget import Budget

    point = Point(backend=backend, scope=scope, pos_enc=pos_enc, mode=mode, seq_len=24, heads=2, head_dim=8, **extra)
    row = measure_point(point, Budget(timing_s=0.01, accuracy_rows=6, measure_device_peak=False))
    assert row.status == "ok", row.error
    assert row.rel_rms_err < 1e-5 and (mode == "fwd" or row.grad_rel_rms_err < 1e-5)
    assert row.pos_enc == pos_enc and (row.rope_shift_max_abs_diff is not None) == (pos_enc == "rope")
    assert row.rope_shift_max_abs_diff is None or row.rope_shift_max_abs_diff < 1e-5
