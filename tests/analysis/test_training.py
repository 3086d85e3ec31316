"""The training study's claims, table and figure, from rows made to obey (or break) them."""

from __future__ import annotations

import math

import pandas as pd

from analysis.claim import FAILS, HOLDS, NOT_DECIDED, NOT_MEASURED
from analysis.claims import check_claims, study_tables
from analysis.figures.common import Context, Made, Skipped
from analysis.figures.training import SMOOTH_STEPS, curves, training_curves
from analysis.load import load
from analysis.training import TRAINING
from selfattn.results import COLUMNS, Row, encode_curve

STEPS = 40


def _run(d_k: int, scale: str, seed: int, precision: str = "fp32", *, loss: float, accuracy: float,
         nonfinite: int = 0, startup: int = 0, reached: int | None = None) -> dict:
    """A finished run whose batch loss falls linearly from chance to `loss`."""
    chance = math.log(16)
    losses = [chance + (loss - chance) * step / STEPS for step in range(1, STEPS + 1)]
    row = Row(status="ok", backend="naive", backend_options="{}", kernel="materialized", precision=precision,
              device="cpu", device_name="cpu", mode="fwd_bwd", scope="train", batch=32, heads=128 // d_k, q_len=9,
              seq_len=9, head_dim=d_k, d_model=128, causal=False, scale=scale, input_std=1.0, seed=seed, steps=STEPS,
              lr=3e-3, loss_at_25pct=losses[9], loss_at_50pct=losses[19], loss_at_75pct=losses[29], loss_final=loss,
              final_accuracy=accuracy, steps_to_target_acc=reached, nonfinite_steps=nonfinite, nonfinite_loss_steps=0,
              scaler_startup_skips=startup if precision == "fp16" else None,
              logit_std=2.0 * math.sqrt(d_k) if scale == "none" else 2.0, max_weight=0.5, time_ms=5.0,
              loss_curve=encode_curve(losses, [accuracy] * STEPS), timestamp="2026-12-01T00:00:00+00:00")
    return row.to_dict()


def _rows(tmp_path, *, unscaled_loss: float = 2.7, scaled_loss: float = 0.1, scaled_acc: float = 0.98,
          fp16_unscaled_nonfinite: int = 2, fp16_scaled_nonfinite: int = 0, startup: int = 0) -> pd.DataFrame:
    rows = []
    for precision in ("fp32", "fp16"):
        for d_k in (16, 128):
            for seed in range(3):
                bad = precision == "fp16" and d_k == 128
                rows.append(_run(d_k, "auto", seed, precision, loss=scaled_loss, accuracy=scaled_acc, reached=30,
                                 nonfinite=(fp16_scaled_nonfinite if bad else 0) + startup, startup=startup))
                rows.append(_run(d_k, "none", seed, precision, loss=unscaled_loss, accuracy=0.1,
                                 nonfinite=(fp16_unscaled_nonfinite if bad else 0) + startup, startup=startup))
    pd.DataFrame(rows, columns=list(COLUMNS)).to_csv(tmp_path / "results.csv", index=False)
    return load([tmp_path], warn=False).rows


def _verdicts(rows: pd.DataFrame) -> dict[str, str]:
    return {c.key: c.verdict for c in check_claims(rows, study=TRAINING)}


def test_both_findings_hold_on_rows_that_obey_them(tmp_path):
    assert _verdicts(_rows(tmp_path)) == {"unscaled_learns_slower": HOLDS, "fp16_unscaled_nonfinite": HOLDS}
    evidence = {c.key: c.evidence for c in check_claims(_rows(tmp_path), study=TRAINING)}
    assert "fp32 d_k=128: loss scaled 0.10/0.10/0.10 vs unscaled 2.70/2.70/2.70" in evidence["unscaled_learns_slower"]
    assert "looked at: d_k 16-128, d_model 128, 40 steps of batch 32" in evidence["unscaled_learns_slower"]
    assert ("fp16 d_k=128 unscaled: 2/2/2 non-finite steps, of them 0/0/0 GradScaler start-up skips"
            in evidence["fp16_unscaled_nonfinite"])


