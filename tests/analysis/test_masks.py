"""The masks and GQA studies' findings and figures, from rows made to obey (or break) their rules."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.figures.common import Context, Made, Skipped
from analysis.figures.masks import gqa_vs_kv_heads, masks_vs_density
from analysis.claims import CHAPTER, check_claims
from analysis.load import load
from selfattn.results import COLUMNS, Row

# mask -> (axes, density at n = 4096)
MASKS = {"none": ({}, 1.0), "causal": ({"causal": True}, 0.5), "window": ({"causal": True, "window": 256}, 0.06),
         "padding": ({"pad_frac": 0.5, "batch": 2}, 0.5), "documents": ({"documents": 8}, 0.16)}


def _row(backend: str, time_ms: float, density: float, **axes) -> dict:
    values = dict(status="ok", backend=backend, backend_options="{}", kernel="k", precision="fp32", device="cpu",
                  device_name="cpu", mode="fwd", scope="core", batch=1, heads=4, kv_heads=4, q_len=4096, seq_len=4096,
                  head_dim=64, causal=False, scale="auto", input_std=1.0, seed=0, time_ms=time_ms,
                  peak_alloc_bytes=1e6, mask_density=density, timestamp="2026-11-30T00:00:00+00:00")
    values.update(axes)
    return {**Row().to_dict(), **values}


def _load(tmp_path, rows) -> pd.DataFrame:
    pd.DataFrame(rows, columns=list(COLUMNS)).to_csv(tmp_path / "results.csv", index=False)
    return load([tmp_path], warn=False).rows


def _mask_rows(chunked_follows_density: bool) -> list[dict]:
    rows = []
    for axes, density in MASKS.values():
        batch = axes.get("batch", 1)
        chunked = 100 * (density if chunked_follows_density else 1.0) * batch
        rows += [_row("chunked", chunked, density, **axes), _row("naive", 400 * batch, density, **axes)]
    return rows


@pytest.mark.parametrize("follows", [True, False])
def test_mask_findings_judge_chunked_and_naive_against_the_density(tmp_path, follows):
    verdicts = {c.key: c.verdict for c in check_claims(_load(tmp_path, _mask_rows(follows)), study="Masks")}
    assert verdicts["chunked_mask_saving"] == ("holds" if follows else "does not hold")
    assert verdicts["naive_mask_no_saving"] == "holds"  # naive's 400 ms per sequence whatever the mask


def test_no_study_rows_no_findings_and_skipped_figures(tmp_path):
    rows = _load(tmp_path, [_row("naive", 10.0, 1.0), _row("naive", 6.0, 0.5, causal=True)])
    assert [c.key for c in check_claims(rows) if c.study != CHAPTER] == []
    ctx = Context(out_dir=tmp_path / "figures", formats=("png",))
    assert isinstance(masks_vs_density(rows, ctx), Skipped) and isinstance(gqa_vs_kv_heads(rows, ctx), Skipped)


def test_gqa_finding_and_figures_are_drawn(tmp_path):
    gqa = [_row(b, t, 0.5, causal=True, heads=8, kv_heads=kv, seq_len=2048, q_len=2048)
           for b, times in (("sdpa", (10, 10.5, 11, 12)), ("naive", (20, 21, 30, 40)))
           for kv, t in zip((8, 4, 2, 1), times)]
    rows = _load(tmp_path, _mask_rows(True) + gqa)
    (claim,) = check_claims(rows, study="Grouped-query attention")
    assert claim.verdict == "does not hold" and "naive: ×2.00" in claim.evidence and "sdpa: ×1.20" in claim.evidence
    ctx = Context(out_dir=tmp_path / "figures", formats=("png",))
    assert isinstance(masks_vs_density(rows, ctx), Made) and isinstance(gqa_vs_kv_heads(rows, ctx), Made)
