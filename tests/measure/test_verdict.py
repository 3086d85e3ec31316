"""The tolerance rule (selfattn/measure/verdict.py) and the checks a kernel cannot cheat (checks.py).

Negative controls: an output just inside and just outside its bound, non-finite values the plain
reference shares and ones it does not, an input written in place, a cached answer, a late wrong one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from selfattn.measure.checks import InputGuard, LastOutput
from selfattn.measure.verdict import EPS, K, K_WIDE, judge, within
from selfattn.point import Point

TESTS = str(Path(__file__).resolve().parents[1])


def _tensors(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(2, 3, 4, 8, generator=g, dtype=torch.float64)
    plain = ref + 1e-3 * torch.randn(ref.shape, generator=g, dtype=torch.float64)
    return ref, plain


def test_an_output_just_inside_its_bound_passes_and_just_outside_fails():
    ref, plain = _tensors()
    eps = EPS[torch.float16]
    first = judge(ref, ref, plain, eps=eps)
    bound = first.bound
    assert bound == pytest.approx(K * float((plain - ref).abs().max()) + 2 * eps * float(ref.abs().max()))
    inside, outside = ref.clone(), ref.clone()
    inside[1, 2, 3, 4] += 0.999 * bound
    outside[1, 2, 3, 4] += 1.001 * bound
    assert judge(inside, ref, plain, eps=eps).ok
    verdict = judge(outside, ref, plain, eps=eps, plain_name="plain fp16")
    assert not verdict.ok and verdict.error == pytest.approx(1.001 * bound)
    assert "error" in verdict.reason and "bound" in verdict.reason and "plain fp16 reference" in verdict.reason
    assert "\n" not in verdict.reason


def test_the_bound_follows_k_and_the_scaled_plain_error():
    ref, plain = _tensors()
    err_plain = float((plain - ref).abs().max())
    wide = judge(ref, ref, plain, eps=0.0, k=K_WIDE)
    assert wide.bound == pytest.approx(K_WIDE * err_plain)
    scaled = judge(ref, ref, plain, eps=0.0, plain_scale=EPS[torch.float64] / EPS[torch.float32])
    assert scaled.bound == pytest.approx(K * err_plain * 2.0 ** -29)


def test_a_row_the_plain_reference_overflows_in_too_is_measured_not_judged():
    ref, plain = _tensors()
    out = ref.clone()
    out[0, 0, 0] = float("nan")  # the kernel's row overflowed ...
    plain[0, 0, 0, 3] = float("inf")  # ... and the plain same-dtype reference's did too: the dtype's overflow
    assert judge(out, ref, plain, eps=EPS[torch.float16]).ok


def test_a_non_finite_output_where_both_references_are_finite_is_incorrect_in_every_dtype():
    ref, plain = _tensors()
    out = ref.clone()
    out[1, 0, 2, 5] = float("inf")
    for eps in EPS.values():
        verdict = judge(out, ref, plain, eps=eps)
        assert not verdict.ok and verdict.nonfinite == 1 and "non-finite" in verdict.reason


def test_lists_of_gradients_are_judged_as_one_vector():
    ref, plain = _tensors()
    grads = [ref, ref[0, 0]]
    assert judge(grads, grads, [plain, plain[0, 0]], eps=0.0).ok
    wrong = [ref, ref[0, 0] + 1.0]
    assert not judge(wrong, grads, [plain, plain[0, 0]], eps=0.0).ok


def test_within_holds_the_checked_calls_bound():
    ref, plain = _tensors()
    assert within(ref + 0.5e-3, ref, plain, 1e-3, what="last") == ""
    assert "last error" in within(ref + 2e-3, ref, plain, 1e-3, what="last")
    nan = ref.clone()
    nan[0, 0, 0, 0] = float("nan")
    assert "non-finite" in within(nan, ref, plain, 1e-3, what="last")


def test_the_input_guard_names_the_input_written_into():
    q, k = torch.randn(2, 3), torch.randn(2, 3)
    guard = InputGuard({"q": q, "k": k})
    assert guard.changed("the warm-up call") == ""
    k.mul_(2)
    assert guard.changed("the warm-up call") == "modified its input k (found after the warm-up call)"


def test_last_output_keeps_the_last_call_only():
    calls = iter(range(5))
    last = LastOutput(lambda: next(calls))
    for _ in range(3):
        last.call()
    assert last.take() == 2 and last.take() is None


@pytest.mark.parametrize("name, words", [
    ("top_left_causal", "output error"), ("batch_offset", "output error"), ("writes_input", "modified its input q"),
    ("cached", "output of the last timed call (on its own fresh inputs)"), ("wrong_when_timed", "timed call (on its own fresh inputs)"),
])
def test_measure_point_marks_each_bad_kernel_incorrect_and_keeps_its_time(name, words, monkeypatch):
    from selfattn.measure import measure_point
    from selfattn.measure.budget import Budget

    monkeypatch.syspath_prepend(TESTS)
    point = Point(backend=f"plugins_for_tests.bad_kernels:{name}", batch=2, heads=2, seq_len=32, q_len=8,
                  head_dim=8, causal=True)
    row = measure_point(point, Budget(timing_s=0.01, accuracy_rows=8, measure_device_peak=False))
    assert row.status == "incorrect", row.error
    assert words in row.error and row.time_ms is not None and row.err_bound is not None


def test_a_correct_plugin_and_the_builtins_stay_ok_with_every_metric_and_with_none(monkeypatch):
    from selfattn.measure import measure_point
    from selfattn.measure.budget import Budget

    monkeypatch.syspath_prepend(TESTS)
    budget = Budget(timing_s=0.01, accuracy_rows=8, measure_device_peak=False)
    for backend in ("plugins_for_tests.bad_kernels:blocked_window", "naive", "sdpa", "chunked"):
        for metrics in (("accuracy",), ()):
            row = measure_point(Point(backend=backend, batch=2, heads=2, seq_len=32, q_len=8, head_dim=8, causal=True),
                                budget, metrics=metrics)
            assert row.status == "ok", (backend, row.error)
            assert row.err_bound > 0
            assert (row.max_abs_err is not None) == bool(metrics)
            if metrics:
                assert row.max_abs_err <= row.err_bound


def test_gradients_are_judged_and_bounded(monkeypatch):
    from selfattn.measure import measure_point
    from selfattn.measure.budget import Budget

    row = measure_point(Point(backend="chunked", mode="fwd_bwd", heads=2, seq_len=32, head_dim=8, causal=True),
                        Budget(timing_s=0.01, accuracy_rows=8, measure_device_peak=False))
    assert row.status == "ok", row.error
    assert row.grad_max_abs_err <= row.grad_err_bound


def test_an_fp32_nan_is_incorrect_not_an_error(monkeypatch, tmp_path):
    from selfattn.measure import measure_point
    from selfattn.measure.budget import Budget

    (tmp_path / "nan_attn.py").write_text(
        "import torch\n"
        "def nan_attn(q, k, v, *, causal, window, key_lengths, document_ids, scale):\n"
        "    return torch.full_like(q, float('nan'))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    row = measure_point(Point(backend="nan_attn:nan_attn", heads=2, seq_len=16, head_dim=8),
                        Budget(timing_s=0.01, accuracy_rows=4, measure_device_peak=False))
    assert row.status == "incorrect" and "non-finite" in row.error, row.error
