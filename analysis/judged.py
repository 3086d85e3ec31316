"""Rows that are never results: a judged kernel's verdicts (`incorrect`, `timeout`, `crashed`).

Only `ok` rows are results. Most of the analysis reads `status == "ok"` and so leaves every other row out
without a word; a refusal the sweep expects (oom, skipped_budget, unsupported, invalid) needs none. A kernel
that gave a wrong answer, ran past its time limit or ended its process is different: its back end must be
named on every page that ranks back ends, with how many of its points were left out, or a reader takes the
back end's remaining points (or its absence) for the whole story. An `incorrect` row keeps its time and its
errors, for inspection only: nothing here ranks, stars or fits it.

One home for that: which statuses (`JUDGED`), the count of each status (`status_counts`), the per-back-end
table report.md opens with (`not_results`), and the one line every table, claim and figure adds
(`left_out_text`). Pure pandas: the statuses come from selfattn.results (pure Python).
"""

from __future__ import annotations

from typing import Iterable

import pandas as pd

from analysis.cost import Facet, variant_labels
from selfattn.results import FAILURE_STATUSES, STATUSES

# The verdicts on a kernel itself, worst first (the schema's order): the order report.md lists them in. `error` is
# a failure too, but of the harness or the call's set-up as often as of the kernel; it stays in the counts.
JUDGED: tuple[str, ...] = tuple(s for s in FAILURE_STATUSES if s != "error")
# Statuses of a point that never ran its kernel: they do not count as points a back end was measured at.
NOT_RUN: tuple[str, ...] = ("invalid", "unsupported", "skipped_budget")
REASONS_SHOWN = 3  # the first distinct reasons report.md quotes per back end, incorrect ones first
_REASON_CHARS = 160  # a reason is one line; a long one is cut here (results.csv keeps it whole)
NOT_RESULTS_COLUMNS = ("backend", *JUDGED, "left_out", "measured", "reasons")


def is_judged(rows: pd.DataFrame) -> pd.Series:
    """Whether each row is a judged kernel's verdict (incorrect, timeout, crashed): never a result."""
    if "status" not in rows:
        return pd.Series(False, index=rows.index)
    return rows["status"].isin(JUDGED)


def status_parts(rows: pd.DataFrame) -> str:
    """'210 ok, 5 incorrect, 4 unsupported': each status's count in STATUSES' order (one the schema does not know,
    from a newer file, after them); empty without rows."""
    if "status" not in rows or rows.empty:
        return ""
    counts = rows["status"].value_counts()
    order = [s for s in STATUSES if s in counts.index] + sorted(s for s in counts.index if s not in STATUSES)
    return ", ".join(f"{int(counts[s])} {s}" for s in order)


def status_counts(rows: pd.DataFrame) -> str:
    """'219 rows: 210 ok, 5 incorrect, 4 unsupported': every row counted, refused ones too."""
    parts = status_parts(rows)
    return f"{len(rows)} rows: {parts}" if parts else "0 rows"


def _labels(rows: pd.DataFrame) -> pd.Series:
    """Each row's back end as the tables name it ('naive+compile', 'chunked (q_chunk=256)')."""
    if "backend_options" not in rows:
        rows = rows.assign(backend_options="")
    return variant_labels(rows.assign(backend_options=rows["backend_options"].fillna("")))


def _reason(text: object) -> str:
    line = " ".join(str(text or "").split())
    return line if len(line) <= _REASON_CHARS else line[: _REASON_CHARS - 1] + "…"


