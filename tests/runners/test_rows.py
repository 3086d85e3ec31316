"""Row files and results.csv: atomic, deduplicated, and safe with many writers."""

from __future__ import annotations

import csv
import json
import multiprocessing as mp
from pathlib import Path

from runners import rows
from selfattn.results import COLUMNS, Row


def row(point_id: str, status: str = "ok", timestamp: str = "2026-01-01T00:00:00", **extra) -> dict:
    return {**Row(status=status, backend="naive", seq_len=64, causal=True, point_id=point_id,
                  timestamp=timestamp).to_dict(), **extra}


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_write_row_is_atomic_and_keeps_another_points_row(tmp_path):
    first = rows.write_row(tmp_path / "0", row("a"))
    assert first.name == "row.json" and json.loads(first.read_text())["point_id"] == "a"
    again = rows.write_row(tmp_path / "0", row("a", status="error"))  # same point: replaced
    assert again == first and json.loads(first.read_text())["status"] == "error"
    other = rows.write_row(tmp_path / "0", row("b"))  # job 0 is another point now (grid changed)
    assert other.name == "row-b.json" and json.loads(first.read_text())["point_id"] == "a"
    assert not [p for p in (tmp_path / "0").iterdir() if p.name.endswith(".tmp")]


def test_rebuild_keeps_one_row_per_point_preferring_ok_then_newest(tmp_path):
    rows.write_row(tmp_path / "0", row("a", status="error", timestamp="2026-01-02"))
    rows.write_row(tmp_path / "1", row("a", status="ok", timestamp="2026-01-01"))
    rows.write_row(tmp_path / "2", row("b", status="oom", timestamp="2026-01-01"))
    rows.write_row(tmp_path / "3", row("b", status="error", timestamp="2026-01-03"))
    (tmp_path / "4").mkdir()
    (tmp_path / "4" / ".row.json.abc.tmp").write_text('{"status": "ok", "poi')  # a killed writer's leftover
    path, kept = rows.rebuild_csv(tmp_path)
    table = read_csv(path)
    assert {(r["point_id"], r["status"]) for r in table} == {("a", "ok"), ("b", "error")}
    assert list(table[0])[: len(COLUMNS)] == list(COLUMNS)
    assert table[0]["causal"] == "true" and len(kept) == 2
    assert rows.done_points(tmp_path) == {"a": "ok", "b": "error"}


def test_extra_fields_become_extra_columns(tmp_path):
    rows.write_row(tmp_path / "0", row("a", compile_s=1.5))
    path, _ = rows.rebuild_csv(tmp_path)
    assert read_csv(path)[0]["compile_s"] == "1.5"


def _writer(args):
    folder, worker = args
    for i in range(15):
        rows.write_row(Path(folder) / f"{worker}-{i}", row(f"{worker}-{i}"))
        rows.rebuild_csv(Path(folder))


def test_concurrent_writers_never_corrupt_the_csv(tmp_path):
    with mp.get_context("fork").Pool(4) as pool:
        pool.map(_writer, [(str(tmp_path), w) for w in range(4)])
    table = read_csv(tmp_path / "results.csv")
    assert len(table) == 60 and len({r["point_id"] for r in table}) == 60
    assert all(r["status"] == "ok" for r in table)


def test_written_files_are_readable_by_others_like_a_plain_open(tmp_path):
    """mkstemp makes 0600 files; a sweep folder shared on a cluster must stay readable."""
    import os

    old = os.umask(0o022)
    os.umask(old)
    expected = 0o666 & ~old
    path = rows.write_row(tmp_path / "0", row("a"))
    csv_path, _ = rows.rebuild_csv(tmp_path)
    assert path.stat().st_mode & 0o777 == expected
    assert csv_path.stat().st_mode & 0o777 == expected
