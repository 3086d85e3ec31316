"""Verdicts that survive a noisy machine, and the claims added beside the cost and stability ones.

Each test builds rows that obey the chapter (the claim holds) and rows that break it in one way
(the verdict flips), so none of them could pass whatever the code did.
"""

import math
import re

import numpy as np
import pytest
from scipy import stats

from analysis.claims import FAILS, HOLDS, NOT_DECIDED, check_claims
from analysis.cost import crossover_n, flop_core_share, layer_shares
from analysis.fit import fit_power_law, upper_sizes
from analysis.load import load
from analysis.stability import AFTER, BEFORE, FUSED, predicted_nonfinite_frac, scale_placement

SIZES = np.array([1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096], dtype=float)


def claims_of(tmp_path, fabricator) -> dict:
    path = fabricator.write(tmp_path / "results.csv")
    return {c.key: c for c in check_claims(load([path], warn=False).rows)}


# --- fits ---------------------------------------------------------------------------------------

def test_one_point_slowed_by_load_moves_the_exponent_little_and_keeps_the_interval_narrow():
    y = 1e-6 * SIZES ** 2
    y[3] *= 3.0  # a burst of load tripled one point's time
    fit = fit_power_law(SIZES, y)
    assert abs(fit.exponent - 2.0) < 0.1
    assert (fit.ci_high - fit.ci_low) / 2 <= 0.5
    assert fit.ci_low <= 2.0 <= fit.ci_high
    assert fit.left_out == 1792 and "outlier n=1792 left out" in fit.label()
    assert fit_power_law(SIZES, 1e-6 * SIZES ** 2).left_out is None  # clean data keep every size
    # least squares follows the outlier further
    assert abs(stats.linregress(np.log(SIZES), np.log(y)).slope - 2.0) > abs(fit.exponent - 2.0)


def test_fit_uses_the_top_octave_and_a_half_when_it_holds_more_than_half():
    sizes = np.array([512, 1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096])
    assert list(upper_sizes(sizes)) == [1536, 1792, 2048, 2560, 3072, 3584, 4096]
    assert list(upper_sizes(np.array([256, 512, 1024, 2048, 4096]))) == [1024, 2048, 4096]


def test_time_per_size_is_the_faster_repeat_so_a_burst_on_one_pass_does_not_count(tmp_path, fabricate):
    f = fabricate()
    for seed in (0, 1):
        for n in SIZES.astype(int):
            f.point(backend="sdpa", seq_len=int(n), seed=seed)
    for row in f.rows:
        if row["seed"] == 1 and row["seq_len"] in (1280, 2048, 3072):
            row["time_ms"] *= 4.0  # a burst during the second pass
    claim = claims_of(tmp_path, f)["compute_quadratic"]
    assert claim.verdict == HOLDS, claim.evidence


QUICK_SIZES = (512, 1024, 1536, 1792, 2048, 2304, 2560, 2816, 3072)  # the quick study's cost grid, timed twice


def cost_claims(tmp_path, fabricate, **laws) -> dict:
    return claims_of(tmp_path, fabricate(laws=laws).quadratic_cost(sizes=QUICK_SIZES, repeats=2))


def test_time_as_n_to_the_1_5_with_no_fixed_cost_does_not_hold(tmp_path, fabricate):
    claim = cost_claims(tmp_path, fabricate, time_exponent=1.5, time_fixed_ms=0.0)["compute_quadratic"]
    assert claim.verdict == FAILS, claim.evidence
    assert "naive" in claim.evidence and "sub-quadratic" in claim.evidence


def test_time_with_a_large_fixed_cost_plus_n2_holds_though_its_slope_is_far_below_two(tmp_path, fabricate):
    # sdpa's n² part is 1.024e-4·n² ms (966 ms at n=3072): a fixed 483 ms leaves the n² term 2/3 of the time
    # there, its local slope 1.3 and the slope over the top sizes lower still, which a band around 2 would call "does not hold".
    claims = cost_claims(tmp_path, fabricate, time_fixed_ms=483.0)
    claim = claims["compute_quadratic"]
    assert claim.verdict == HOLDS, claim.evidence
    exponents = [float(b) for b in re.findall(r"b=([0-9.]+)", claim.evidence)]
    assert len(exponents) == 3 and max(exponents) < 1.5, claim.evidence  # every local slope far below the band


def test_memory_as_n_to_the_1_5_with_no_fixed_cost_does_not_hold(tmp_path, fabricate):
    claim = cost_claims(tmp_path, fabricate, mem_exponent=1.5, mem_fixed_bytes=0.0)["memory_quadratic"]
    assert claim.verdict == FAILS, claim.evidence


def test_memory_with_a_large_fixed_part_plus_n2_holds(tmp_path, fabricate):
    # naive's n² part is 64·n² bytes (604 MB at n=3072); a fixed 302 MB leaves it 2/3 of the peak there
    claims = cost_claims(tmp_path, fabricate, mem_fixed_bytes=302e6)
    assert claims["memory_quadratic"].verdict == HOLDS, claims["memory_quadratic"].evidence
    assert claims["chunked_linear"].verdict == HOLDS, claims["chunked_linear"].evidence


