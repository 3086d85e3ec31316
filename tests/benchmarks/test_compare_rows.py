"""benchmarks/compare_rows.py: the check of a behaviour-preserving refactor finds what changed, and only that."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

from selfattn.results import COLUMNS, Row

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "compare_rows.py"


def load_script():
    spec = importlib.util.spec_from_file_location("compare_rows", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True)
    with open(folder / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(COLUMNS))
        writer.writeheader()
        writer.writerows(rows)
    return folder


def sweep(n: int = 4, **change) -> list[dict]:
    return [{**Row(status="ok", backend="naive", seq_len=64 * (i + 1), max_abs_err=1e-7, peak_alloc_bytes=4096 * i,
                   time_ms=1.0 + i, peak_mem_bytes=8192, point_id=f"p{i}", sweep_id="quick/a",
                   timestamp="2026-12-01T00:00:00+00:00").to_dict(), **change} for i in range(n)]


def test_a_rerun_that_differs_only_in_measurements_matches(tmp_path, capsys):
    before = write(tmp_path / "before", sweep())
    rerun = [{**r, "time_ms": 2 * r["time_ms"], "peak_mem_bytes": 12288, "sweep_id": "quick/b",
              "timestamp": "2026-12-02T00:00:00+00:00"} for r in sweep()]
    after = write(tmp_path / "after", rerun)
    assert load_script().main([str(before), str(after)]) == 0
    assert "the 4 points match" in capsys.readouterr().out


def test_every_kind_of_difference_is_reported_and_fails(tmp_path, capsys):
    before = write(tmp_path / "before", sweep())
    changed = sweep()
    changed[0]["status"] = "oom"
    changed[1]["max_abs_err"] = 2e-7
    changed[2]["peak_alloc_bytes"] = 1  # the allocator's peak is exact: compared
    del changed[3]
    changed.append({**sweep()[0], "point_id": "p9"})
    after = write(tmp_path / "after", changed)
    assert load_script().main([str(before / "results.csv"), str(after)]) == 1
    out = capsys.readouterr().out
    for section in ("only in before: 1 point", "only in after: 1 point", "status: 1 point", "max_abs_err: 1 point",
                    "peak_alloc_bytes: 1 point", "result: 5 difference(s)"):
        assert section in out, out
    assert "'ok' -> 'oom'" in out


def test_tolerance_ignore_and_compare(tmp_path, capsys):
    before = write(tmp_path / "before", sweep())
    after = write(tmp_path / "after", [{**r, "max_abs_err": 1.0000001e-7, "peak_mem_bytes": 1} for r in sweep()])
    script = load_script()
    assert script.main([str(before), str(after)]) == 1
    assert script.main([str(before), str(after), "--rtol", "1e-6"]) == 0
    assert script.main([str(before), str(after), "--ignore", "max_abs_err"]) == 0
    assert script.main([str(before), str(after), "--rtol", "1e-6", "--compare", "peak_mem_bytes"]) == 1
    assert script.main([str(before), str(tmp_path / "missing")]) == 2
    capsys.readouterr()


def test_a_metric_one_row_did_not_measure_is_not_a_difference_but_a_changed_value_still_is(tmp_path, capsys):
    before = write(tmp_path / "before", sweep())  # no metrics value: every metric measured
    fewer = [{**r, "metrics": "accuracy", "peak_alloc_bytes": None} for r in sweep()]  # memory off
    after = write(tmp_path / "after", fewer)
    assert load_script().main([str(before), str(after)]) == 1  # the metrics column itself differs
    out = capsys.readouterr().out
    assert "peak_alloc_bytes" not in out.split("result:")[0] and "memory 4" in out and "\nmetrics: 4 points" in out
    changed = [{**r, "metrics": "accuracy", "peak_alloc_bytes": None, "max_abs_err": 2e-7} for r in sweep()]
    same_metrics = write(tmp_path / "after2", changed)
    reference = write(tmp_path / "before2", [{**r, "metrics": "memory,accuracy"} for r in sweep()])
    assert load_script().main([str(reference), str(same_metrics)]) == 1
    out = capsys.readouterr().out
    assert "max_abs_err: 4 points" in out and "peak_alloc_bytes:" not in out  # accuracy ran in both: compared
