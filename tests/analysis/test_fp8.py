"""The FP8 study's claims on synthetic rows that obey them and on rows that contradict them (negative controls)."""

from __future__ import annotations

import itertools
import json
import math

import pandas as pd
import pytest

from analysis import fp8
from analysis.claim import FAILS, HOLDS, NOT_MEASURED, verdict_of

BASE = {"status": "ok", "device_label": "cpu", "backend": "naive", "scope": "core", "mode": "fwd", "batch": 1, "heads": 2,
        "causal": False, "scale": "auto", "input_std": 1.0, "outlier_std": 10.0, "seed": 0, "seq_len": 256}


def _row(precision, options, **values):
    return {**BASE, "precision": precision, "backend_options": json.dumps({"name": "naive", **options}), **values}


def error_rows(factor=1.6, lost_1=0.03, lost_256=0.001):
    """The error grid: per-tensor error 0.09 on outliers, block + Hadamard 0.09 / factor; 0.05 everywhere on Gaussian."""
    rows = []
    for precision, d, outliers, scaling, had, p in itertools.product(("fp8_e4m3", "fp8_e5m2"), (64, 128), (0.0, 0.001),
                                                                   ("tensor", "block"), (False, True), (1.0, 256.0)):
        err = 0.09 / factor if (outliers and scaling == "block" and had) else (0.09 if outliers else 0.05)
        lost = lost_1 if (p == 1 and precision == "fp8_e4m3") else lost_256
        rows.append(_row(precision, {"fp8_scaling": scaling, "hadamard": had, "p_scale": p}, head_dim=d,
                         input_outliers=outliers, rel_rms_err=err, max_abs_err=err * 5, p_mass_err=lost))
    for precision, outliers in itertools.product(("bf16", "fp16"), (0.0, 0.001)):
        rows.append(_row(precision, {}, head_dim=64, input_outliers=outliers, rel_rms_err=0.005, max_abs_err=0.02))
    return rows


def overflow_rows(shift=0.0):
    """Raw casts whose measured fractions are the Gaussian tail's of their logit std (plus `shift`)."""
    rows = []
    for precision, scale, s in itertools.product(("fp8_e4m3", "fp8_e5m2"), ("auto", "none"), (1, 8, 32, 128, 256)):
        sigma = s ** 2 * (1.0 if scale == "auto" else 8.0)
        fmt = precision[4:]
        rows.append(_row(precision, {"fp8_scaling": "none"}, head_dim=64, scale=scale, input_std=float(s),
                         scale_value=0.125 if scale == "auto" else 1.0, input_outliers=0.0, logit_std=sigma,
                         raw_logit_saturated_frac=float(fp8.predicted_saturated_frac(sigma, fmt)) + shift,
                         raw_logit_nonfinite_frac=float(fp8.predicted_nonfinite_frac(sigma, fmt)),
                         fp8_saturated_frac=float(fp8.predicted_saturated_frac(s, fmt)), rel_rms_err=0.5, max_abs_err=1.0))
    return rows


def frame(rows):
    return pd.DataFrame(rows)


def test_the_tail_prediction_is_the_normal_tail():
    assert float(fp8.tail(1.96)) == pytest.approx(0.05, abs=1e-3)
    assert float(fp8.predicted_saturated_frac(432.0, "e4m3")) == pytest.approx(math.erfc(1 / math.sqrt(2)))
    assert float(fp8.predicted_nonfinite_frac(1e9, "e4m3")) == 0.0  # e4m3 saturates, never inf
    assert float(fp8.predicted_nonfinite_frac(61440.0, "e5m2")) == pytest.approx(0.3173, abs=1e-4)


def test_block_hadamard_claim_holds_and_a_contradiction_fails():
    assert verdict_of(fp8.fp8_block_hadamard_beats_tensor(frame(error_rows(1.6)))) == HOLDS
    evidence = fp8.fp8_block_hadamard_beats_tensor(frame(error_rows(1.6)))
    assert "1.60" in evidence.text and "FA3 reports 2.6x" in evidence.text
    assert "block alone 0.09" in evidence.text and "rotation alone 0.09" in evidence.text
    assert verdict_of(fp8.fp8_block_hadamard_beats_tensor(frame(error_rows(1.0)))) == FAILS  # no gain: does not hold
    assert verdict_of(fp8.fp8_block_hadamard_beats_tensor(frame(error_rows(0.8)))) == FAILS


def test_block_hadamard_claim_judges_e4m3_and_reports_e5m2():
    """e5m2 rows that contradict the claim (no gain) leave e4m3's verdict, and the evidence gives e5m2's
    factor, its block scaling's alone and why it is not judged."""
    rows = [r if r["precision"] == "fp8_e4m3" else {**r, "rel_rms_err": 0.09} for r in error_rows(1.6)]
    evidence = fp8.fp8_block_hadamard_beats_tensor(frame(rows))
    assert verdict_of(evidence) == HOLDS
    assert "fp8_e4m3 (judged): median 1.60" in evidence.text
    assert "fp8_e5m2 (reported, not judged): median 1.00" in evidence.text
    assert "block scaling alone median 1.00" in evidence.text and fp8.E5M2_REASON in evidence.text