def test_chunked_memory_growing_as_n2_breaks_the_linear_claim(tmp_path, fabricate):
    f = fabricate().quadratic_cost(sizes=QUICK_SIZES, repeats=2)
    for row in f.rows:
        if row["backend"] == "chunked" and row["status"] == "ok":
            row["peak_alloc_bytes"] = 2e6 + 16.0 * row["seq_len"] ** 2
    assert claims_of(tmp_path, f)["chunked_linear"].verdict == FAILS


def test_too_noisy_lines_are_not_decided_and_say_what_would_decide_them(tmp_path, fabricate):
    # One pass with 25% noise per point: the scatter between points hides the curve's shape
    f = fabricate(laws={"noise": 0.25}, seed=4).quadratic_cost(sizes=(1536, 1792, 2048, 2304, 2560, 2816, 3072))
    claim = claims_of(tmp_path, f)["compute_quadratic"]
    assert claim.verdict.startswith(NOT_DECIDED), claim.evidence
    assert "longer timing" in claim.experiment
    flat = fabricate(laws={"noise": 0.25, "time_exponent": 1.0}, seed=4).quadratic_cost(
        sizes=(1536, 1792, 2048, 2304, 2560, 2816, 3072))
    assert claims_of(tmp_path, flat)["compute_quadratic"].verdict != HOLDS  # naive and sdpa grow as n, not n²


# --- memory: the allocator's exact peak, not RSS -----------------------------------------------

def test_memory_claims_read_the_allocator_peak_when_rss_is_noise(tmp_path, fabricate):
    f = fabricate().quadratic_cost(sizes=tuple(int(n) for n in SIZES))
    rng = np.random.default_rng(0)
    for row in f.rows:
        if row["status"] == "ok":
            row["peak_mem_bytes"] = int(rng.uniform(0, 8 * 2**20))  # a few MiB of RSS noise, no trend
    claims = claims_of(tmp_path, f)
    assert claims["memory_quadratic"].verdict == HOLDS, claims["memory_quadratic"].evidence
    assert claims["chunked_linear"].verdict == HOLDS, claims["chunked_linear"].evidence
    for row in f.rows:
        row["peak_alloc_bytes"] = None  # an older CSV: only RSS, so the noise decides
    assert claims_of(tmp_path, f)["memory_quadratic"].verdict != HOLDS


# --- causal saving: the median over the fitted sizes ---------------------------------------------

def test_causal_saving_survives_one_slow_causal_point_at_the_largest_n(tmp_path, fabricate):
    f = fabricate().quadratic_cost(sizes=tuple(int(n) for n in SIZES))
    for row in f.rows:
        if row["backend"] == "chunked" and row["causal"] and row["seq_len"] == 4096:
            row["time_ms"] *= 3.0
    assert claims_of(tmp_path, f)["causal_half"].verdict == HOLDS
    broken = fabricate(laws=dict(causal_saving=1.0)).quadratic_cost(sizes=tuple(int(n) for n in SIZES))
    assert claims_of(tmp_path, broken)["causal_half"].verdict == FAILS


# --- fp16 overflow: where the scale goes --------------------------------------------------------

def test_gaussian_tail_prediction_places_the_overflow_where_s2_sqrt_dk_nears_65504():
    s = np.array([1.0, 16.0, 32.0, 48.0, 64.0])
    unscaled = predicted_nonfinite_frac(s, 64, 128, unscaled_product=True)
    assert unscaled[:3].max() < 1e-6  # std 8192 at s=32: 65504 is 8 sigma away
    assert unscaled[-1] > 0.9  # std 32768 at s=64: 2 sigma, ~2% of 128 logits per row
    assert np.all(np.diff(unscaled) >= 0)
    assert predicted_nonfinite_frac(64.0, 1024, 128, unscaled_product=False) < 1e-12  # std s² = 4096
    assert predicted_nonfinite_frac(64.0, 64, 128, unscaled_product=True, precision="bf16") == 0.0


def test_scale_placement_follows_the_naive_option_and_fused_kernels():
    assert scale_placement("naive", '{"scale_at": "logits", "upcast_softmax": false}') == AFTER
    assert scale_placement("naive", "") == AFTER  # older rows: the chapter's order was the only one
    assert scale_placement("naive", '{"scale_at": "query"}') == BEFORE
    assert scale_placement("sdpa", "{}") == FUSED


@pytest.fixture
def overflow_rows(fabricate):
    f = fabricate(seed=3)
    for d in (64, 256):
        for s in (1.0, 16.0, 32.0, 48.0, 64.0):
            for scale in ("auto", "none"):
                f.point(precision="fp16", seq_len=128, head_dim=d, scale=scale, input_std=s)
                f.point(backend="sdpa", precision="fp16", seq_len=128, head_dim=d, scale=scale, input_std=s)
            f.point(precision="fp16", seq_len=128, head_dim=d, scale="auto", input_std=s, scale_at="query")
    return f


