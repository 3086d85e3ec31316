"""Each claim's verdict follows the data: it holds on data that obey the chapter and flips on data that don't."""

import pytest

from analysis.claims import FAILS, HOLDS, NOT_DECIDED, NOT_MEASURED, check_claims
from analysis.load import load


def verdicts(tmp_path, fabricator) -> dict:
    path = fabricator.write(tmp_path / "results.csv")
    return {c.key: c for c in check_claims(load([path], warn=False).rows)}


@pytest.fixture
def lawful(tmp_path, fabricate):
    return verdicts(tmp_path, fabricate().quadratic_cost().scaling_stability())


def test_data_obeying_the_chapter_make_every_claim_hold_except_measured_exceptions(lawful):
    expected_hold = ["memory_quadratic", "chunked_linear", "compute_quadratic", "causal_half", "scaled_std_one",
                     "unscaled_std_sqrt", "unscaled_saturates", "fp16_overflows", "scale_prevents_overflow"]
    assert {k: lawful[k].verdict for k in expected_hold} == {k: HOLDS for k in expected_hold}
    assert "b=" in lawful["memory_quadratic"].evidence and "4K→128K" in lawful["memory_quadratic"].evidence


@pytest.mark.parametrize("laws, claim", [
    (dict(mem_exponent=1.0), "memory_quadratic"),
    (dict(time_exponent=1.0), "compute_quadratic"),
    (dict(causal_saving=1.0), "causal_half"),
    (dict(unscaled_std_grows=False), "unscaled_std_sqrt"),
    (dict(unscaled_std_grows=False), "unscaled_saturates"),
], ids=["memory-linear", "time-linear", "no-causal-saving", "unscaled-std-flat", "no-saturation"])
def test_contradicting_data_flip_the_verdict(tmp_path, fabricate, lawful, laws, claim):
    broken = verdicts(tmp_path, fabricate(laws=laws).quadratic_cost().scaling_stability())
    assert lawful[claim].verdict == HOLDS
    assert broken[claim].verdict == FAILS, broken[claim].evidence


def test_gradient_claim_follows_the_median_row_gradient_at_the_logits(tmp_path, fabricate, lawful):
    broken = verdicts(tmp_path, fabricate(laws=dict(unscaled_std_grows=False)).scaling_stability())
    grad = lawful["unscaled_grad_vanishes"]
    assert grad.verdict == HOLDS, grad.evidence
    assert broken["unscaled_grad_vanishes"].verdict == FAILS, broken["unscaled_grad_vanishes"].evidence
    assert "median per-row ‖∂L/∂logits‖" in grad.evidence and "∂L/∂Q" not in grad.evidence


def test_missing_experiments_are_not_measured_and_name_what_to_run(tmp_path, fabricate):
    only_cost = verdicts(tmp_path, fabricate().quadratic_cost())
    for key in ("scaled_std_one", "unscaled_std_sqrt", "unscaled_saturates", "fp16_overflows"):
        assert only_cost[key].verdict == NOT_MEASURED, key
        assert "scaling_stability" in only_cost[key].experiment
    assert only_cost["memory_quadratic"].verdict == HOLDS


@pytest.mark.parametrize("input_std, verdict", [(1.0, NOT_MEASURED), (37.0, FAILS)],
                         ids=["far-from-65504", "near-65504-yet-finite"])
def test_fp16_without_overflow_is_not_measured_or_fails_depending_on_the_regime(tmp_path, fabricate, input_std,
                                                                              verdict):
    # s=37, d_k=64: unscaled logit std 37²·8 ≈ 11000, max ≈ 40000 < 65504: the regime was reached, no overflow
    f = fabricate()
    for scale in ("auto", "none"):
        f.point(precision="fp16", head_dim=64, scale=scale, seq_len=256, input_std=input_std)
    claims = verdicts(tmp_path, f)
    assert claims["fp16_overflows"].verdict == verdict, claims["fp16_overflows"].evidence
    assert claims["scale_prevents_overflow"].verdict == NOT_MEASURED


def test_noisy_fits_are_listed_but_decide_nothing(tmp_path, fabricate):
    # Three sizes: Theil-Sen's interval is the range of the three pairwise slopes, wide under this much noise,
    # and too few sizes for the cost model: not decided, never a coin flip
    claims = verdicts(tmp_path, fabricate(laws={"noise": 1.0}).quadratic_cost(sizes=(256, 512, 1024)))
    for key in ("memory_quadratic", "compute_quadratic"):
        claim = claims[key]
        assert claim.verdict.startswith(NOT_DECIDED), claim.evidence
        # the verdict and the evidence give one reason: how many sizes the model needs
        assert "needs 5 or more sizes" in claim.verdict, claim.verdict
        assert "undecided (too few sizes for the model (it needs 5))" in claim.evidence
        assert "more seq_len values" in claim.experiment


def test_a_verdict_that_holds_never_sits_beside_an_undecided_judgement(tmp_path, fabricate):
    # Three sizes: no cost model, yet chunked's memory exponent is plainly linear (b <= 1.3, precise), which the
    # rule accepts; its evidence says that, not the growth judgement's "undecided" the verdict overrules
    claims = verdicts(tmp_path, fabricate(laws={"noise": 0.01}).quadratic_cost(sizes=(256, 512, 1024)))
    chunked = claims["chunked_linear"]
    assert chunked.verdict == HOLDS, chunked.evidence
    assert "undecided" not in chunked.evidence and "at most linear by its exponent (b <= 1.3" in chunked.evidence
    for claim in claims.values():  # and no claim of the chapter does otherwise
        if claim.verdict == HOLDS and "undecided" in claim.evidence:
            assert ", not counted" in claim.evidence, (claim.key, claim.evidence)


def test_a_claim_whose_metric_was_off_says_so_and_ignores_the_empty_cells(tmp_path, fabricate):
    from analysis.claim import METRIC_OFF

    f = fabricate().quadratic_cost().scaling_stability()
    for row in f.rows:
        row["metrics"] = "accuracy,stability,permutation"  # memory off everywhere: its cells empty, as measured
        row["peak_mem_bytes"] = row["peak_alloc_bytes"] = None
    found = verdicts(tmp_path, f)
    assert found["memory_quadratic"].verdict == f"{METRIC_OFF} (memory)"
    assert found["chunked_linear"].verdict == f"{METRIC_OFF} (memory)"
    assert found["compute_quadratic"].verdict == HOLDS and found["scaled_std_one"].verdict == HOLDS  # time, stability: on


def test_rows_that_left_a_metric_out_are_not_read_even_when_their_cells_hold_numbers(tmp_path, fabricate):
    from analysis.claim import METRIC_OFF

    f = fabricate().scaling_stability()
    # the negative control: values that contradict the claim, in rows that say stability did not run
    for row in f.rows:
        row["metrics"] = "memory"
        row["logit_std"] = 1e3
    assert verdicts(tmp_path, f)["scaled_std_one"].verdict == f"{METRIC_OFF} (stability)"
    for row in f.rows:
        row["metrics"] = "stability"  # the same numbers, now said to be measured: the claim reads them and fails
    assert verdicts(tmp_path, f)["scaled_std_one"].verdict == FAILS
    for row in f.rows:
        row["metrics"] = ""  # a row written before the key existed measured every metric
    assert verdicts(tmp_path, f)["scaled_std_one"].verdict == FAILS
