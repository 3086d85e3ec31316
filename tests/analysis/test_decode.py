"""The decode study's findings and figures, from rows made to obey (or break) their rules."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.claims import check_claims
from analysis.decode import DECODE
from analysis.figures.common import Context, Made, Skipped
from analysis.figures.decode import decode_time, generation, roofline
from analysis.load import load
from selfattn.results import COLUMNS, Row

HEADS, D, PEAK_GBPS, PEAK_TFLOPS = 8, 64, 10.0, 0.1


def _row(**axes) -> dict:
    values = dict(status="ok", backend="sdpa", backend_options="{}", kernel="k", precision="fp32", device="cpu",
                  device_name="cpu", mode="fwd", scope="core", batch=1, heads=HEADS, kv_heads=HEADS, q_len=1,
                  seq_len=4096, head_dim=D, causal=True, scale="auto", input_std=1.0, seed=0,
                  device_peak_gbps=PEAK_GBPS, device_peak_tflops=PEAK_TFLOPS, timestamp="2026-11-30T00:00:00+00:00")
    values.update(axes)
    return {**Row().to_dict(), **values}


def _decode(seq_len: int, kv_heads: int, gbps: float, batch: int = 1) -> dict:
    kv_bytes = 2 * batch * kv_heads * seq_len * D * 4
    flops = 4.0 * batch * HEADS * D * seq_len
    time_ms = kv_bytes / (gbps * 1e9) * 1e3
    return _row(seq_len=seq_len, kv_heads=kv_heads, batch=batch, flops=flops, bytes_moved=kv_bytes, kv_cache_bytes=kv_bytes,
                time_ms=time_ms, gbps=gbps)


def _generate(prompt: int, cache: bool, power: float, new_tokens: int = 8) -> dict:
    context = prompt + (new_tokens + 1) / 2
    return _row(scope="generate", q_len=prompt, seq_len=prompt, kv_cache=cache, new_tokens=new_tokens, heads=2,
                kv_heads=2, time_ms=new_tokens * 1e-3 * context ** power, flops=1e6, bytes_moved=1e6)


def _rows(tmp_path, *, gqa_gbps: float = 8.0, no_cache_power: float = 2.0) -> pd.DataFrame:
    rows = [_decode(n, kv, 8.0 if kv == HEADS else gqa_gbps, batch) for n in (1024, 4096, 16384) for kv in (HEADS, 1)
            for batch in (1, 8)]
    rows += [_generate(p, True, 1.0) for p in (512, 2048, 4096, 8192, 16384)]
    rows += [_generate(p, False, no_cache_power) for p in (256, 512, 1024, 2048)]
    pd.DataFrame(rows, columns=list(COLUMNS)).to_csv(tmp_path / "results.csv", index=False)
    return load([tmp_path], warn=False).rows


def _verdicts(rows: pd.DataFrame) -> dict[str, str]:
    return {c.key: c.verdict for c in check_claims(rows, study=DECODE)}


def test_findings_hold_on_rows_that_obey_them(tmp_path):
    verdicts = _verdicts(_rows(tmp_path))
    assert verdicts == {"cache_linear": "holds", "no_cache_quadratic": "holds", "decode_memory_bound": "holds",
                        "gqa_divides_decode": "holds"}


def test_findings_fail_on_rows_that_break_them(tmp_path):
    # GQA that reads the whole cache anyway (same time at every kv_heads: 8x less bandwidth) and a
    # "no cache" loop that grows only linearly
    verdicts = _verdicts(_rows(tmp_path, gqa_gbps=1.0, no_cache_power=1.0))
    assert verdicts["gqa_divides_decode"] == "does not hold"
    assert verdicts["no_cache_quadratic"] == "does not hold"
    assert verdicts["cache_linear"] == "holds"


def test_no_decode_rows_no_findings_and_skipped_figures(tmp_path):
    rows = _rows(tmp_path)
    prefill = rows[(rows["scope"] == "core") & False]
    assert check_claims(prefill, study=DECODE) == []
    ctx = Context(tmp_path / "figs", formats=("png",))
    for figure in (roofline, decode_time, generation):
        assert isinstance(figure(prefill, ctx), Skipped)


def test_figures_are_drawn_from_decode_rows(tmp_path):
    rows = _rows(tmp_path)
    ctx = Context(tmp_path / "figs", formats=("png",))
    for figure in (roofline, decode_time, generation):
        made = figure(rows, ctx)
        assert isinstance(made, Made) and all(path.exists() for path in made.files)


def test_one_generate_point_per_back_end_draws_without_a_legend_warning(tmp_path):
    # `scope=generate` typed alone, one point per back end: no line against the context, so no labelled artist;
    # matplotlib's "No artists with labels found" warning then reached the sweep's terminal
    import warnings

    rows = [_generate(1024, True, 1.0), {**_generate(1024, True, 1.0), "backend": "fast"}]
    pd.DataFrame(rows, columns=list(COLUMNS)).to_csv(tmp_path / "results.csv", index=False)
    ctx = Context(tmp_path / "figs", formats=("png",))
    with warnings.catch_warnings():
        # the legend's warning, not a dependency's deprecations (matplotlib 3.7-3.9 with a newer pyparsing)
        warnings.filterwarnings("error", message="No artists with labels found")
        generation(load([tmp_path], warn=False).rows, ctx)