def not_results(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per back end with a judged row: its count of each judged status, `left_out` (their sum),
    `measured` (its points that ran: every status but invalid, unsupported and skipped_budget) and `reasons`
    (its first REASONS_SHOWN distinct reasons, '; ' between them). Worst first: most incorrect, then most left
    out, then by name. A reason reads 'incorrect: max_abs_err 3.4 > ...', the incorrect ones first. Empty (with those
    columns) when no row is judged."""
    judged = is_judged(rows)
    if not judged.any():
        return pd.DataFrame(columns=list(NOT_RESULTS_COLUMNS))
    labels = _labels(rows)
    ran = ~rows["status"].isin(NOT_RUN)
    records = []
    for label in dict.fromkeys(labels[judged]):
        mine = rows[judged & (labels == label)]
        counts = mine["status"].value_counts()
        mine = mine.iloc[mine["status"].map(JUDGED.index).argsort(kind="stable")]  # incorrect, timeout, crashed
        errors = mine["error"] if "error" in mine else pd.Series("", index=mine.index)
        reasons = [f"{status}: {_reason(e)}" for status, e in zip(mine["status"], errors) if _reason(e)]
        reasons = list(dict.fromkeys(reasons))[:REASONS_SHOWN]
        records.append({"backend": label, **{s: int(counts.get(s, 0)) for s in JUDGED}, "left_out": len(mine),
                         "measured": int((ran & (labels == label)).sum()), "reasons": "; ".join(reasons)})
    table = pd.DataFrame.from_records(records, columns=list(NOT_RESULTS_COLUMNS))
    return table.sort_values(["incorrect", "left_out", "backend"], ascending=[False, False, True],
                             kind="stable").reset_index(drop=True)


def counts_text(record: pd.Series | dict) -> str:
    """'3 incorrect, 1 timeout of 12 points' for one `not_results` record."""
    parts = [f"{int(record[s])} {s}" for s in JUDGED if int(record[s])]
    return ", ".join(parts) + f" of {int(record['measured'])} point" + ("s" if int(record["measured"]) != 1 else "")


def left_out_text(rows: pd.DataFrame) -> str:
    """'triton_bad (3 incorrect of 12 points); hf_sdpa (1 timeout of 4 points)': the back ends whose judged rows
    are among `rows`, worst first; empty when none is."""
    table = not_results(rows)
    return "; ".join(f"{r['backend']} ({counts_text(r)})" for _, r in table.iterrows())


def marks(labels: pd.Series, rows: pd.DataFrame) -> pd.Series:
    """Per back-end label, its judged rows among `rows` ('3 incorrect of 12 points'; empty for a label without
    any): the column a table that ranks back ends adds (the devices compared)."""
    table = not_results(rows)
    texts = {r["backend"]: counts_text(r) for _, r in table.iterrows()}
    return labels.map(lambda label: texts.get(label, "")).astype(str)


def exponent_marks(exponents: pd.DataFrame, facets: Iterable[Facet]) -> pd.Series:
    """Per line of the exponent table (analysis.cost.exponent_table), the judged rows of its back end in its panel's
    slice ('3 incorrect of 12 points'; empty when none): its fit read the other points alone."""
    by_panel = {(f.device_label, f.precision): f.slice_rows for f in facets}
    texts = []
    for device, precision, label in zip(exponents["device"], exponents["precision"], exponents["backend"]):
        part = by_panel.get((device, precision))
        mine = part[part["label"] == label] if part is not None and "label" in part else None
        texts.append(left_out_counts(mine) if mine is not None else "")
    return pd.Series(texts, index=exponents.index, dtype=str)


def left_out_counts(rows: pd.DataFrame) -> str:
    """'3 incorrect, 1 timeout of 12 points' for rows of one back end; empty when none is judged."""
    table = not_results(rows)
    return counts_text(table.iloc[0]) if len(table) else ""


def facet_notes(facets: Iterable[Facet], left_out: str = "not drawn", *, without_line: bool = False) -> list[str]:
    """'fp32 · cpu: not drawn, not results: triton_bad (3 incorrect of 12 points)' per cost panel (figures 1-4, the
    exponent table: analysis.cost.Facet) whose slice holds judged rows: they are no point of any line, so the page
    says whose. `without_line`: only the back ends with no line in the panel (a table whose lines name their own).
    A panel met twice (the time and the memory facets of one slice) is named once."""
    notes = []
    for facet in facets:
        part = facet.slice_rows
        if without_line and len(part):
            part = part[~part["label"].isin([line.label for line in facet.lines])]
        text = left_out_text(part)
        note = f"{facet.title}: {left_out}, not results: {text}"
        if text and note not in notes:
            notes.append(note)
    return notes
