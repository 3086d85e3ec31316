"""Incorrect, timed-out and crashed rows are never results: not starred, not fitted, in no claim, named and counted.

The rows are fabricated: a back end `fastbad` that is the fastest wherever it runs, correct at n = 256 and 512,
timed out (no mask) and crashed (causal) at 1024, and incorrect at 2048 and 4096, where it kept a time ten times
below every other back end's and an output that is not permutation equivariant (so a claim that read those rows
would flip).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis.claims import FAILS, HOLDS, check_claims
from analysis.cost import LINE_END_STATUSES, cost_facets, exponent_table
from analysis.figures import Made
from analysis.figures.causal import causal_saving
from analysis.figures.cost import time_vs_seq_len
from analysis.judged import JUDGED, left_out_text, marks, not_results, status_counts
from analysis.load import load
from analysis.report import write_report
from analysis.summary import summary_frame, summary_markdown, summary_text

ROOT = Path(__file__).resolve().parents[2]
BAD = "fastbad"
INCORRECT = "max_abs_err 3.36 > 2·err(same-dtype reference) + atol = 2.1e-06 (FlashAttention's rule)"
TIMEOUT = "past the point's time limit of 12 s"
CRASHED = "the worker process ended: signal 11 (SIGSEGV)"
COUNTS = f"{BAD} (4 incorrect, 1 timeout, 1 crashed of 10 points)"


def add_fastbad(f, device_speed: float = 1.0):
    """`f` (a Fabricator with its quadratic_cost rows) plus the back end described above."""
    for n in (256, 512, 1024, 2048, 4096):
        for causal in (False, True):
            row = f.point(backend=BAD, seq_len=n, causal=causal)
            for column in ("time_ms", "time_ms_p20", "time_ms_p80"):
                row[column] *= 0.1
            if n >= 2048:  # wrong, and fast: what a kernel that skips work looks like
                row.update(status="incorrect", error=INCORRECT, time_ms=0.3 / device_speed,
                           time_ms_p20=0.29 / device_speed, time_ms_p80=0.31 / device_speed)
                if not causal:
                    row["perm_max_abs_diff"] = 0.5
            elif n == 1024:
                row.update(status="crashed" if causal else "timeout", error=CRASHED if causal else TIMEOUT,
                           time_ms=None, time_ms_p20=None, time_ms_p80=None, peak_alloc_bytes=None,
                           peak_mem_bytes=None, perm_max_abs_diff=None)
    return f


@pytest.fixture
def judged_csv(fabricate, tmp_path) -> Path:
    return add_fastbad(fabricate().quadratic_cost()).write(tmp_path / "judged" / "results.csv")


@pytest.fixture
def rows(judged_csv) -> pd.DataFrame:
    return load([judged_csv], warn=False).rows


def as_results(rows: pd.DataFrame) -> pd.DataFrame:
    """The negative control: the same rows with every judged row read as ok."""
    return rows.assign(status=rows["status"].where(~rows["status"].isin(JUDGED), "ok"))


def test_status_counts_follow_the_schemas_order_of_statuses(rows):
    assert status_counts(rows) == "42 rows: 34 ok, 1 oom, 1 skipped_budget, 4 incorrect, 1 timeout, 1 crashed"
    assert status_counts(rows.iloc[:0]) == "0 rows"


def test_not_results_name_the_back_end_its_counts_of_points_run_and_its_first_reasons(rows):
    (record,) = not_results(rows).to_dict("records")
    assert record["backend"] == BAD and (record["incorrect"], record["timeout"], record["crashed"]) == (4, 1, 1)
    assert record["left_out"] == 6 and record["measured"] == 10
    # the first reasons, the incorrect ones first, each after its status
    assert record["reasons"] == f"incorrect: {INCORRECT}; timeout: {TIMEOUT}; crashed: {CRASHED}"
    assert left_out_text(rows) == COUNTS
    assert not_results(as_results(rows)).empty and left_out_text(as_results(rows)) == ""


def test_the_summary_table_marks_the_judged_cells_and_never_stars_them(rows):
    frame = summary_frame(rows)
    bad = frame[frame["backend"] == BAD].set_index(["seq_len", "causal"])
    assert bad.loc[(2048, False), "not_result"] == "incorrect" and bad.loc[(2048, False), "time_ms"] == pytest.approx(0.3)
    assert bad.loc[(1024, False), "not_result"] == "timeout" and pd.isna(bad.loc[(1024, False), "time_ms"])
    assert bad.loc[(256, False), "not_result"] == ""  # correct there: a result, and the fastest
    markdown = summary_markdown(rows)
    line_2048 = next(line for line in markdown.splitlines() if line.startswith("| 2048 | false |"))
    cells = [c.strip() for c in line_2048.strip("|").split("|")]
    assert cells[-1] == "0.300 ms (incorrect)"  # its time, kept for inspection, marked
    assert [c for c in cells if c.startswith("**")] == [cells[4]]  # chunked, the fastest back end that is correct
    assert "| 1024 | false |" in markdown and "| timeout |" in markdown.split("| 1024 | false |")[1].splitlines()[0] + "|"
    assert f"Not results (marked, never the fastest): {COUNTS}." in markdown
    assert "42 rows: 34 ok, 1 oom, 1 skipped_budget, 4 incorrect, 1 timeout, 1 crashed." in markdown
    text = summary_text(rows, width=200)
    row_2048 = next(line for line in text.splitlines() if line.startswith("2048") and "false" in line)
    assert "*0.300" not in row_2048 and "0.300 ms (incorrect)" in row_2048 and "*433" in row_2048
    assert f"Not results (marked, never the fastest): {COUNTS}." in text
    # the negative control: read as results, the wrong kernel is the fastest and starred
    control = summary_text(as_results(rows), width=200)
    assert "*0.300 ms" in next(line for line in control.splitlines() if line.startswith("2048") and "false" in line)


def test_no_claim_reads_the_judged_rows_and_those_that_would_name_them(rows):
    claims = {c.key: c for c in check_claims(rows)}
    alone = {c.key: c for c in check_claims(rows[~rows["status"].isin(JUDGED)])}  # ok rows, no judged row at all
    read = {c.key: c for c in check_claims(as_results(rows))}
    assert claims.keys() == alone.keys()
    suffix = f"; not results, left out: {COUNTS}"
    for key, found in claims.items():
        assert found.verdict == alone[key].verdict, key  # each verdict from the ok rows alone
        assert found.evidence.removesuffix(suffix) == alone[key].evidence, key  # and every number in its evidence
        # named exactly where the rows would have changed it
        assert (found.evidence.endswith(suffix)) == ((read[key].evidence, read[key].verdict)
                                                     != (alone[key].evidence, alone[key].verdict)), key
    assert claims["permutation_equivariant"].verdict == HOLDS and read["permutation_equivariant"].verdict == FAILS
    assert claims["compute_quadratic"].evidence.endswith(suffix)
    assert not claims["memory_quadratic"].evidence.endswith(suffix)  # it reads naive alone: nothing of fastbad


def test_fits_read_the_ok_points_and_no_judged_row_ends_a_line_as_oom(rows):
    table = exponent_table(rows).set_index(["backend", "causal"])
    assert table.loc[(BAD, False), "time_sizes"] == "256–512 (2)"  # its 2048, 4096 (incorrect) and 1024 left out
    control = exponent_table(as_results(rows)).set_index(["backend", "causal"])
    assert control.loc[(BAD, False), "time_sizes"] == "512–4096 (3)"  # the larger sizes: its wrong 2048 and 4096
    for facet in cost_facets(rows, "time_ms"):
        assert set(facet.failed["status"]) <= set(LINE_END_STATUSES)
        (line,) = [line for line in facet.lines if line.label == BAD and not line.causal]
        assert list(line.points["seq_len"]) == [256, 512] and list(line.repeats["seq_len"]) == [256, 512]
        assert set(facet.slice_rows.loc[facet.slice_rows["backend"] == BAD, "status"]) == {"ok", *JUDGED}


def test_the_speed_figures_still_draw_without_the_judged_points_and_say_whose(rows, tmp_path):
    from analysis.figures import Context

    ctx = Context(tmp_path)
    for figure in (time_vs_seq_len, causal_saving):
        made = figure(rows, ctx)
        assert isinstance(made, Made) and all(p.stat().st_size > 10_000 for p in made.files)
        assert any(note.endswith(f"not drawn, not results: {COUNTS}") for note in made.notes), made.notes
    control = time_vs_seq_len(as_results(rows), ctx)
    assert not any("not results" in note for note in control.notes)


def test_devices_compared_mark_a_back_end_incorrect_on_some_points(fabricate, tmp_path):
    cpu = add_fastbad(fabricate().quadratic_cost())
    gpu = add_fastbad(fabricate(device="cuda", device_name="Fake GPU", hostname="host-b", speed=8.0, seed=3)
                      .quadratic_cost(), device_speed=8.0)
    paths = [cpu.write(tmp_path / "cpu" / "results.csv"), gpu.write(tmp_path / "gpu" / "results.csv")]
    report = write_report(paths, tmp_path / "report", figures=(), warn=False)
    devices = report.devices.set_index("backend")
    assert devices.loc[BAD, "not_results"] == "8 incorrect, 2 timeout, 2 crashed of 20 points"
    assert devices.loc["naive", "not_results"] == ""
    compared = report.path.read_text().split("## Devices compared")[1]
    assert f"| {BAD} (8 incorrect, 2 timeout, 2 crashed of 20 points) |" in re.sub(r" +\|", " |", compared)
    assert list(marks(pd.Series(["naive", BAD]), load(paths, warn=False).rows)) == [
        "", "8 incorrect, 2 timeout, 2 crashed of 20 points"]


@pytest.mark.slow
def test_the_report_command_lists_the_judged_back_end_first_and_uses_none_of_its_rows(judged_csv, tmp_path):
    out = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "analysis.report", str(judged_csv), "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    text = (out / "report.md").read_text()
    assert "(34 ok, 1 oom, 1 skipped_budget, 4 incorrect, 1 timeout, 1 crashed)" in text.splitlines()[2]
    first, measured = text.index("## Not results: incorrect, timed-out and crashed back ends"), text.index("## What was measured")
    assert first < measured and text.index("## ") == first  # the first section of the report
    section = re.sub(r" +\|", " |", text[first:measured])
    assert f"| {BAD} | 4 of 10 | 1 of 10 | 1 of 10 | 6 of 10 |" in section
    assert f"| incorrect: {INCORRECT}; timeout: {TIMEOUT}; crashed: {CRASHED} |" in section
    assert "| 0.300 ms (incorrect) |" in re.sub(r" +\|", " |", text) and "**0.300" not in text
    claims = pd.read_csv(out / "claims.csv").set_index("key")
    assert claims.loc["permutation_equivariant", "verdict"] == HOLDS  # the wrong kernel's rows would fail it
    assert claims.loc["compute_quadratic", "evidence"].endswith(f"not results, left out: {COUNTS}")
    exponents = pd.read_csv(out / "exponents.csv", keep_default_na=False)
    bad = exponents[exponents["backend"] == BAD]
    assert set(bad["time_sizes"]) == {"256–512 (2)"} and set(bad["not_results"]) == {
        "4 incorrect, 1 timeout, 1 crashed of 10 points"}
    exponents_md = re.sub(r" +\|", " |", text.split("## Fitted exponents")[1].split("## Figures")[0])
    assert f"| {COUNTS} | no mask |" in exponents_md
    figures = text.split("## Figures")[1]
    assert f"*No figure draws a row that is not a result:* {COUNTS}." in figures
    assert (out / "figures" / "fig1_time_vs_seq_len.png").stat().st_size > 10_000
    fig1 = figures.split("### 1. Time vs sequence length")[1].split("### ")[0]
    assert f"not drawn, not results: {COUNTS}" in fig1


def test_a_claim_names_the_judged_rows_only_where_they_would_change_it_and_its_study_stays_when_all_are_judged():
    from analysis.claim import NOT_MEASURED, ClaimSpec, Evidence
    from analysis.claims import _Judged

    rows = pd.DataFrame({"status": ["ok", "incorrect", "timeout"], "backend": ["naive", BAD, BAD],
                         "backend_options": ["{}"] * 3, "error": ["", INCORRECT, TIMEOUT], "time_ms": [1.0, 0.1, None]})

    def of(backend: str):
        def read(part: pd.DataFrame) -> Evidence | None:
            ok = part[(part["status"] == "ok") & (part["backend"] == backend)]
            return Evidence(f"{len(ok)} rows", (True,)) if len(ok) else None  # None: its study's rows are absent
        return read

    def broken(part: pd.DataFrame) -> Evidence:
        if part["time_ms"][part["status"] == "ok"].isna().any():
            raise ValueError("a result without a time")
        return Evidence("fine", (True,))

    judged = _Judged(rows)
    naive = judged.check(ClaimSpec("a", "naive", "rule", "quick", "Study", of("naive")))
    assert naive.evidence == "1 rows"  # fastbad's rows would not change it: not named
    bad = judged.check(ClaimSpec("b", "bad", "rule", "quick", "Study", of(BAD)))
    assert bad.verdict == NOT_MEASURED  # all its rows are judged: still listed, not dropped with its study
    assert bad.evidence == f"no row that is a result; not results, left out: {BAD} (1 incorrect, 1 timeout of 2 points)"
    assert judged.check(ClaimSpec("c", "c", "rule", "quick", "Study", broken)).evidence.endswith(
        f"left out: {BAD} (1 incorrect, 1 timeout of 2 points)")  # it breaks on them as results: it would read them
    assert _Judged(rows[rows["status"] == "ok"]).check(ClaimSpec("b", "bad", "rule", "quick", "Study", of(BAD))) is None
