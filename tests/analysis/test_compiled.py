"""The compiled back ends study: the verdict on compiled naive both ways, the compile-cost table, its figures,
and the default report untouched when no compiled rows exist."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

import selfattn.backends
from analysis.claims import check_claims, study_tables
from analysis.compiled import COMPILED, break_even_calls, compile_cost_rows, compiled_study
from analysis.cost import cost_facets, variant_labels
from analysis.figures.common import Context, Made, Skipped
from analysis.figures.compiled import compile_cost, compiled_time_memory
from analysis.figures.style import backend_color, backend_palette
from analysis.load import load
from analysis.report import write_report
from selfattn.results import COLUMNS, Row

NEW = ("compile_s", "block_mask_s", "recompiled")  # written even before selfattn.results.Row lists them
COLUMNS_OUT = list(COLUMNS) + [c for c in NEW if c not in COLUMNS]
SIZES = (256, 512, 1024, 2048, 4096)
MASKS = ({}, {"causal": True}, {"causal": True, "window": 256})
# variant -> (backend, options, kernel, time factor vs naive, memory exponent, compile_s)
VARIANTS = {
    "naive": ("naive", {}, "materialized", 1.0, 2.0, None),
    "naive+compile": ("naive", {"compile": True}, "materialized-compiled", 0.5, None, 6.0),
    "chunked": ("chunked", {}, "q256-kv512", 0.8, 1.0, None),
    "chunked+compile": ("chunked", {"compile": True}, "q256-kv512-compiled", 0.9, 1.0, 8.0),
    "flex": ("flex", {}, "compiled", 0.4, 1.0, 12.0),
    "sdpa": ("sdpa", {}, "auto:math", 0.3, 1.0, None),
}


def _row(variant: str, n: int, mode: str, compiled_naive_exponent: float, masked_exponent: float | None = None,
         **mask) -> dict:
    backend, options, kernel, factor, exponent, compile_s = VARIANTS[variant]
    if exponent is None:  # compiled naive: with a mask, masked_exponent when given
        exponent = masked_exponent if mask and masked_exponent is not None else compiled_naive_exponent
    time_ms = factor * 1e-5 * n ** 2 * (3.0 if mode == "fwd_bwd" else 1.0)
    values = dict(status="ok", backend=backend, backend_options=json.dumps(options), kernel=kernel, precision="fp32",
                  device="cpu", device_name="cpu", mode=mode, scope="core", batch=1, heads=4, kv_heads=4, q_len=n,
                  seq_len=n, head_dim=64, causal=False, scale="auto", input_std=1.0, seed=0, time_ms=time_ms,
                  time_ms_p20=time_ms, time_ms_p80=time_ms, peak_alloc_bytes=1e3 * n ** exponent,
                  peak_mem_bytes=1e3 * n ** exponent, timestamp="2026-12-01T00:00:00+00:00")
    values.update(mask, mask_density=min(1.0, mask["window"] / n) if "window" in mask else 0.5 if mask else 1.0)
    if compile_s is not None:
        values.update(compile_s=compile_s, recompiled=True)
    if variant == "flex":
        values.update(block_mask_s=1e-5 * n)
        if mode == "fwd_bwd":  # flex cannot run backward on a CPU
            values.update(status="unsupported", error="flex: no backward on cpu", time_ms=None, time_ms_p20=None,
                          time_ms_p80=None, peak_alloc_bytes=None, peak_mem_bytes=None, compile_s=None,
                          recompiled=None, block_mask_s=None)
    return {**Row().to_dict(), **values}


def compiled_rows(compiled_naive_exponent: float = 2.0, masked_exponent: float | None = None) -> list[dict]:
    return [_row(v, n, mode, compiled_naive_exponent, masked_exponent, **mask) for v in VARIANTS for n in SIZES
            for mode in ("fwd", "fwd_bwd") for mask in MASKS]


def _load(tmp_path: Path, rows: list[dict], name: str = "results.csv") -> pd.DataFrame:
    folder = tmp_path / name.replace(".csv", "")
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows, columns=COLUMNS_OUT).to_csv(folder / "results.csv", index=False)
    return load([folder], warn=False).rows


@pytest.fixture(scope="module")
def fused(tmp_path_factory) -> pd.DataFrame:
    return _load(tmp_path_factory.mktemp("fused"), compiled_rows(compiled_naive_exponent=1.0))


@pytest.fixture(scope="module")
def materialized(tmp_path_factory) -> pd.DataFrame:
    return _load(tmp_path_factory.mktemp("materialized"), compiled_rows(compiled_naive_exponent=2.0))


@pytest.mark.parametrize("exponent, verdict, reading", [(1.0, "holds", "fused: no n×n matrix"),
                                                        (2.0, "does not hold", "still materializes the n×n matrix")],
                         ids=["fused", "materialized"])
def test_compiled_naive_verdict_is_computed_both_ways(tmp_path, exponent, verdict, reading):
    rows = _load(tmp_path, compiled_rows(compiled_naive_exponent=exponent))
    claims = {c.key: c for c in check_claims(rows, study=COMPILED)}
    naive = claims["compiled_naive_fused"]
    assert naive.verdict == verdict
    # both modes, eager naive's exponent beside the compiled one's, and the reading that matches the verdict
    for mode in ("fwd:", "fwd_bwd:"):
        assert f"fp32 · cpu {mode} naive b=2.00" in naive.evidence
    assert f"naive+compile b={exponent:.2f}" in naive.evidence and naive.evidence.count(reading) == 2
    # flex has no fwd_bwd fit (unsupported on a CPU), chunked+compile both
    fused_linear = claims["compiled_fused_linear"]
    assert fused_linear.verdict == "holds" and "fwd_bwd: flex" not in fused_linear.evidence
    assert fused_linear.evidence.count("chunked+compile b=1.00") == 2


def test_masked_runs_have_their_own_verdict(tmp_path):
    """Fused without a mask but still n² with one (what inductor did on a CPU, torch 2.13): two verdicts."""
    rows = _load(tmp_path, compiled_rows(compiled_naive_exponent=1.0, masked_exponent=2.0))
    claims = {c.key: c for c in check_claims(rows, study=COMPILED)}
    assert claims["compiled_naive_fused"].verdict == "holds"
    masked = claims["compiled_naive_fused_masked"]
    assert masked.verdict == "does not hold"
    for mode in ("fwd", "fwd_bwd"):
        for mask in ("causal", "causal window 256"):
            assert f"fp32 · cpu {mode} · {mask}: naive b=2.00" in masked.evidence
    assert masked.evidence.count("still materializes the n×n matrix") == 4


def test_a_fit_too_short_to_count_is_not_measured(tmp_path):
    rows = [r for r in compiled_rows(1.0) if r["seq_len"] in (1024, 4096)]
    naive = {c.key: c for c in check_claims(_load(tmp_path, rows), study=COMPILED)}["compiled_naive_fused"]
    assert naive.verdict == "not measured" and "not counted" in naive.evidence


def test_compile_cost_table_break_even_and_reused_code(tmp_path):
    rows = compiled_rows()
    for r in rows:  # chunked+compile's largest no-mask forward point reused code: a call, not a compile cost
        if r["kernel"] == "q256-kv512-compiled" and r["seq_len"] == 4096 and r["mode"] == "fwd" and not r["causal"]:
            r.update(compile_s=0.05, recompiled=False)
    table = compile_cost_rows(compiled_study(_load(tmp_path, rows)))
    cell = table[(table["mode"] == "fwd") & (table["mask"] == "no mask")].set_index("variant")
    assert list(cell.index) == ["naive+compile", "chunked+compile", "flex"]  # registry order
    assert cell.loc["naive+compile", "eager"] == "naive" and cell.loc["flex", "eager"] == "sdpa"
    t_eager = 1e-5 * 4096 ** 2  # naive's ms at n=4096
    assert cell.loc["naive+compile", "ratio"] == pytest.approx(0.5)
    assert cell.loc["naive+compile", "break_even"] == math.ceil((6.0 - t_eager * 0.5e-3) / (t_eager * 0.5e-3))
    assert math.isinf(cell.loc["chunked+compile", "break_even"])  # slower than eager chunked: never pays
    assert cell.loc["chunked+compile", "compiles"] == 4  # the reused point is left out
    assert math.isinf(cell.loc["flex", "break_even"])  # slower than sdpa
    assert cell.loc["flex", "block_mask_s"] == pytest.approx(1e-5 * 4096)  # at that n
    # fwd_bwd: flex unsupported on a CPU, so nothing to weigh
    assert "flex" not in set(table[table["mode"] == "fwd_bwd"]["variant"])
    ((study, _caption, text),) = study_tables(_load(tmp_path, rows, "again.csv"))
    assert study == COMPILED
    assert {"never (not faster)", "6 s (5)"} <= set(text["break-even calls"]) | set(text["compile_s (recompiled rows)"])


def test_break_even_calls():
    assert break_even_calls(10.0, 100.0, 300.0) == 50  # 10 s + (k-1) 0.1 s <= k 0.3 s from k = 49.5
    assert break_even_calls(0.05, 100.0, 200.0) == 1
    assert math.isinf(break_even_calls(10.0, 200.0, 100.0))


def test_variant_labels_and_cost_lines_name_compiled_variants(materialized):
    frame = pd.DataFrame({"backend": ["naive", "naive", "naive", "chunked", "chunked"],
                          "backend_options": ['{}', '{"compile": false}', '{"compile": true}',
                                             '{"q_chunk": 256}', '{"compile": true, "q_chunk": 128}']})
    assert list(variant_labels(frame)) == ["naive", "naive", "naive+compile", "chunked", "chunked+compile"]
    lines = {(line.label, line.backend) for facet in cost_facets(materialized, "time_ms") for line in facet.lines}
    assert {("naive+compile", "naive+compile"), ("naive", "naive"), ("flex", "flex")} <= lines


def test_compiled_variants_take_a_shade_of_their_back_ends_colour(monkeypatch):
    monkeypatch.setattr(selfattn.backends, "BACKEND_NAMES", ("naive", "sdpa", "chunked", "flex"))
    names = ["naive", "naive+compile", "chunked", "chunked+compile", "flex", "sdpa"]
    palette = backend_palette(names)
    assert len(set(palette.values())) == len(names)
    assert palette["flex"] == backend_color("flex") == "#CC79A7"  # the fourth registry colour
    assert palette["naive+compile"] == backend_color("naive+compile") != backend_color("naive")
    # a name the registry does not know still takes a spare colour, never a registry one
    assert backend_color("xformers") not in {backend_color(n) for n in names}


def test_no_compiled_rows_no_study_and_skipped_figures(tmp_path):
    rows = _load(tmp_path, [r for r in compiled_rows() if r["kernel"] in ("materialized", "auto:math")])
    assert check_claims(rows, study=COMPILED) == [] and study_tables(rows) == []
    ctx = Context(tmp_path / "figs", formats=("png",))
    assert isinstance(compiled_time_memory(rows, ctx), Skipped) and isinstance(compile_cost(rows, ctx), Skipped)


def test_figures_are_drawn_from_compiled_rows(materialized, tmp_path):
    ctx = Context(tmp_path / "figs", formats=("png",))
    fewer = materialized[materialized["mode"] == "fwd"]  # half the panels: half the drawing time
    for figure in (compiled_time_memory, compile_cost):
        made = figure(fewer, ctx)
        assert isinstance(made, Made) and all(path.stat().st_size > 20_000 for path in made.files)


def test_older_csv_without_the_compile_columns_loads(tmp_path):
    rows = [r for r in compiled_rows() if r["kernel"] == "materialized"]
    folder = tmp_path / "old"
    folder.mkdir()
    pd.DataFrame(rows, columns=[c for c in COLUMNS_OUT if c not in NEW]).to_csv(folder / "results.csv", index=False)
    loaded = load([folder], warn=False).rows
    assert loaded["recompiled"].map(type).eq(bool).all() and not loaded["recompiled"].any()


def test_recompiled_reads_as_a_boolean(materialized):
    by_kernel = materialized.groupby("kernel")["recompiled"].agg(["all", "any"])
    assert by_kernel.loc["materialized-compiled", "all"] and not by_kernel.loc["materialized", "any"]
    assert materialized["recompiled"].map(type).eq(bool).all()


def test_mask_study_keeps_compiled_variants_apart(materialized):
    # the compiled experiment has three masks: the masks study reads eager naive and chunked against their own
    # unmasked time, never against a compiled variant's
    masks = {c.key: c for c in check_claims(materialized, study="Masks")}
    assert "×1.00" in masks["naive_mask_no_saving"].evidence


def test_report_renders_the_study_section(materialized, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    materialized_csv = folder / "results.csv"
    pd.DataFrame(compiled_rows(), columns=COLUMNS_OUT).to_csv(materialized_csv, index=False)
    report = write_report([folder], tmp_path / "out", formats=("png",), figures=(), warn=False)
    text = report.path.read_text()
    assert "## Compiled back ends: findings" in text and "break-even calls" in text
    assert "torch.compile fuses naive attention" in text


def test_variant_labels_name_only_the_options_that_differ():
    import json

    import pandas as pd

    naive = {"compile": False, "fp8_block": 64, "p_scale": 256.0, "upcast_softmax": False}
    frame = pd.DataFrame({
        "backend": ["naive", "naive", "sdpa"],
        "backend_options": [json.dumps({**naive, "scale_at": "logits"}), json.dumps({**naive, "scale_at": "query"}), "{}"],
    })
    assert list(variant_labels(frame)) == ["naive (scale_at=logits)", "naive (scale_at=query)", "sdpa"]
