"""runners/mask_maps.py and analysis/mask_figures.py: each mask of a sweep drawn from the harness's own geometry,
and time against density; on fabricated rows (no sweep)."""

import pandas as pd
import pytest

from analysis.mask_figures import mask_label, mask_rows
from runners import mask_maps


def _rows() -> pd.DataFrame:
    base = dict(status="ok", scope="core", batch=1, heads=2, q_len=64, seq_len=64, seed=0, window=None, pad_frac=0.0,
                documents=None, score_mod="none", score_mod_options="{}", time_ms=1.0)
    masks = [("none", "{}", False, 1.0), ("prefix_lm", '{"prefix": 16}', False, 0.0),
             ("dilated_sliding_window", '{"dilation": 2, "window": 8}', False, 0.0), ("none", "{}", True, 0.0)]
    rows = [dict(base, backend=backend, mask=m, mask_options=o, causal=c, mask_density=d)
            for m, o, c, d in masks for backend in ("naive", "chunked")]
    return pd.DataFrame(rows)


def test_labels_name_the_function_with_its_parameters_or_the_axes():
    rows = _rows()
    labels = list(dict.fromkeys(rows.apply(mask_label, axis=1)))
    assert labels == ["none", "prefix_lm(prefix=16)", "dilated_sliding_window(dilation=2, window=8)", "causal"]
    assert mask_rows(rows[rows["mask"] == "prefix_lm"]).empty  # one mask: nothing to compare


def test_each_mask_is_drawn_from_its_function_and_its_cells_hold_the_visible_share(tmp_path):
    results = tmp_path / "results.csv"
    _rows().to_csv(results, index=False)
    assert mask_maps.main([str(results), "--out", str(tmp_path / "out"), "--cells", "16"]) == 0
    cells = pd.read_csv(tmp_path / "out" / "mask_maps.csv")
    assert (tmp_path / "out" / "mask_maps.png").stat().st_size > 0
    assert (tmp_path / "out" / "time_vs_density.png").stat().st_size > 0
    share = cells.groupby("mask_label")["visible"].mean()  # equal cells: the mean is the mask's density
    assert share["prefix_lm(prefix=16) (n=64)"] == pytest.approx((16 * 16 + sum(range(17, 65))) / 64 ** 2)
    assert share["causal (n=64)"] == pytest.approx(64 * 65 / 2 / 64 ** 2)
    assert share["none (n=64)"] == 1.0
    # dilated: key p - j in {0, 2, 4, 6}, clipped at the first keys
    assert share["dilated_sliding_window(dilation=2, window=8) (n=64)"] == pytest.approx(
        sum(min(4, p // 2 + 1) for p in range(64)) / 64 ** 2)
