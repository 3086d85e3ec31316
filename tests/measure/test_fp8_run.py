"""precision=fp8_* through measure_point: ok rows with their FP8 columns, and the rows that say why not."""

from __future__ import annotations

import re

import pytest
import torch

from selfattn import Point
from selfattn.fp8_formats import SATURATES_FROM
from selfattn.inputs import add_outliers, make_qkv
from selfattn.measure import Budget, measure_point
from selfattn.measure.traffic import bytes_moved

QUICK = Budget(timing_s=0.02, accuracy_rows=32, max_point_s=600.0)


def _fp8(**fields) -> Point:
    return Point(**{"heads": 2, "seq_len": 128, "head_dim": 64, "precision": "fp8_e4m3", **fields})


@pytest.mark.parametrize("backend", ["naive", "chunked"])
def test_an_fp8_row_is_ok_with_its_fp8_columns(backend):
    row = measure_point(_fp8(backend=backend, causal=True), QUICK)
    assert row.status == "ok", row.error
    assert "-fp8e4m3-tensor-p256-dequant" in row.kernel  # chunked auto appends the sizes it ran (":q256-kv512")
    assert 1e-3 < row.rel_rms_err < 0.2  # quantized: far from fp32's 1e-7, not broken
    assert 0 < row.fp8_saturated_frac < 0.01  # per-tensor scale: the largest value of each tensor sits at 448
    assert row.fp8_nonfinite_frac == 0 and row.raw_logit_nonfinite_frac == 0
    assert row.p_mass_err is not None and row.p_mass_err < 0.05
    assert row.kv_cache_bytes == 2 * 2 * 128 * 64  # one byte per element


def test_p_scale_256_loses_less_mass_than_no_scale():
    lost = {p: measure_point(_fp8(seq_len=512, backend_options={"p_scale": p}), QUICK).p_mass_err for p in (1.0, 256.0)}
    assert lost[256.0] < lost[1.0] / 3, lost


@pytest.mark.parametrize("precision,why", [("fp8_e4m3", "scaled_dot_product_attention"), ("fp8_e5m2", "flex")])
def test_sdpa_and_flex_are_unsupported_rows_saying_why(precision, why):
    row = measure_point(_fp8(precision=precision, backend="sdpa" if "scaled" in why else "flex"), QUICK)
    assert row.status == "unsupported" and "no FP8" in row.error or "none taking FP8" in row.error, row.error


@pytest.mark.parametrize("scope", ["lstm", "gru", "train"])
def test_fp8_recurrent_and_training_scopes_are_unsupported_rows(scope):
    mode = "fwd_bwd" if scope == "train" else "fwd"  # a training run has its backward
    row = measure_point(Point(scope=scope, mode=mode, precision="fp8_e4m3", seq_len=32, heads=2, head_dim=16), QUICK)
    assert row.status == "unsupported" and "no FP8 path" in row.error, row.error


def test_fp8_backward_is_an_unsupported_row():
    row = measure_point(_fp8(mode="fwd_bwd"), QUICK)
    assert row.status == "unsupported" and "fwd_bwd" in row.error


@pytest.mark.parametrize("change,key", [
    ({"head_dim": 48, "backend_options": {"hadamard": True}}, "backend.hadamard"),
    ({"backend_options": {"fp8_scaling": "rows"}}, "fp8_scaling"),
    ({"backend_options": {"fp8_block": 0}}, "fp8_block"),
    ({"precision": "fp32", "backend_options": {"fp8_scaling": "block"}}, "backend.fp8_scaling"),
    ({"backend_options": {"fp8": "e5m2"}}, "backend.fp8"),
    ({"outlier_std": 5.0}, "outlier_std"),
])
def test_bad_fp8_input_is_an_invalid_row_naming_the_key(change, key):
    row = measure_point(_fp8(**change), QUICK)
    assert row.status == "invalid" and re.match(rf"(ValueError: )?(backend\.)?{re.escape(key)}: ", row.error), row.error


