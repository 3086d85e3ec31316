"""results.csv's columns are a contract: the schema derived from Point, the outcome and the metrics' declarations
(selfattn/results.py) gives exactly the columns, in exactly the order, that the files already written have."""

from __future__ import annotations

import dataclasses

import pytest

from selfattn import results
from selfattn.point import FIELD_NAMES
from selfattn.results import COLUMNS, Row

# results.csv's header (schema 2): columns may be added after it, never renamed, removed or moved
HEADER = (
    "status", "error", "metrics", "backend", "backend_source", "backend_path", "mem_model", "backend_defaulted",
    "kernel", "backend_options", "precision", "device", "device_name", "mode", "scope", "batch", "heads",
    "kv_heads", "q_len", "seq_len", "head_dim", "d_model", "causal", "window", "pad_frac", "documents",
    "new_tokens", "kv_cache", "steps", "lr", "mask_density", "scale", "scale_value", "score", "pos_enc",
    "input_std", "input_outliers", "outlier_std", "softcap", "alibi", "sink", "mask", "mask_options", "score_mod",
    "score_mod_options", "seed", "time_ms", "time_ms_p20", "time_ms_p80", "time_samples", "timer",
    "time_samples_ms", "timing_mode", "call_time_ms", "kernel_time_ms", "kernel_time_ms_p20", "kernel_time_ms_p80",
    "launch_overhead_ms", "kernel_time_note", "l2", "time_spread", "other_cpu_frac", "noisy", "noise",
    "own_cpu_frac", "gpu_sm_clock_mhz", "gpu_mem_clock_mhz", "gpu_power_w", "gpu_temp_c", "gpu_throttle",
    "throttled", "gpu_state", "compile_s", "recompiled", "block_mask_s", "peak_mem_bytes", "peak_alloc_bytes",
    "predicted_mem_bytes", "predicted_time_ms", "flops", "tflops", "device_peak_tflops", "bytes_moved", "gbps",
    "device_peak_gbps", "device_peak_tflops_source", "device_peak_gbps_source", "floor_ms", "floor_of", "spec_gpu",
    "spec_tflops", "spec_gbps", "mfu_pct", "bw_pct", "tokens_per_s", "kv_cache_bytes", "computed_as", "note",
    "accuracy_rows", "max_abs_err", "rel_rms_err", "nonfinite_frac", "grad_max_abs_err", "grad_rel_rms_err",
    "err_bound", "grad_err_bound", "logit_std", "softmax_entropy", "max_weight", "saturated_frac", "grad_norm_q",
    "grad_norm_k", "grad_norm_logits", "grad_nonfinite_frac", "perm_max_abs_diff", "grad_by_distance",
    "grad_far_near_ratio", "loss_at_25pct", "loss_at_50pct", "loss_at_75pct", "loss_final", "final_accuracy",
    "steps_to_target_acc", "nonfinite_steps", "nonfinite_loss_steps", "scaler_startup_skips", "loss_curve",
    "rope_shift_max_abs_diff", "fp8_saturated_frac", "fp8_nonfinite_frac", "p_mass_err", "raw_logit_saturated_frac",
    "raw_logit_nonfinite_frac", "measure_s", "job_wall_s", "point_wall_s", "jobs_sharing_device",
    "device_capability", "device_mem_bytes", "driver_version", "cuda_version", "cpu_model", "num_threads",
    "hostname", "torch_version", "git_sha", "timestamp", "schema_version", "point_id", "sweep_id"
)


def test_the_derived_columns_are_the_header_in_its_order():
    """Every column the header has, in its place; a new metric's columns may only follow them."""
    assert COLUMNS[:len(HEADER)] == HEADER


def test_every_point_field_and_every_metric_column_is_a_column_of_its_type():
    from selfattn.metrics import DECLARED

    kinds = {f.name: f.type for f in dataclasses.fields(Row)}
    assert set(FIELD_NAMES) <= set(COLUMNS)
    for metric in DECLARED:
        for column, kind in metric.columns.items():
            assert kinds[column] == ("str" if kind is str else f"{kind.__name__} | None"), column
    assert kinds["window"] == "int | None" and kinds["backend_options"] == "str" and kinds["scale"] == "str"


def test_a_row_refuses_a_name_that_is_no_column():
    row = Row(status="ok", seq_len=64, peak_mem_bytes=1)
    assert (row.seq_len, row.peak_mem_bytes, row.max_abs_err, row.error) == (64, 1, None, "")
    with pytest.raises(AttributeError):
        row.seqlen = 64  # a typo is an error, not a new attribute
    with pytest.raises(TypeError):
        Row(seqlen=64)


def test_a_column_placed_after_no_column_is_refused():
    with pytest.raises(ValueError, match="follow a column no group declares"):
        results._ordered([["a", "b"], ["c"]], {"c": "nowhere"})


def test_order_follows_groups_and_places():
    groups = [["status", "time_ms", "end"], ["backend", "batch"], ["m1", "m2"], ["late"]]
    places = {"backend": "status", "m1": "backend", "m2": "time_ms"}
    assert results._ordered(groups, places) == ["status", "backend", "m1", "batch", "time_ms", "m2", "end", "late"]
