"""Noisy rows in the analysis: counted in the summary, and a timing claim resting on them is not decided."""

from __future__ import annotations

import pandas as pd

from analysis.claim import FAILS, HOLDS, NOT_DECIDED_BUSY, ClaimSpec, Evidence
from analysis.noise import noise_note, noisy_counts


def frame(noisy: list[bool]) -> pd.DataFrame:
    n = len(noisy)
    return pd.DataFrame({"status": ["ok"] * n, "backend": ["naive"] * n, "seq_len": [64 * 2 ** i for i in range(n)],
                         "time_ms": [float(2 ** i) for i in range(n)], "peak_alloc_bytes": [1000.0 * 4 ** i for i in range(n)],
                         "noisy": noisy})


def timed(rows: pd.DataFrame) -> Evidence:
    growth = rows["time_ms"].iloc[-1] / rows["time_ms"].iloc[0]
    return Evidence(f"time x{growth:.2f}", passes=(growth > 4,))


def memory(rows: pd.DataFrame) -> Evidence:
    growth = rows["peak_alloc_bytes"].iloc[-1] / rows["peak_alloc_bytes"].iloc[0]
    return Evidence(f"memory x{growth:.2f}", passes=(growth > 4,))


def spec(read) -> ClaimSpec:
    return ClaimSpec("k", "statement", "rule", "experiment=x", "study", read)


def test_a_timing_claim_on_noisy_points_is_not_decided():
    assert spec(timed).check(frame([False] * 4)).verdict == HOLDS  # quiet rows: the verdict as before
    claim = spec(timed).check(frame([False, True, False, True]))
    assert claim.verdict == f"{NOT_DECIDED_BUSY} (2 of 4 points measured on a busy machine)"
    assert claim.evidence == "time x8.00"  # the evidence still says what was measured
    # every point noisy: a claim on a ratio of times must not escape (one factor for all would leave it unmoved)
    assert spec(timed).check(frame([True] * 4)).verdict == f"{NOT_DECIDED_BUSY} (4 of 4 points measured on a busy machine)"


def test_a_claim_that_reads_no_noisy_time_keeps_its_verdict():  # negative controls
    assert spec(memory).check(frame([True] * 4)).verdict == HOLDS  # memory: noise in the time does not move it
    fails = spec(lambda rows: Evidence("x", passes=(False,)))
    assert fails.check(frame([True] * 4)).verdict == FAILS  # reads nothing that moves: stays


def test_the_summary_counts_noisy_points():
    rows = frame([False, True, True])
    assert noisy_counts(rows) == (2, 3)
    assert noise_note(rows).startswith("; 2 of 3 ok points noisy")
    assert noise_note(frame([False, False])) == ""
    assert noise_note(rows.drop(columns=["noisy"])) == ""  # an older file: nothing measured to say so
