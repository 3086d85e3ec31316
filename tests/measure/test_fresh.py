"""Fresh inputs (selfattn/measure/fresh.py): every refresh is new, keeps the inputs' distribution and can be written
again; the step between timed calls is never in their time; the timed outputs are judged on their own inputs."""

from __future__ import annotations

import math
import time

import pytest
import torch

from selfattn.measure import fresh as fresh_inputs
from selfattn.measure.timing import plan, time_call


def test_refreshes_never_repeat_and_never_return_to_the_base():
    angles = [fresh_inputs.angle(i) for i in range(20_000)]
    assert len(set(angles)) == len(angles)
    assert min(angles) >= fresh_inputs.ANGLE_MIN - 1e-12
    assert max(angles) <= 2 * math.pi - fresh_inputs.ANGLE_MIN + 1e-12


def test_write_is_in_place_reproducible_and_keeps_the_distribution():
    torch.manual_seed(0)
    q = torch.randn(2, 4, 512, 32) * 3.0
    base, ptr = q.clone(), q.data_ptr()
    fresh = fresh_inputs.FreshInputs({"q": q})
    seen = []
    for _ in range(5):
        version = q._version
        index = fresh.refresh()
        assert q.data_ptr() == ptr and q._version > version  # the same tensor, written: a version-keyed cache misses
        assert not torch.equal(q, base)
        assert 2.7 < float(q.std()) < 3.3  # the draw's scale kept
        seen.append((index, q.clone()))
    for a in range(len(seen)):
        for b in range(a + 1, len(seen)):
            assert not torch.equal(seen[a][1], seen[b][1])
    index, values = seen[2]
    fresh.write(index)
    assert torch.equal(q, values)  # set i written again is set i, bit for bit: call i's output can be judged
    fresh.restore()
    assert torch.equal(q, base)


def test_one_decode_query_still_gets_new_values():
    q = torch.randn(1, 1, 1, 16)
    fresh = fresh_inputs.FreshInputs({"q": q})
    before = q.clone()
    fresh.refresh()
    assert not torch.equal(q, before) and not torch.allclose(q.abs(), before.abs())


def test_the_step_between_calls_is_not_timed():
    slow_between = lambda: time.sleep(0.002)  # noqa: E731
    timing = time_call(lambda: None, "cpu", 0.05, 1e-6, between=slow_between)
    assert timing.timer == "cpu_fresh"
    assert timing.median_ms < 0.5  # the 2 ms sleeps between calls are not in the calls' time
    assert 3 <= timing.samples <= 40  # but they share the window: the point costs what it did


def test_fresh_plan_counts_calls_per_sample():
    assert plan("cpu", 1e-3, 0.1, fresh=True).timer == "cpu_fresh"
    assert plan("cpu", 1e-3, 0.1, fresh=True).timed_calls == 100
    assert plan("cpu", 1.0, 0.1, fresh=True).timed_calls == 3


def test_the_last_timed_output_is_kept_and_the_inputs_restored():
    q = torch.randn(1, 1, 8, 4)
    base = q.clone()
    fresh = fresh_inputs.FreshInputs({"q": q})
    calls = fresh_inputs.FreshCalls(lambda: q * 2, fresh, lambda out: out)
    for _ in range(5):
        calls.between()
        calls.call()
    assert calls.finish() == ""
    assert torch.equal(q, base)
    last_index, last = calls.kept["last"]
    assert last_index == 4 and list(calls.kept) == ["last"]
    fresh.write(last_index)
    assert torch.equal(last, q * 2)


def test_an_input_written_during_the_timed_calls_is_found():
    q = torch.randn(1, 1, 8, 4)

    def writes():
        q.mul_(0.5)
        return q

    calls = fresh_inputs.FreshCalls(writes, fresh_inputs.FreshInputs({"q": q}), lambda out: out)
    for _ in range(3):
        calls.between()
        calls.call()
    assert calls.finish() == "modified its input q (found after the timed calls)"


@pytest.mark.parametrize("name, status", [("bshd_plain", "ok"), ("bshd_pointer_cache", "incorrect"),
                                          ("pointer_cache", "incorrect"), ("right_first_call", "incorrect"),
                                          ("memo_identity", "ok"), ("memo_fingerprint", "ok")])
