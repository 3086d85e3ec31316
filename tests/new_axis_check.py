"""Checks run inside a copy of the repository to which tests/test_new_axis.py added the sweep axis `dropout`
(a number, default 0.0) by editing only the files docs/architecture.md lists for a new axis.

    python tests/new_axis_check.py config DEFAULT_POINT_ID
    python tests/new_axis_check.py analysis

config: the config takes dropout=0.1 (the point, its columns, a measured row's and a refused row's cells),
    refuses dropout=2 and the typo dropuot naming the axis, and the default point keeps DEFAULT_POINT_ID (what
    the code without the axis gives it).
analysis: on the default sweep's rows (tests/analysis/data/quick_cpu_results.csv), a dropout column at 0.0
    changes nothing, and a copy of every ok row at dropout=0.1 with other numbers changes no claim, study table,
    exponent or figure slice; the negative control: taken for an axis without a plain value (plain=False, no
    longer held), the same rows do change them.
Prints one line per check and exits 0 when it passed, 1 otherwise.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
BASE = {"backend": {"name": "naive"}, "precision": {"name": "fp32"}, "device": "cpu", "seq_len": 64, "head_dim": 16}


def check_config(default_id: str) -> None:
    from runners import config
    from runners.job import failed_row
    from selfattn.results import Row

    parsed = config.parse_job({**BASE, "dropout": 0.1})
    assert not parsed.problem, parsed.problem
    assert parsed.point.dropout == 0.1 and parsed.columns["dropout"] == 0.1
    row = Row()  # as selfattn.measure.measure_point fills it
    for name, value in parsed.columns.items():
        setattr(row, name, value)
    assert row.to_dict()["dropout"] == 0.1, "a measured row's file lacks the column"
    refused = config.parse_job({**BASE, "dropout": 2.0})
    assert refused.problem.startswith("dropout: expected a finite number >= 0 and <= 1"), refused.problem
    assert failed_row(refused, "invalid", refused.problem).to_dict()["dropout"] == 2.0
    typo = config.parse_job({**BASE, "dropuot": 0.1}).problem
    assert "did you mean dropout" in typo, typo
    plain = config.parse_job(BASE).point_id
    assert plain == default_id, f"the default point's id changed: {plain} != {default_id}"
    assert parsed.point_id != plain


def digest(path: Path) -> str:
    """The default sweep's chapter as text: every claim, study table and exponent, and the rows or points of the
    figures' slices (1-4: the cost lines, 5: stability, 6: overflow, 10: layer shares, 18: path length)."""
    from analysis.claim import claims_frame
    from analysis.claims import check_claims, study_tables
    from analysis.cost import cost_facets, exponent_table, layer_shares, memory_metric
    from analysis.load import load
    from analysis.recurrence import sensitivity_by_distance
    from analysis.stability import overflow_rows, stability_points, stability_slice

    rows = load([path], warn=False).rows
    parts = [claims_frame(check_claims(rows)).to_csv(), exponent_table(rows).to_csv(),
             *(table.to_csv() for _, _, table in study_tables(rows))]
    for metric in ("time_ms", memory_metric(rows)):
        parts += [facet.slice_rows[["point_id", metric]].to_csv() for facet in cost_facets(rows, metric)]
    chosen = stability_slice(rows)
    parts += [stability_points(chosen).to_csv() if chosen else "", overflow_rows(rows)[["point_id"]].to_csv(),
              layer_shares(rows).to_csv(), sensitivity_by_distance(rows).to_csv()]
    return "\n".join(parts)


def check_analysis() -> None:
    from analysis import slices

    fixture = ROOT / "tests" / "analysis" / "data" / "quick_cpu_results.csv"
    raw = pd.read_csv(fixture, dtype=str, keep_default_na=False)
    assert "dropout" not in raw, "the fixture already has the column"
    ok = raw[raw["status"] == "ok"]
    other = ok.assign(dropout="0.1", point_id=ok["point_id"] + "d")  # another point: ids hash every axis
    for column in ("time_ms", "time_ms_p20", "time_ms_p80", "peak_mem_bytes", "peak_alloc_bytes", "logit_std",
                   "softmax_entropy", "max_weight", "rel_rms_err", "max_abs_err", "grad_norm_q", "tflops",
                   "perm_max_abs_diff", "grad_far_near_ratio", "nonfinite_frac"):
        if column not in other:
            continue
        numbers = pd.to_numeric(other[column], errors="coerce") * 0.5 * pd.to_numeric(other["seq_len"]) / 512
        whole = column.endswith("_bytes")  # kept integers: the column's type must not change with the new rows
        other[column] = numbers.map(lambda v: "" if pd.isna(v) else repr(round(v) if whole else float(v)))
    with tempfile.TemporaryDirectory() as folder:
        plain_csv, mixed_csv = Path(folder) / "plain.csv", Path(folder) / "mixed.csv"
        raw.assign(dropout="0.0").to_csv(plain_csv, index=False)
        pd.concat([raw.assign(dropout="0.0"), other]).to_csv(mixed_csv, index=False)
        before = digest(fixture)
        assert digest(plain_csv) == before, "rows at the plain value read differently from a file without the axis"
        assert digest(mixed_csv) == before, "rows at dropout=0.1 reached a claim, table or figure slice"
        slices.ABLATIONS = tuple(a for a in slices.ABLATIONS if a != "dropout")  # as if marked plain=False
        assert digest(mixed_csv) != before, "negative control: without the filter the rows change nothing"


def main(argv: list[str]) -> int:
    name, *args = argv
    try:
        {"config": check_config, "analysis": check_analysis}[name](*args)
    except Exception as exc:  # noqa: BLE001  (any failure of the check is its answer)
        print(f"{name}: FAILED: {type(exc).__name__}: {exc}")
        return 1
    print(f"{name}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
