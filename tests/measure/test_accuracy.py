"""Row sampling and the error measures of the accuracy columns."""

import math

import pytest
import torch

from selfattn.measure.accuracy import compare, sample_rows


def test_sample_rows_is_seeded_sorted_and_distinct():
    rows = sample_rows(4096, 128, seed=7)
    assert torch.equal(rows, sample_rows(4096, 128, seed=7))
    assert not torch.equal(rows, sample_rows(4096, 128, seed=8))
    assert len(rows.unique()) == 128 and torch.all(rows[1:] > rows[:-1])
    assert 0 <= int(rows.min()) and int(rows.max()) < 4096


def test_all_rows_when_fewer():
    assert torch.equal(sample_rows(50, 128, seed=0), torch.arange(50))


def test_compare_errors():
    ref = torch.tensor([1.0, -2.0, 2.0, 0.0], dtype=torch.float64)
    got = ref + torch.tensor([0.1, 0.0, -0.2, 0.0], dtype=torch.float64)
    errors = compare(got.float(), ref)
    assert errors.max_abs_err == pytest.approx(0.2, rel=1e-6)
    rms_diff = math.sqrt((0.01 + 0.04) / 4)
    assert errors.rel_rms_err == pytest.approx(rms_diff / math.sqrt(9 / 4), rel=1e-6)
    assert errors.nonfinite_frac == 0.0


def test_compare_counts_nonfinite_and_skips_them():
    ref = torch.ones(4, dtype=torch.float64)
    got = torch.tensor([1.0, float("nan"), float("inf"), 1.0])
    errors = compare(got, ref)
    assert errors.nonfinite_frac == 0.5 and errors.max_abs_err == 0.0
    assert compare(torch.full((3,), float("nan")), torch.ones(3)).max_abs_err is None


def test_compare_lists_and_shape_mismatch():
    errors = compare([torch.zeros(2), torch.ones(3)], [torch.zeros(2), torch.ones(3)])
    assert errors.max_abs_err == 0.0 and errors.rel_rms_err == 0.0
    with pytest.raises(ValueError, match="measured"):
        compare(torch.zeros(3), torch.zeros(4))