def test_scale_keeps_fp16_finite_only_before_the_product(tmp_path, overflow_rows):
    claims = claims_of(tmp_path, overflow_rows)
    assert claims["fp16_overflows"].verdict == HOLDS, claims["fp16_overflows"].evidence
    prevents = claims["scale_prevents_overflow"]
    assert prevents.verdict == HOLDS, prevents.evidence
    assert "scale on Q first finite" in prevents.evidence and "sdpa" in prevents.evidence


def test_overflow_with_the_scale_on_q_first_breaks_the_finding(tmp_path, overflow_rows):
    for row in overflow_rows.rows:
        if '"query"' in row["backend_options"] and row["input_std"] == 64.0:
            row["nonfinite_frac"] = 1.0
    assert claims_of(tmp_path, overflow_rows)["scale_prevents_overflow"].verdict == FAILS


def test_overflow_far_from_the_prediction_fails(tmp_path, overflow_rows):
    for row in overflow_rows.rows:
        if row["backend"] == "naive" and row["scale"] == "none" and row["input_std"] == 16.0:
            row["nonfinite_frac"] = 0.8  # predicted ~0: std 16²·8 = 2048 is 32 sigma from 65504
    assert claims_of(tmp_path, overflow_rows)["fp16_overflows"].verdict == FAILS


# --- permutation equivariance -------------------------------------------------------------------

def test_permutation_claim_holds_without_a_mask_and_says_the_mask_breaks_it(tmp_path, fabricate):
    f = fabricate().quadratic_cost(sizes=(256, 512, 1024))
    claim = claims_of(tmp_path, f)["permutation_equivariant"]
    assert claim.verdict == HOLDS and "causal (must break)" in claim.evidence
    for row in f.rows:
        if row["backend"] == "sdpa" and not row["causal"]:
            row["perm_max_abs_diff"] = 0.3  # a back end that looked at positions
    assert claims_of(tmp_path, f)["permutation_equivariant"].verdict == FAILS


def test_a_causal_mask_that_did_not_break_equivariance_fails(tmp_path, fabricate):
    f = fabricate().quadratic_cost(sizes=(256, 512, 1024))
    for row in f.rows:
        if row["causal"]:
            row["perm_max_abs_diff"] = 1e-7  # the mask was not applied
    assert claims_of(tmp_path, f)["permutation_equivariant"].verdict == FAILS


# --- d_k = d_model / h and the worked softmax example ------------------------------------------

def test_head_split_and_softmax_example_are_exact(tmp_path, fabricate):
    f = fabricate().heads()
    claims = claims_of(tmp_path, f)
    assert claims["head_dim_split"].verdict == HOLDS, claims["head_dim_split"].evidence
    assert claims["softmax_example"].verdict == HOLDS and "0.6285" in claims["softmax_example"].evidence
    f.rows[0]["flops"] *= 2  # a head count whose work differs
    assert claims_of(tmp_path, f)["head_dim_split"].verdict == FAILS


# --- the cost table: attention core vs projections ---------------------------------------------

def layer_rows(fabricate, share_of):
    """Core and layer rows of sdpa at d_model = 4 x 64 = 256, the core's time share given by share_of(n)."""
    f = fabricate()
    for n in (128, 256, 512, 1024, 2048):
        core = f.point(backend="sdpa", seq_len=n, heads=4, head_dim=64, batch=4)
        layer = f.point(backend="sdpa", seq_len=n, heads=4, head_dim=64, batch=4, scope="layer")
        layer["time_ms"] = core["time_ms"] / share_of(n)
    return f


def test_layer_share_crossing_near_2_d_model_holds(tmp_path, fabricate):
    f = layer_rows(fabricate, lambda n: flop_core_share(n, 256) ** 0.8)  # a less efficient core: earlier
    claim = claims_of(tmp_path, f)["layer_crossover"]
    assert claim.verdict == HOLDS, claim.evidence
    shares = layer_shares(f.frame().assign(device_label="cpu"))
    assert len(shares) == 5 and shares["share"].is_monotonic_increasing
    assert crossover_n(shares["seq_len"].to_numpy(), shares["share"].to_numpy()) == pytest.approx(512, rel=0.3)


def test_layer_share_that_never_rises_fails(tmp_path, fabricate):
    f = layer_rows(fabricate, lambda n: 0.2)
    assert claims_of(tmp_path, f)["layer_crossover"].verdict == FAILS


def test_flop_share_is_one_half_at_n_equal_2_d_model():
    assert flop_core_share(512, 256) == pytest.approx(0.5)
    assert math.isnan(crossover_n(np.array([1, 2, 4]), np.array([0.1, 0.2, 0.3])))