def test_the_findings_fail_on_rows_that_contradict_them(tmp_path):  # the negative controls
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    verdicts = _verdicts(_rows(tmp_path / "a", unscaled_loss=0.12))
    assert verdicts["unscaled_learns_slower"] == FAILS  # unscaled ends within the margin: not slower
    assert _verdicts(_rows(tmp_path / "b", fp16_scaled_nonfinite=1))["fp16_unscaled_nonfinite"] == FAILS


def test_not_decided_when_scaled_runs_did_not_learn_or_nothing_overflowed(tmp_path):
    verdicts = _verdicts(_rows(tmp_path, scaled_loss=2.6, scaled_acc=0.2, fp16_unscaled_nonfinite=0))
    assert verdicts["unscaled_learns_slower"].startswith(NOT_DECIDED) and "needs more steps" in verdicts["unscaled_learns_slower"]
    assert verdicts["fp16_unscaled_nonfinite"].startswith(NOT_DECIDED)
    assert "needs logits near 65504" in verdicts["fp16_unscaled_nonfinite"]


def test_gradscalers_start_up_skips_are_not_counted_as_overflow(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    calibrating = _verdicts(_rows(tmp_path / "a", fp16_unscaled_nonfinite=0, startup=2))  # every run: 2 start-up skips
    assert calibrating["fp16_unscaled_nonfinite"].startswith(NOT_DECIDED)
    assert _verdicts(_rows(tmp_path / "b", startup=2))["fp16_unscaled_nonfinite"] == HOLDS  # 2 more in unscaled only


def test_a_non_finite_unscaled_loss_counts_as_slower(tmp_path):
    assert _verdicts(_rows(tmp_path, unscaled_loss=float("nan")))["unscaled_learns_slower"] == HOLDS


def test_without_train_rows_the_study_is_absent_and_the_figure_skipped(tmp_path):
    rows = _rows(tmp_path)
    core = rows.assign(scope="core")
    assert check_claims(core, study=TRAINING) == [] and study_tables(core, TRAINING) == []
    assert isinstance(training_curves(core, Context(tmp_path / "f", formats=("png",))), Skipped)
    fp32 = rows[rows["precision"] == "fp32"]
    assert _verdicts(fp32)["fp16_unscaled_nonfinite"] == NOT_MEASURED


def test_train_rows_stay_out_of_the_studies_of_calls(tmp_path):
    # e.g. the stability claims would read a train row's logit_std as a call's: every claim of calls finds nothing
    claims = [c for c in check_claims(_rows(tmp_path)) if c.study != TRAINING and c.key != "softmax_example"]
    assert claims and all(c.verdict == NOT_MEASURED for c in claims), [(c.key, c.verdict) for c in claims]


def test_the_table_and_the_figure_are_drawn_from_the_curves(tmp_path):
    rows = _rows(tmp_path)
    ((_, caption, table),) = study_tables(rows, TRAINING)
    assert len(table) == 8 and set(table["seeds"]) == {"3"} and "loss 25/50/75/100%" in table
    data = curves(rows)
    assert len(data) == len(rows) * STEPS
    one = data[(data["seed"] == 0) & (data["head_dim"] == 16) & (data["scale"] == "none") & (data["precision"] == "fp32")]
    expected = one["loss"].rolling(SMOOTH_STEPS, min_periods=1).mean()  # the smoothing, recomputed by hand below
    assert abs(one["loss_smooth"].iloc[SMOOTH_STEPS - 1] - one["loss"].iloc[:SMOOTH_STEPS].mean()) < 1e-12
    assert (one["loss_smooth"] == expected).all()
    made = training_curves(rows, Context(tmp_path / "f", formats=("png",)))
    assert isinstance(made, Made) and made.files[0].exists()