def test_raw_cast_logits_saturate_where_the_float64_logits_pass_432():
    """scale=none, large inputs: the raw-cast logit column against an independent count."""
    point = _fp8(scale="none", input_std=6.0, seq_len=64, backend_options={"fp8_scaling": "none"})
    row = measure_point(point, QUICK)
    assert row.status == "ok", row.error
    q, k, _ = make_qkv(1, 2, 64, 64, 64, std=6.0, seed=0)
    logits = q.double() @ k.double().transpose(-1, -2)
    from selfattn.measure.accuracy import sample_rows

    rows = sample_rows(64, 32, 0)
    expected = float((logits[:, :, rows].abs() >= SATURATES_FROM["e4m3"]).double().mean())
    assert expected > 0.01 and row.raw_logit_saturated_frac == pytest.approx(expected, abs=2e-3)


def test_outliers_hit_the_asked_share_of_entries_and_leave_the_rest_bit_identical():
    plain = make_qkv(1, 4, 512, 512, 64, seed=1)
    with_outliers = make_qkv(1, 4, 512, 512, 64, seed=1, outliers=0.01, outlier_std=10.0)
    changed = torch.cat([(a != b).flatten() for a, b in zip(plain, with_outliers)])
    assert abs(float(changed.double().mean()) - 0.01) < 0.002
    extra = torch.cat([(b - a)[a != b].flatten() for a, b in zip(plain, with_outliers)])
    assert 8 < float(extra.std()) < 12
    assert add_outliers(plain, 0.0, 10.0) is plain


def test_fp8_bytes_are_one_per_element():
    point = _fp8(seq_len=1000, head_dim=64, heads=4)
    fp16 = Point(heads=4, seq_len=1000, head_dim=64, precision="fp16")
    assert 2 * bytes_moved(point) == bytes_moved(fp16) and 2 * point.kv_bytes == fp16.kv_bytes


def test_a_generation_with_an_fp8_cache_is_ok_and_counts_one_byte_per_element():
    point = Point(precision="fp8_e4m3", scope="generate", causal=True, heads=2, head_dim=16, seq_len=64, new_tokens=4)
    row = measure_point(point, QUICK)
    assert row.status == "ok", row.error
    assert "-dequant" in row.kernel and row.tokens_per_s > 0
    assert row.kv_cache_bytes == 2 * 2 * 64 * 16
    assert 1e-3 < row.rel_rms_err < 0.3


def test_a_decode_step_with_an_fp8_cache_is_ok():
    row = measure_point(_fp8(backend="chunked", q_len=1, causal=True, seq_len=256), QUICK)
    assert row.status == "ok", row.error
    assert row.gbps > 0 and row.bytes_moved == (2 * 64 + 2 * 2 * 256 * 64 + 2 * 64)


@pytest.mark.parametrize("backend", ["naive", "chunked"])
def test_the_fp8_memory_model_covers_the_measured_peak(backend):
    row = measure_point(_fp8(backend=backend, heads=4, seq_len=1024), QUICK)
    assert row.status == "ok", row.error
    assert row.peak_alloc_bytes <= row.predicted_mem_bytes <= 4 * row.peak_alloc_bytes


def test_fp8_with_additive_scores_is_an_unsupported_row_not_an_fp32_run_under_an_fp8_label():
    row = measure_point(Point(backend="naive", score="additive", precision="fp8_e4m3", seq_len=32, heads=2,
                              head_dim=16), QUICK)
    assert row.status == "unsupported" and "score=additive" in row.error and "no FP8 path" in row.error, row.error
    plain = measure_point(Point(backend="naive", score="dot", precision="fp8_e4m3", seq_len=32, heads=2, head_dim=16),
                          QUICK)
    assert plain.status == "ok"  # the control: the dot product of the same point runs in FP8
