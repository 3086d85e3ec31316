"""The summary table of what was measured: its axes, medians, statuses, and how it fits a terminal."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from analysis.load import load
from analysis.summary import (
    format_bytes, format_ms, leading_slice, status_line, summary_frame, summary_markdown, summary_text, swept_axes,
)
from selfattn.results import Row


def _row(backend="naive", seq_len=128, causal=False, precision="fp32", seed=0, status="ok", time_ms=1.0,
         peak_alloc_bytes=2**20, options=None, device_label="Fake CPU", **extra) -> dict:
    fields = dict(status=status, backend=backend, backend_options=json.dumps(options or {}), precision=precision,
                  device="cpu", device_name=device_label, mode="fwd", scope="core", batch=1, heads=4, q_len=seq_len,
                  seq_len=seq_len, head_dim=64, causal=causal, scale="auto", input_std=1.0, seed=seed,
                  time_ms=time_ms if status == "ok" else None,
                  peak_alloc_bytes=peak_alloc_bytes if status == "ok" else None)
    row = Row(**{**fields, **extra}).to_dict()
    row["device_label"] = device_label
    return row


def _rows(*rows: dict) -> pd.DataFrame:
    return pd.DataFrame(list(rows))


def _grid() -> pd.DataFrame:
    """3 back ends x 2 sizes x 2 masks; sdpa is fastest everywhere, chunked runs out of memory at 256 causal."""
    speed = {"naive": 3.0, "sdpa": 1.0, "chunked": 2.0}
    rows = []
    for n in (128, 256):
        for causal in (False, True):
            for backend, factor in speed.items():
                status = "oom" if (backend == "chunked" and n == 256 and causal) else "ok"
                rows.append(_row(backend, n, causal, time_ms=factor * n / 128, status=status,
                                 peak_alloc_bytes=factor * 2**20))
    return pd.DataFrame(rows)


def test_the_axes_are_the_fields_that_vary_and_q_len_restating_seq_len_is_not_one():
    rows = _grid()
    assert swept_axes(rows) == ["seq_len", "causal"]  # q_len == seq_len everywhere; backend is the columns
    rows.loc[0, "q_len"] = 1  # a decode-shaped row: now q_len says something of its own
    assert swept_axes(rows) == ["q_len", "seq_len", "causal"]


def test_seeds_are_repeats_whose_median_is_taken_and_devices_become_an_axis():
    rows = _rows(*(_row(seed=s, time_ms=t) for s, t in enumerate((1.0, 5.0, 2.0))),
                 _row(device_label="Other GPU", time_ms=0.5))
    frame = summary_frame(rows)
    assert list(frame["device"]) == ["Fake CPU", "Other GPU"]
    assert list(frame["time_ms"]) == [2.0, 0.5]  # the median of 1, 5, 2; not the mean (2.67)
    assert list(frame["rows"]) == [3, 1]


def test_frame_has_one_row_per_point_and_back_end_in_registry_order_with_failed_statuses():
    frame = summary_frame(_grid())
    assert list(frame.columns) == ["seq_len", "causal", "backend", "rows", "ok", "time_ms", "peak_alloc_bytes",
                                   "status", "not_result", "fewer_threads", "speedup"]
    assert len(frame) == 12
    assert list(frame["backend"][:3]) == ["naive", "sdpa", "chunked"]  # BACKEND_NAMES' order, not the rows'
    oom = frame[(frame["seq_len"] == 256) & frame["causal"] & (frame["backend"] == "chunked")].iloc[0]
    assert oom["status"] == "oom" and oom["ok"] == 0 and math.isnan(oom["time_ms"])
    assert (frame.loc[frame["status"] == "ok", "ok"] == 1).all()


def test_invalid_rows_count_in_the_status_line_only():
    rows = _rows(_row(), _row(backend="sdpa", time_ms=0.5), _row(status="invalid", seq_len=0))
    frame = summary_frame(rows)
    assert "seq_len" not in frame.columns and len(frame) == 2  # the refused seq_len=0 is no axis value
    assert status_line(rows) == "3 rows: 2 ok, 1 invalid"


def test_compiled_and_option_variants_are_columns_of_their_own():
    rows = _rows(_row("naive", time_ms=2.0), _row("naive", time_ms=1.0, options={"compile": True}),
                 _row("chunked", options={"q_chunk": 64}), _row("chunked", options={"q_chunk": 128}))
    assert list(summary_frame(rows)["backend"]) == [
        "naive", "naive+compile", "chunked (q_chunk=64)", "chunked (q_chunk=128)"]


def test_markdown_has_back_ends_as_columns_the_fastest_in_bold_and_the_oom_cell():
    text = summary_markdown(_grid())
    lines = text.splitlines()
    assert lines[0] == "| seq_len | causal | naive | sdpa | chunked |"
    # sdpa ran, so it is the baseline: each other result says its speed-up over sdpa (sdpa's time / its own)
    assert lines[2] == ("| 128 | false | 3.00 ms · 3.00 MiB · 0.333× | **1.00 ms · 1.00 MiB** | "
                        "2.00 ms · 2.00 MiB · 0.500× |")
    assert lines[5] == "| 256 | true | 6.00 ms · 3.00 MiB · 0.333× | **2.00 ms · 1.00 MiB** | oom |"
    assert "12 rows: 11 ok, 1 oom." in text and "speed-up over sdpa: sdpa's time / the cell's" in text
    assert "×" not in summary_markdown(_grid(), baseline="none")


def test_the_fastest_mark_follows_the_data_not_the_column_order():
    rows = _grid()
    rows.loc[rows["backend"] == "naive", "time_ms"] = 0.1  # naive is now the fastest everywhere
    first = summary_markdown(rows).splitlines()[2]
    assert first.startswith("| 128 | false | **0.100 ms") and "**1.00 ms" not in first


def test_text_fits_the_width_dropping_memory_first_then_splitting_never_leaving_a_back_end_out():
    rows = _grid()
    wide = summary_text(rows, width=200)
    assert "MiB" in wide and "left out" not in wide and "split" not in wide
    assert max(len(line) for line in wide.splitlines()) <= 200
    narrow = summary_text(rows, width=40)
    assert max(len(line) for line in narrow.splitlines()) <= 40  # the notes are wrapped too
    parts = narrow.split("\n\n")
    headers = [part.splitlines()[0].split() for part in parts if part.startswith("seq_len")]
    # every back end is in one of the parts, each part repeats the axes
    assert sorted(h for header in headers for h in header[2:]) == ["chunked", "naive", "sdpa"], headers
    assert all(header[:2] == ["seq_len", "causal"] for header in headers) and len(headers) > 1
    assert "MiB" not in "\n".join(parts[:len(headers)]) and "memory left out" in narrow
    flat = " ".join(narrow.split())
    assert f"split in {len(headers)} parts to fit 40 columns, every back end shown" in flat
    assert "12 rows: 11 ok, 1 oom" in flat and "columns:" not in flat


def test_text_counts_the_rows_it_does_not_show():
    text = summary_text(_grid(), width=200, max_rows=2)
    assert len(text.split("\n\n")[0].splitlines()) == 3  # header + 2
    assert "(2 more rows not shown)" in text


def test_no_measured_rows_say_so():
    rows = _rows(_row(status="invalid"))
    assert summary_frame(rows).empty
    assert summary_text(rows) == "No measured rows (1 rows: 1 invalid)."
    assert summary_markdown(rows).startswith("*No measured rows*")


def test_a_single_point_has_no_axis_columns():
    text = summary_markdown(_rows(_row(), _row("sdpa", time_ms=0.5)))
    assert text.splitlines()[0] == "| naive | sdpa |"


@pytest.mark.parametrize("value, text", [(0.0123, "0.0123"), (0.47, "0.470"), (1.234, "1.23"), (12.34, "12.3"),
                                         (1234.5, "1234"), (math.nan, "—")])
def test_times_keep_three_significant_figures(value, text):
    assert format_ms(value) == text


@pytest.mark.parametrize("value, text", [(512, "512 B"), (1536, "1.50 KiB"), (12 * 2**20, "12.0 MiB"),
                                         (300 * 2**30, "300 GiB"), (math.nan, "—")])
def test_bytes_in_binary_units(value, text):
    assert format_bytes(value) == text


def test_real_rows_of_the_quick_sweep():
    rows = load([Path(__file__).parent / "data" / "quick_cpu_results.csv"], warn=False).rows
    frame = summary_frame(rows)
    assert frame["ok"].sum() == (rows["status"] == "ok").sum()  # every ok row lands in exactly one cell
    assert "seq_len" in frame.columns and "seed" not in frame.columns
    text = summary_text(rows, width=100)
    assert max(len(line) for line in text.splitlines()) <= 100


def _union() -> pd.DataFrame:
    """Two small grids as the default sweep unions them: seq_len x causal over 3 back ends at head_dim 64, and
    head_dim x scale for naive alone at seq_len 128 (5 points outside the first grid)."""
    rows = [_row(b, n, c, time_ms=f * n / 128) for n in (128, 256, 512) for c in (False, True)
            for b, f in (("naive", 3.0), ("sdpa", 1.0), ("chunked", 2.0))]
    rows += [_row("naive", 128, head_dim=d, scale=s, time_ms=1.0) for d in (16, 32, 64) for s in ("auto", "none")
             if (d, s) != (64, "auto")]
    return pd.DataFrame(rows)


def test_a_union_of_grids_leads_with_seq_len_against_every_back_end_at_the_shared_values():
    rows = _union()
    frame = summary_frame(rows)
    assert set(swept_axes(rows)) == {"seq_len", "head_dim", "causal", "scale"}
    piece = leading_slice(frame)
    assert list(piece.frame.columns[:3]) == ["seq_len", "causal", "backend"]
    assert set(piece.frame["backend"]) == {"naive", "sdpa", "chunked"} and len(piece.frame) == 18
    assert piece.held == {"head_dim": 64, "scale": "auto"}
    assert piece.other_rows == 5 and piece.other_axes == ["head_dim", "scale"]
    text = summary_text(rows, width=100)
    lines = text.splitlines()
    assert lines[0] == "Back ends compared at head_dim 64, scale auto:"
    assert lines[1].split() == ["seq_len", "causal", "naive", "sdpa", "chunked"]
    assert "(5 other rows vary head_dim, scale (report.md has them))" in text
    assert "23 rows: 23 ok" in text


def test_a_lead_axis_with_one_value_in_the_slice_is_held_too():
    rows = _union()
    rows = rows[~rows["causal"].astype(bool)]  # causal now varies nowhere: no axis at all
    assert "causal" not in swept_axes(rows)
    rows = pd.concat([rows, pd.DataFrame([_row("naive", 128, True, head_dim=16, time_ms=1.0)])])
    piece = leading_slice(summary_frame(rows))  # causal varies, but only outside the slice
    assert list(piece.frame.columns[:2]) == ["seq_len", "backend"]
    assert piece.held == {"head_dim": 64, "causal": False, "scale": "auto"}
    assert summary_text(rows).splitlines()[0] == "Back ends compared at head_dim 64, causal false, scale auto:"
    assert "causal" in piece.other_axes


def test_one_grid_keeps_its_whole_table():
    rows = _grid()
    assert leading_slice(summary_frame(rows)) is None  # every combination of the axes: the table is the answer
    text = summary_text(rows, width=200)
    assert "Back ends compared" not in text and "other rows" not in text
    assert len(text.split("\n\n")[0].splitlines()) == 5  # header + 2 sizes x 2 masks
    assert "Every point" not in summary_markdown(rows)


def test_option_values_name_the_back_ends_before_any_is_left_out():
    rows = _union()
    rows.loc[rows["backend"] == "chunked", "backend_options"] = json.dumps({"q_chunk": 64})
    extra = rows[rows["backend"] == "chunked"].assign(backend_options=json.dumps({"q_chunk": 128}), time_ms=9.0)
    rows = pd.concat([rows, extra], ignore_index=True)
    wide = summary_text(rows, width=200)
    assert "chunked (q_chunk=64)" in wide.splitlines()[1] and "named by" not in wide
    narrow = summary_text(rows, width=80)  # the full labels need 86 columns even without memory
    assert narrow.splitlines()[1].split() == ["seq_len", "causal", "naive", "sdpa", "chunked", "(64)", "chunked",
                                              "(128)"]
    flat = " ".join(narrow.split())
    assert "chunked (64) = chunked (q_chunk=64); chunked (128) = chunked (q_chunk=128)" in flat
    assert "split" not in flat and max(map(len, narrow.splitlines())) <= 80
    narrower = " ".join(summary_text(rows, width=60).split())  # shortened, and still one too many: split
    assert "chunked (64) =" in narrower and "split in 2 parts to fit 60 columns" in narrower


def test_the_quick_sweep_shows_every_back_end_against_seq_len():
    rows = load([Path(__file__).parent / "data" / "quick_cpu_results.csv"], warn=False).rows
    text = summary_text(rows, width=100)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 100 and "left out" not in text
    assert lines[0].startswith("Back ends compared at precision fp32, batch 1, heads 4, head_dim 64,")
    header = next(line for line in lines if line.startswith("seq_len"))
    assert header.split()[:2] == ["seq_len", "causal"]
    for backend in ("naive", "sdpa", "chunked"):
        assert backend in header
    assert "other rows vary precision," in " ".join(text.split())
    markdown = summary_markdown(rows)
    assert markdown.startswith("Back ends compared at precision fp32,")
    assert "| seq_len | causal | naive (scale_at=logits) | sdpa | chunked |" in markdown
    every = markdown.index("Every point: the ")
    assert "| naive (scale_at=query) |" in markdown[every:]  # the full table keeps the option set the slice lacks


def test_an_axis_whose_values_include_none_is_an_axis_and_none_its_own_row():
    # window=null,8 (a plugin without window gives unsupported rows at 8): two rows per back end, never one
    # median over both; pandas 3 keeps a missing value missing through astype(str), so it is counted apart
    rows = _rows(_row("sdpa", window=None, time_ms=1.0), _row("sdpa", window=8, time_ms=3.0),
                 _row("fast", window=None, time_ms=2.0), _row("fast", window=8, status="unsupported"))
    assert swept_axes(rows) == ["window"]
    frame = summary_frame(rows)
    assert len(frame) == 4 and sorted(frame.loc[frame["backend"] == "sdpa", "time_ms"]) == [1.0, 3.0]
    text = summary_text(rows, width=100)
    assert "unsupported" in text and "3.00 ms" in text and "1.00 ms" in text, text


def test_a_named_baseline_gives_each_result_its_speed_up_and_an_unknown_one_is_one_line():
    rows = _grid()
    frame = summary_frame(rows, baseline="chunked")
    at = frame.set_index(["seq_len", "causal", "backend"])
    assert at.loc[(128, False, "sdpa"), "speedup"] == pytest.approx(2.0)  # chunked 2.00 ms / sdpa 1.00 ms
    assert at.loc[(128, False, "naive"), "speedup"] == pytest.approx(2 / 3)
    assert math.isnan(at.loc[(128, False, "chunked"), "speedup"])  # the baseline's own cell
    assert at.loc[(256, True)]["speedup"].isna().all()  # chunked ran out of memory there: no reference
    assert "· 2.00×" in summary_text(rows, width=200, baseline="chunked")
    assert "×" not in summary_text(rows, width=200, baseline="none")
    with pytest.raises(ValueError, match=r"^baseline: expected one of naive, sdpa, chunked \(the back ends of these "
                                         r"rows\) or none, got 'sdpx'; did you mean sdpa\?$"):
        summary_text(rows, baseline="sdpx")
    two = _rows(_row("chunked", options={"q_chunk": 64}), _row("chunked", options={"q_chunk": 128}, time_ms=2.0))
    with pytest.raises(ValueError, match="chunked ran with 2 option sets; name one: chunked"):
        summary_frame(two, baseline="chunked")
    assert summary_frame(two, baseline="chunked (q_chunk=64)")["speedup"].tolist()[1] == pytest.approx(0.5)


def test_judged_cells_have_no_speed_up_and_no_sdpa_means_no_speed_ups():
    rows = _rows(_row("sdpa", time_ms=1.0), _row("fast", time_ms=0.5, status="incorrect"), _row("slow", time_ms=4.0))
    rows.loc[1, "time_ms"] = 0.5  # an incorrect row keeps its time
    frame = summary_frame(rows).set_index("backend")
    assert math.isnan(frame.loc["fast", "speedup"]) and frame.loc["slow", "speedup"] == pytest.approx(0.25)
    assert summary_frame(rows[rows["backend"] != "sdpa"])["speedup"].isna().all()


def test_plugins_are_never_the_columns_left_out_at_80_columns():
    """Six back ends, two of them plugins named by path (the last columns, the first a narrow table would drop)."""
    names = ["naive", "sdpa", "chunked", "flex", "hf_sdpa_iscausal", "hf_sdpa_mask"]
    rows = _rows(*(_row(b, n, time_ms=(i + 1) * n / 128, backend_source="path" if i > 3 else "builtin")
                   for n in (128, 256, 512) for i, b in enumerate(names)))
    text = summary_text(rows, width=80)
    assert max(map(len, text.splitlines())) <= 80
    headers = [line.split() for line in text.splitlines() if line.startswith("seq_len")]
    assert sorted(h for header in headers for h in header[1:]) == sorted(names), text
    assert "left out to fit 80" not in text and "every back end shown" in " ".join(text.split())


def test_a_cell_timed_on_fewer_threads_than_the_others_is_marked():
    from analysis.noise import FEWER_THREADS_MARK, fewer_threads_mask

    rows = _rows(_row("naive", 256, time_ms=54.7, num_threads=1), _row("sdpa", 256, time_ms=1.0, num_threads=2),
                 _row("chunked", 256, time_ms=2.0, num_threads=2))
    assert fewer_threads_mask(rows).tolist() == [True, False, False]
    text = summary_text(rows)
    assert f"54.7 ms{FEWER_THREADS_MARK}" in text and f"1 ms{FEWER_THREADS_MARK}" not in text
    assert "1 of 3 ok rows timed on fewer threads" in text
    assert f"54.7 ms{FEWER_THREADS_MARK}" in summary_markdown(rows)
    # every row on the same threads, or no num_threads at all (older files): nothing marked
    same = _rows(_row("naive", 256, num_threads=2), _row("sdpa", 256, num_threads=2))
    assert not fewer_threads_mask(same).any() and FEWER_THREADS_MARK not in summary_text(same)
    older = _rows(_row("naive", 256), _row("sdpa", 256)).drop(columns="num_threads")
    assert not fewer_threads_mask(older).any()
