"""Noise: what a timed window saw of the machine, and the limits that flag a row noisy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from selfattn.measure import noise
from selfattn.measure.timing import MAX_KEPT_SAMPLES, kept_samples, summarize, time_call


def test_judge_flags_spread_and_busy_cpu_by_their_limits():
    quiet = noise.judge(0.05, 0.10, "cpu")
    assert not quiet.noisy and quiet.reason == ""
    wide = noise.judge(noise.CPU_SPREAD_LIMIT + 0.05, 0.0, "cpu")
    assert wide.noisy and wide.reason.startswith("spread 105% > 100%")
    # a CPU's quiet scatter (up to 0.7 on the default sweep) is no busy machine; on CUDA 15% already is
    assert not noise.judge(0.7, 0.0, "cpu").noisy and noise.judge(0.15, None, "cuda").noisy
    assert noise.judge(0.15, 0.0, "cpu", spread_limit=0.10).noisy  # budget.noise_spread set: the same limit everywhere
    busy = noise.judge(0.01, noise.OTHER_CPU_LIMIT + 0.2, "cpu")
    assert busy.noisy and "others 45% of the CPU > 25%" in busy.reason
    assert not noise.judge(0.01, 0.9, "cuda").noisy  # a CUDA point: its spread judges, not the host's CPU
    assert not noise.judge(0.01, None, "cpu").noisy  # not measurable here: the spread alone


def test_other_cpu_frac_is_others_ticks_over_the_machine():
    tick = os.sysconf("SC_CLK_TCK")
    before = noise.Sample(busy_ticks=1000, self_ticks=100, wall_s=10.0)
    after = noise.Sample(busy_ticks=1000 + 2 * tick, self_ticks=100 + tick, wall_s=11.0)  # 2 s busy, 1 of them ours
    assert noise.other_cpu_frac(before, after, cpus=2) == pytest.approx(0.5)
    assert noise.other_cpu_frac(before, noise.Sample(1, 1, 10.05), cpus=2) is None  # too short to resolve
    assert noise.other_cpu_frac(None, after) is None


def test_a_row_keeps_its_samples_in_order_and_at_most_the_limit():
    timing = summarize([3.0, 1.0, 2.0])
    assert timing.samples_ms == (3.0, 1.0, 2.0) and timing.median_ms == 2.0
    assert kept_samples(timing.samples_ms) == [3.0, 1.0, 2.0]
    many = tuple(float(i) for i in range(5 * MAX_KEPT_SAMPLES, 0, -1))
    kept = kept_samples(many)
    assert len(kept) == MAX_KEPT_SAMPLES and kept == sorted(kept)
    assert kept[0] < 10 and kept[-1] > 5 * MAX_KEPT_SAMPLES - 10  # the whole range, evenly spaced


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs Linux's /proc")
def test_busy_processes_beside_the_timer_are_seen():
    """One spinning process per core while a call that sleeps is timed: others took most of the machine."""
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.3)  # let them start spinning
        timing = time_call(lambda: time.sleep(0.002), "cpu", 0.5, 0.002)
    finally:
        for process in spin:
            process.kill()  # by its PID: only what this test started
            process.wait()
    assert timing.other_cpu_frac is not None and timing.other_cpu_frac > noise.OTHER_CPU_LIMIT
    assert noise.judge(0.0, timing.other_cpu_frac, "cpu").noisy


def test_measure_point_fills_the_noise_columns():
    from selfattn.measure import measure_point
    from selfattn.measure.budget import Budget
    from selfattn.point import Point

    row = measure_point(Point(backend="sdpa", seq_len=64, heads=1, head_dim=8, device="cpu"),
                        Budget(timing_s=0.05, measure_device_peak=False), metrics=())
    assert row.status == "ok", row.error
    samples = json.loads(row.time_samples_ms)
    assert len(samples) == min(row.time_samples, MAX_KEPT_SAMPLES) and all(s > 0 for s in samples)
    assert row.time_spread == pytest.approx((row.time_ms_p80 - row.time_ms_p20) / row.time_ms)
    assert isinstance(row.noisy, bool) and (row.noise != "") == row.noisy
