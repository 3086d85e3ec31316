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
