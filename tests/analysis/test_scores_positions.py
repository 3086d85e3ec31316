"""The additive and positions claims follow the rows: they hold on rows that obey the chapter and flip on
synthetic rows that contradict it (the negative controls); their rows leave the other claims as they were."""

from __future__ import annotations

import pytest

from analysis.claims import FAILS, HOLDS, NOT_MEASURED, check_claims
from analysis.load import load

KEYS = ("dot_beats_additive", "positions_break_equivariance", "rope_relative", "rope_cost")


def verdicts(tmp_path, fabricator) -> dict:
    path = fabricator.write(tmp_path / "results.csv")
    return {c.key: c for c in check_claims(load([path], warn=False).rows)}


def additive_rows(f, *, time_factor=30.0, mem_factor=20.0):
    """Additive naive rows at the points of naive and sdpa dot-product rows, `time_factor` slower and
    `mem_factor` larger than naive's."""
    for n in (256, 512):
        for d in (16, 64):
            dot = f.point(backend="naive", seq_len=n, head_dim=d, heads=4)
            f.point(backend="sdpa", seq_len=n, head_dim=d, heads=4)
            row = f.point(backend="naive", seq_len=n, head_dim=d, heads=4)
            row.update(score="additive", time_ms=dot["time_ms"] * time_factor,
                       peak_alloc_bytes=int(dot["peak_alloc_bytes"] * mem_factor),
                       peak_mem_bytes=int(dot["peak_mem_bytes"] * mem_factor), perm_max_abs_diff=None)
    return f


def position_rows(f, *, broken=1.0, shift=3e-7, rope_factor=1.05):
    """Layer rows per encoding (perm diff `broken` for the encodings), and sdpa core rows with and without
    rope at two n, two seeds (rope `rope_factor` slower; its shift check `shift`)."""
    for pos_enc in ("none", "sinusoidal", "learned", "rope"):
        row = f.point(backend="sdpa", scope="layer", seq_len=128, batch=4, heads=4)
        row.update(pos_enc=pos_enc, perm_max_abs_diff=1e-7 if pos_enc == "none" else broken,
                   rope_shift_max_abs_diff=shift if pos_enc == "rope" else None)
    for seed in (0, 1):
        for n in (512, 2048):
            plain = f.point(backend="sdpa", seq_len=n, batch=4, heads=4, seed=seed)
            rope = f.point(backend="sdpa", seq_len=n, batch=4, heads=4, seed=seed)
            rope.update(pos_enc="rope", time_ms=plain["time_ms"] * rope_factor, perm_max_abs_diff=broken,
                        rope_shift_max_abs_diff=shift)
    return f


@pytest.fixture
def lawful(tmp_path, fabricate):
    return verdicts(tmp_path, position_rows(additive_rows(fabricate())))


def test_rows_that_obey_the_chapter_make_every_new_claim_hold(lawful):
    assert {k: lawful[k].verdict for k in KEYS} == {k: HOLDS for k in KEYS}, {k: lawful[k].evidence for k in KEYS}
    assert "vs naive (4 points" in lawful["dot_beats_additive"].evidence
    assert "time ×30–30" in lawful["dot_beats_additive"].evidence.replace("×30.0", "×30")
    assert "rope: core fp32 min 1, layer fp32 min 1" in lawful["positions_break_equivariance"].evidence
    assert "n=2048 ×1.05" in lawful["rope_cost"].evidence


@pytest.mark.parametrize("claim, additive, positions", [
    ("dot_beats_additive", dict(time_factor=0.5), {}),  # additive faster
    ("dot_beats_additive", dict(mem_factor=0.5), {}),  # additive smaller
    ("positions_break_equivariance", {}, dict(broken=1e-7)),  # an encoding that leaves the tokens a bag of words
    ("rope_relative", {}, dict(shift=1e-2)),  # a logit that moves when both positions shift
    ("rope_cost", {}, dict(rope_factor=2.0)),  # RoPE doubling a call
], ids=["additive-faster", "additive-smaller", "encoding-equivariant", "rope-absolute", "rope-expensive"])
def test_rows_that_contradict_a_claim_flip_its_verdict(tmp_path, fabricate, claim, additive, positions):
    broken = verdicts(tmp_path, position_rows(additive_rows(fabricate(), **additive), **positions))
    assert broken[claim].verdict == FAILS, broken[claim].evidence


def test_without_their_rows_the_claims_are_not_measured_and_name_their_experiment(tmp_path, fabricate):
    plain = verdicts(tmp_path, fabricate().quadratic_cost())
    assert {k: plain[k].verdict for k in KEYS} == {k: NOT_MEASURED for k in KEYS}
    assert plain["dot_beats_additive"].experiment == "additive" and plain["rope_cost"].experiment == "positions"


def test_an_unencoded_point_alone_does_not_make_the_encodings_claim_hold(tmp_path, fabricate):
    f = fabricate()
    f.point(backend="sdpa", scope="layer", seq_len=128)
    assert verdicts(tmp_path, f)["positions_break_equivariance"].verdict == NOT_MEASURED


def test_a_bag_of_words_without_an_encoding_is_required_too(tmp_path, fabricate):
    f = position_rows(fabricate())
    for row in f.rows:
        if row["pos_enc"] == "none" and row["scope"] == "layer":
            row["perm_max_abs_diff"] = 0.5  # the unencoded layer broke equivariance: something is wrong
    assert verdicts(tmp_path, f)["positions_break_equivariance"].verdict == FAILS


def test_their_rows_leave_the_other_claims_as_they_were(tmp_path, fabricate):
    base = verdicts(tmp_path / "a", fabricate().quadratic_cost().scaling_stability().heads())
    mixed = verdicts(tmp_path / "b", position_rows(additive_rows(fabricate().quadratic_cost().scaling_stability()
                                                                 .heads())))
    others = [k for k in base if k not in KEYS]
    assert {k: mixed[k].verdict for k in others} == {k: base[k].verdict for k in others}
    assert mixed["permutation_equivariant"].verdict == HOLDS  # the encoded rows (perm diff 1, no mask) left out
