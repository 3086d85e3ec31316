"""The attention-vs-recurrence study: its claims from rows that obey them and rows that contradict them
(the negative controls), and figure 18."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from analysis.claim import FAILS, HOLDS, NOT_DECIDED
from analysis.claims import check_claims
from analysis.figures.common import Context, Made, Skipped
from analysis.figures.recurrence import sensitivity_vs_distance
from analysis.load import load
from analysis.recurrence import RECURRENCE
from selfattn.results import Row

D_MODEL, PEAK = 128, 0.1
SIZES = (32, 128, 512)


def _distances(n: int) -> list[int]:
    out, k = [0], 1
    while k < n - 1:
        out.append(k)
        k *= 2
    return out + [n - 1]


def _row(scope: str, n: int, decay: float, tflops: float, mode: str = "fwd") -> dict:
    """A row whose sensitivity at distance k is decay**k (1 at every k >= 1 for decay 1)."""
    pairs = [[k, 2.0 if k == 0 else decay ** k] for k in _distances(n)]
    values = dict(status="ok", backend="sdpa" if scope == "layer" else "naive", backend_options="{}", kernel="k",
                  precision="fp32", device="cpu", device_name="Fake CPU 9000", hostname="host-a", mode=mode, scope=scope, batch=1, heads=4,
                  kv_heads=4, q_len=n, seq_len=n, head_dim=D_MODEL // 4, d_model=D_MODEL, causal=False, scale="auto",
                  input_std=1.0, seed=0, time_ms=1.0, tflops=tflops, device_peak_tflops=PEAK,
                  grad_by_distance=json.dumps(pairs), grad_far_near_ratio=pairs[-1][1] / pairs[1][1],
                  timestamp="2026-12-01T00:00:00+00:00")
    return {**Row().to_dict(), **values}


def study_rows(rnn_decay: float = 0.5, layer_decay: float = 1.0, rnn_tflops: float = 0.005,
               sizes=SIZES) -> list[dict]:
    rows = []
    for n in sizes:
        rows += [_row("layer", n, layer_decay, 0.05), _row("lstm", n, rnn_decay, rnn_tflops),
                 _row("gru", n, rnn_decay, rnn_tflops)]
    return rows


def verdicts(tmp_path: Path, rows: list[dict]) -> dict:
    path = tmp_path / "results.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return {c.key: c for c in check_claims(load([path], warn=False).rows, RECURRENCE)}


KEYS = ("rnn_path_decays", "attention_path_flat", "rnn_flops_below")


def test_every_claim_holds_on_lawful_rows(tmp_path):
    found = verdicts(tmp_path, study_rows())
    assert {k: found[k].verdict for k in KEYS} == dict.fromkeys(KEYS, HOLDS)
    assert "n=512" in found["rnn_path_decays"].evidence and "lstm" in found["rnn_flops_below"].evidence


def test_an_rnn_that_keeps_its_memory_does_not_hold(tmp_path):  # negative control: no decay
    assert verdicts(tmp_path, study_rows(rnn_decay=1.0))["rnn_path_decays"].verdict == FAILS


def test_an_rnn_ratio_that_rises_with_n_does_not_hold(tmp_path):  # small, but not falling
    rows = study_rows()
    for row in rows:
        if row["scope"] == "lstm":
            row["grad_far_near_ratio"] = 1e-3 * row["seq_len"] / 512
    assert verdicts(tmp_path, rows)["rnn_path_decays"].verdict == FAILS


def test_underflow_to_zero_at_every_n_is_not_decided(tmp_path):
    rows = study_rows()
    for row in rows:  # every far gradient underflowed float64 to 0
        if row["scope"] != "layer":
            row["grad_far_near_ratio"] = 0.0
    verdict = verdicts(tmp_path, rows)["rnn_path_decays"].verdict
    assert verdict.startswith(NOT_DECIDED) and "underflowed" in verdict


def test_underflow_after_a_measured_ratio_is_falling_and_two_zeros_are_not_compared(tmp_path):
    rows = study_rows(sizes=(32, 128, 512, 2048))
    for row in rows:
        if row["scope"] != "layer" and row["seq_len"] >= 512:
            row["grad_far_near_ratio"] = 0.0
    assert verdicts(tmp_path, rows)["rnn_path_decays"].verdict == HOLDS
    for row in rows:  # a measured ratio after an underflow: it rose
        if row["scope"] == "lstm" and row["seq_len"] == 2048:
            row["grad_far_near_ratio"] = 1e-30
    assert verdicts(tmp_path, rows)["rnn_path_decays"].verdict == FAILS


def test_attention_that_decays_with_distance_does_not_hold(tmp_path):  # negative control
    assert verdicts(tmp_path, study_rows(layer_decay=0.9))["attention_path_flat"].verdict == FAILS


def test_attention_whose_far_token_dominates_does_not_hold(tmp_path):
    rows = study_rows()
    rows[0]["grad_far_near_ratio"] = 5.0
    assert verdicts(tmp_path, rows)["attention_path_flat"].verdict == FAILS


def test_an_rnn_as_fast_as_attention_does_not_hold(tmp_path):  # negative control
    assert verdicts(tmp_path, study_rows(rnn_tflops=0.04))["rnn_flops_below"].verdict == FAILS


def test_the_flops_claim_is_judged_at_the_largest_matched_n(tmp_path):
    rows = study_rows()
    for row in rows:  # the smallest calls are fixed costs: an RNN as fast there does not decide it
        if row["scope"] == "lstm" and row["seq_len"] == 32:
            row["tflops"] = 0.05
    found = verdicts(tmp_path, rows)["rnn_flops_below"]
    assert found.verdict == HOLDS and "n=32 1.00" in found.evidence
    for row in rows:
        if row["scope"] == "lstm" and row["seq_len"] == 512:
            row["tflops"] = 0.05
    assert verdicts(tmp_path, rows)["rnn_flops_below"].verdict == FAILS


def _at_d_model(rows: list[dict], d_model: int) -> list[dict]:
    return [{**r, "d_model": d_model, "head_dim": d_model // 4} for r in rows]


def test_the_flops_claim_is_judged_at_the_largest_d_model(tmp_path):
    small = study_rows(rnn_tflops=0.04)  # d_model 128: an RNN near the layer (weights in cache, one busy core)
    rows = small + _at_d_model(study_rows(), 512)
    found = verdicts(tmp_path, rows)["rnn_flops_below"]
    assert found.verdict == HOLDS
    assert "d_model=128 fwd: RNN/layer n=32 0.80" in found.evidence and "(quoted, not judged)" in found.evidence
    assert "d_model=512 fwd: RNN/layer n=32 0.10" in found.evidence
    rows = study_rows() + _at_d_model(study_rows(rnn_tflops=0.04), 512)  # negative control: the largest fails
    assert verdicts(tmp_path, rows)["rnn_flops_below"].verdict == FAILS


def test_the_flops_claim_judges_each_mode_at_its_own_largest_d_model(tmp_path):
    rows = study_rows() + _at_d_model([r for r in study_rows() if r["scope"] != "gru"], 512)
    rows += [{**r, "mode": "fwd_bwd"} for r in study_rows(rnn_tflops=0.04)]  # fwd_bwd at d_model 128 only
    found = verdicts(tmp_path, rows)["rnn_flops_below"]
    assert found.verdict == FAILS
    parts = {part.split(": RNN/layer")[0]: part for part in found.evidence.split("; ")}
    assert "not judged" not in parts["Fake CPU 9000 gru d_model=128 fwd"]  # gru fwd ran at d_model 128 only
    assert "not judged" in parts["Fake CPU 9000 lstm d_model=128 fwd"]
    assert "not judged" not in parts["Fake CPU 9000 lstm d_model=128 fwd_bwd"]


def test_the_flops_claim_compares_only_matched_points(tmp_path):
    rows = [r for r in study_rows() if not (r["scope"] == "layer" and r["seq_len"] == 512)]
    rows.append(_row("lstm", 2048, 0.5, 1.0))  # no layer at n=2048: not compared
    found = verdicts(tmp_path, rows)["rnn_flops_below"]
    assert found.verdict == HOLDS and "n=512" not in found.evidence


def test_no_study_rows_no_claims_and_a_skipped_figure(tmp_path):
    rows = [_row("layer", 64, 1.0, 0.05)]
    rows[0].update(scope="core", grad_by_distance="", grad_far_near_ratio=None)
    assert verdicts(tmp_path, rows) == {}
    path = tmp_path / "results.csv"
    made = sensitivity_vs_distance(load([path], warn=False).rows, Context(tmp_path / "figs", formats=("png",)))
    assert isinstance(made, Skipped)


def test_the_figure_draws_every_scope(tmp_path):
    rows = study_rows(rnn_decay=0.3)
    path = tmp_path / "results.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    made = sensitivity_vs_distance(load([path], warn=False).rows, Context(tmp_path / "figs", formats=("png",)))
    assert isinstance(made, Made) and made.files[0].stat().st_size > 10_000
    assert any(note.startswith("lstm n=512: far/near") for note in made.notes)


def test_the_recurrence_rows_leave_the_other_claims_as_they_were(tmp_path, fabricate):
    base = fabricate().default_sweep()
    before = {c.key: c.verdict for c in check_claims(load([base.write(tmp_path / "a.csv")], warn=False).rows)}
    base.rows += study_rows()
    after = {c.key: c.verdict for c in check_claims(load([base.write(tmp_path / "b.csv")], warn=False).rows)}
    assert {k: v for k, v in after.items() if k not in KEYS} == before