def test_block_hadamard_claim_fails_on_e4m3_whatever_e5m2_shows():
    """The negative control for the judged format: e4m3 without a gain does not hold, even beside an e5m2
    that gains (as FA3's baseline would)."""
    rows = [r if r["precision"] == "fp8_e5m2" else {**r, "rel_rms_err": 0.09 if r["input_outliers"] else 0.05}
            for r in error_rows(1.6)]
    evidence = fp8.fp8_block_hadamard_beats_tensor(frame(rows))
    assert verdict_of(evidence) == FAILS
    assert "fp8_e4m3 (judged): median 1.00" in evidence.text and "fp8_e5m2 (reported, not judged): median 1.60" in evidence.text


def test_block_hadamard_claim_pairs_rows_of_the_same_fp8_matmul():
    """Twins of one point with fp8_matmul=dequant (gpu_check's) pair with each other, not across: the dequant
    twins without a gain make the claim fail although the auto rows gain."""
    rows = error_rows(1.6)
    twins = [{**r, "backend_options": json.dumps({**json.loads(r["backend_options"]), "fp8_matmul": "dequant"}),
              "rel_rms_err": 0.09 if r["input_outliers"] else 0.05} for r in rows if r["precision"].startswith("fp8")]
    assert verdict_of(fp8.fp8_block_hadamard_beats_tensor(frame(rows))) == HOLDS
    evidence = fp8.fp8_block_hadamard_beats_tensor(frame(rows + twins))
    assert verdict_of(evidence) == FAILS and "(4 points" in evidence.text  # 2 auto pairs + 2 dequant, no cross pairs
    table = fp8.fp8_error_table(frame(rows + twins))
    assert "block64+H (dequant)" in set(table["Q/K/V"]) and "block64+H" in set(table["Q/K/V"])


def test_fp8_rows_do_not_decide_the_other_studies_claims(tmp_path, fabricate):
    from analysis.claims import check_claims
    from analysis.load import load

    def verdicts(f, name):
        claims = check_claims(load([f.write(tmp_path / name / "results.csv")], warn=False).rows)
        return {c.key: c.verdict for c in claims if c.study != fp8.FP8}

    f = fabricate().scaling_stability()
    before = verdicts(f, "before")
    broken = [{**row, "max_weight": 0.99, "softmax_entropy": 0.01, "logit_std": 50.0, "grad_norm_logits": 1.0}
              for row in f.rows if row["precision"] == "fp32"]
    f.rows += [{**row, "precision": "fp8_e4m3"} for row in broken]
    assert verdicts(f, "fp8") == before
    f.rows[-len(broken):] = [{**row, "precision": "fp64"} for row in broken]  # the same rows in a chapter precision
    assert verdicts(f, "fp64") != before


def test_block_hadamard_claim_without_outlier_rows_is_not_measured():
    rows = [r for r in error_rows() if r["input_outliers"] == 0]
    evidence = fp8.fp8_block_hadamard_beats_tensor(frame(rows))
    assert verdict_of(evidence) == NOT_MEASURED and evidence.experiment.startswith("fp8")


def test_p_scale_claim_holds_and_a_contradiction_fails():
    assert verdict_of(fp8.fp8_p_scale_keeps_mass(frame(error_rows()))) == HOLDS
    assert verdict_of(fp8.fp8_p_scale_keeps_mass(frame(error_rows(lost_1=0.001, lost_256=0.001)))) == FAILS
    assert verdict_of(fp8.fp8_p_scale_keeps_mass(frame(error_rows(lost_1=0.001, lost_256=0.01)))) == FAILS


def test_raw_cast_claim_holds_and_a_shifted_measurement_fails():
    assert verdict_of(fp8.fp8_raw_logits_saturate(frame(overflow_rows()))) == HOLDS
    assert verdict_of(fp8.fp8_raw_logits_saturate(frame(overflow_rows(shift=0.2)))) == FAILS


def test_raw_cast_claim_never_reaching_the_max_is_not_measured():
    rows = [r for r in overflow_rows() if r["input_std"] == 1]
    assert verdict_of(fp8.fp8_raw_logits_saturate(frame(rows))) == NOT_MEASURED


def test_without_fp8_rows_the_study_is_absent():
    rows = frame([_row("fp16", {}, head_dim=64, input_outliers=0.0, rel_rms_err=0.001, max_abs_err=0.01)])
    assert fp8.fp8_block_hadamard_beats_tensor(rows) is None
    assert fp8.fp8_p_scale_keeps_mass(rows) is None and fp8.fp8_raw_logits_saturate(rows) is None
    assert fp8.fp8_error_table(rows).empty


def test_error_table_sets_the_16_bit_formats_beside_fp8():
    table = fp8.fp8_error_table(frame(error_rows()))
    assert list(table["precision"].unique()) == ["fp8_e4m3", "fp8_e5m2", "bf16", "fp16"]
    row = table[(table["precision"] == "fp8_e4m3") & (table["Q/K/V"] == "block64+H") & (table["p_scale"] == "256")]
    assert row["outliers 0.001"].iloc[0].startswith("0.0562")
    assert table[table["precision"] == "bf16"]["outliers 0"].iloc[0].startswith("0.005")


@pytest.mark.parametrize("precisions", [("fp8_e4m3", "fp8_e5m2", "bf16", "fp16"), ("fp8_e4m3",)])
def test_the_fp8_figures_are_drawn(tmp_path, precisions):
    from analysis.figures.common import Context, Made
    from analysis.figures.fp8 import fp8_error, fp8_overflow

    rows = frame([r for r in error_rows() + overflow_rows() if r["precision"] in precisions])
    ctx = Context(out_dir=tmp_path, formats=("png",))
    for draw in (fp8_error, fp8_overflow):
        made = draw(rows, ctx)
        assert isinstance(made, Made) and all(path.exists() for path in made.files), made