def test_a_refresh_reaches_what_the_back_end_reads(name, status, monkeypatch):
    from pathlib import Path

    from selfattn.measure import measure_point
    from selfattn.measure.budget import Budget
    from selfattn.point import Point

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    point = Point(backend=f"plugins_for_tests.cheats:{name}", heads=2, seq_len=48, head_dim=8, device="cpu")
    row = measure_point(point, Budget(timing_s=0.01, accuracy_rows=8, measure_device_peak=False), metrics=())
    assert row.status == status, row.error
    if status == "incorrect":
        assert "timed call (on its own fresh inputs)" in row.error


@pytest.mark.parametrize("axes", [dict(), dict(heads=4, kv_heads=1, q_len=16), dict(scope="layer"),
                                  dict(precision="bf16"), dict(precision="fp8_e4m3", backend="naive"), dict(scope="generate", causal=True)],
                         ids=["core", "gqa-q_len", "layer", "bf16", "fp8-stored-fp32", "generate-no-refresh"])
def test_the_guard_counts_what_the_refresh_allocates(axes):
    """value_bytes is what FreshInputs copies (its base and partner), for every scope and stored dtype."""
    from selfattn.backends.resolved import resolve_point
    from selfattn.measure import boundary, workload
    from selfattn.point import Point
    from selfattn.precision import precision_context

    point = Point(**{"backend": "sdpa", "heads": 2, "seq_len": 48, "head_dim": 8, "device": "cpu", **axes})
    resolved = resolve_point(point, "cpu")
    with precision_context(point.precision, "cpu"):
        built = workload.build(point, resolved.storage_dtype, torch.device("cpu"),
                               boundary.point_rows(point, 8, resolved), resolved=resolved)
    fresh = fresh_inputs.for_workload(built)
    kept = 0 if fresh is None else sum(t.nbytes for copies in (fresh.base, fresh.partner) for t in copies.values())
    assert kept == fresh_inputs.KEPT_COPIES * fresh_inputs.value_bytes(point)
    assert (fresh is None) == (axes.get("scope") == "generate") and (kept > 0) == (fresh is not None)


def test_a_point_that_fits_only_without_the_fresh_copies_is_skipped(monkeypatch):
    """The guard's memory holds the refresh's copies: with room for the rest but not for them, skipped_budget."""
    from selfattn.measure import guard, measure_point
    from selfattn.measure.budget import Budget
    from selfattn.point import Point

    point = Point(backend="sdpa", heads=2, seq_len=4096, head_dim=64, device="cpu")
    held = fresh_inputs.held_bytes(point)
    assert held == 3 * 2 * 3 * 4096 * 64 * 4  # base, partner and the finish's snapshot of q, k, v in float32
    budget = Budget(timing_s=0.01, accuracy_rows=8, measure_device_peak=False, mem_fraction=1.0)
    needs = {}
    real_over = guard.over_budget

    def recording(point, budget, need_bytes, free_bytes, point_s, compile_s=0.0):
        needs.setdefault("first", need_bytes)
        needs["last"] = need_bytes
        return real_over(point, budget, need_bytes, free_bytes, point_s, compile_s)

    monkeypatch.setattr(guard, "over_budget", recording)
    monkeypatch.setattr(guard, "free_bytes", lambda device: 10**15)
    monkeypatch.setattr(guard, "predict_point_s", lambda *a, **k: 0.0)  # memory alone decides
    measure_point(point, budget, metrics=())  # what the guard asks for with room to spare
    need = needs["last"]
    monkeypatch.setattr(guard, "free_bytes", lambda device: need - held // 2)  # room for all but half the copies
    row = measure_point(point, budget, metrics=())
    assert row.status == "skipped_budget" and row.error.startswith("predicted memory"), row.error
    monkeypatch.setattr(fresh_inputs, "held_bytes", lambda point: 0)  # the guard as it was: it would have run it
    needs.clear()
    measure_point(point, Budget(timing_s=0.01, accuracy_rows=8, measure_device_peak=False, mem_fraction=1.0,
                                max_point_s=1e-9), metrics=())
    assert needs["last"] == need - held
