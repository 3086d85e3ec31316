"""The row store (row files, the point index) and results.csv: atomic, deduplicated, safe with many writers."""

from __future__ import annotations

import csv
import json
import multiprocessing as mp
from pathlib import Path

import pytest

from runners import row_store, rows
from selfattn.results import COLUMNS, Row


def row(point_id: str, status: str = "ok", timestamp: str = "2026-01-01T00:00:00", **extra) -> dict:
    return {**Row(status=status, backend="naive", seq_len=64, causal=True, point_id=point_id,
                  timestamp=timestamp).to_dict(), **extra}


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_write_row_is_atomic_and_keeps_another_points_row(tmp_path):
    first = row_store.write_row(tmp_path / "0", row("a"))
    assert first.name == "row.json" and json.loads(first.read_text())["point_id"] == "a"
    again = row_store.write_row(tmp_path / "0", row("a", status="error"))  # same point: replaced
    assert again == first and json.loads(first.read_text())["status"] == "error"
    other = row_store.write_row(tmp_path / "0", row("b"))  # job 0 is another point now (grid changed)
    assert other.name == "row-b.json" and json.loads(first.read_text())["point_id"] == "a"
    assert not [p for p in (tmp_path / "0").iterdir() if p.name.endswith(".tmp")]


def test_rebuild_keeps_one_row_per_point_preferring_ok_then_newest(tmp_path):
    row_store.write_row(tmp_path / "0", row("a", status="error", timestamp="2026-01-02"))
    row_store.write_row(tmp_path / "1", row("a", status="ok", timestamp="2026-01-01"))
    row_store.write_row(tmp_path / "2", row("b", status="oom", timestamp="2026-01-01"))
    row_store.write_row(tmp_path / "3", row("b", status="error", timestamp="2026-01-03"))
    (tmp_path / "4").mkdir()
    (tmp_path / "4" / ".row.json.abc.tmp").write_text('{"status": "ok", "poi')  # a killed writer's leftover
    path, kept = rows.rebuild_csv(tmp_path)
    table = read_csv(path)
    assert {(r["point_id"], r["status"]) for r in table} == {("a", "ok"), ("b", "error")}
    assert list(table[0])[: len(COLUMNS)] == list(COLUMNS)
    assert table[0]["causal"] == "true" and len(kept) == 2


def test_extra_fields_become_extra_columns(tmp_path):
    row_store.write_row(tmp_path / "0", row("a", compile_s=1.5))
    path, _ = rows.rebuild_csv(tmp_path)
    assert read_csv(path)[0]["compile_s"] == "1.5"


def _writer(args):
    folder, worker = args
    for i in range(15):
        row_store.write_row(Path(folder) / f"{worker}-{i}", row(f"{worker}-{i}"))
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
    path = row_store.write_row(tmp_path / "0", row("a"))
    csv_path, _ = rows.rebuild_csv(tmp_path)
    assert path.stat().st_mode & 0o777 == expected
    assert csv_path.stat().st_mode & 0o777 == expected


# --- the point index: a job's bookkeeping never reads the other rows ------------------------


def test_point_status_is_a_lookup_not_a_scan(tmp_path, monkeypatch):
    rows.record_row(tmp_path, tmp_path / "0", row("a"))
    rows.record_row(tmp_path, tmp_path / "1", row("b", status="oom"))
    monkeypatch.setattr(row_store, "row_paths", lambda *_: pytest.fail("a job must not list the sweep's rows"))
    monkeypatch.setattr(rows, "LIVE_MAX_ROWS", 0)  # a large sweep: no results.csv after each job
    assert row_store.point_status(tmp_path, "a") == "ok" and row_store.point_status(tmp_path, "b") == "oom"
    assert row_store.point_status(tmp_path, "never-measured") is None
    rows.record_row(tmp_path, tmp_path / "2", row("c"))
    assert row_store.point_status(tmp_path, "c") == "ok"


def test_index_follows_the_duplicate_rule_and_the_row_files(tmp_path):
    rows.record_row(tmp_path, tmp_path / "0", row("a", status="error", timestamp="2026-01-01"))
    rows.record_row(tmp_path, tmp_path / "1", row("a", status="ok", timestamp="2026-01-02"))  # retry_failed
    rows.record_row(tmp_path, tmp_path / "2", row("a", status="error", timestamp="2026-01-03"))  # never beats ok
    assert row_store.point_status(tmp_path, "a") == "ok"
    (tmp_path / "1" / "row.json").unlink()  # a person deletes the row to measure the point again
    assert row_store.point_status(tmp_path, "a") is None
    # a resumed sweep whose grid changed: job 0 is another point now, both rows stay
    rows.record_row(tmp_path, tmp_path / "0", row("b"))
    assert (tmp_path / "0" / "row-b.json").is_file()
    assert row_store.point_status(tmp_path, "b") == "ok" and json.loads((tmp_path / "0" / "row.json").read_text())["point_id"] == "a"


def test_a_folder_from_before_the_index_is_read_once(tmp_path, monkeypatch):
    row_store.write_row(tmp_path / "0", row("a"))
    row_store.write_row(tmp_path / "1", row("b", status="error"))
    assert not (tmp_path / row_store.INDEX_NAME).exists()
    rows.ensure_index(tmp_path)  # the sweep's start: the index and results.csv from one read of the rows
    assert {r["point_id"] for r in read_csv(tmp_path / "results.csv")} == {"a", "b"} and not rows.csv_is_stale(tmp_path)
    monkeypatch.setattr(row_store, "row_paths", lambda *_: pytest.fail("read again"))
    assert row_store.point_status(tmp_path, "b") == "error" and row_store.point_status(tmp_path, "a") == "ok"


def test_a_lookup_in_a_folder_without_an_index_makes_it(tmp_path):
    row_store.write_row(tmp_path / "0", row("a"))
    assert row_store.point_status(tmp_path, "a") == "ok" and (tmp_path / row_store.INDEX_NAME).is_dir()
    assert not (tmp_path / "results.csv").exists()  # the store knows no CSV: its view builds one when asked


def test_a_fresh_folder_gets_no_index_from_a_lookup(tmp_path):
    assert row_store.point_status(tmp_path / "missing", "a") is None
    assert row_store.point_status(tmp_path, "a") is None and not (tmp_path / row_store.INDEX_NAME).exists()


def test_results_csv_is_live_while_small_then_built_on_demand(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(rows, "LIVE_MAX_ROWS", 3)
    for i in range(5):
        rows.record_row(tmp_path, tmp_path / str(i), row(f"p{i}"))
    assert len(read_csv(tmp_path / "results.csv")) == 3  # built after each job until it held 3 rows
    assert rows.csv_is_stale(tmp_path)
    assert rows.main([str(tmp_path), "--if-stale"]) == 0
    assert "results: built" in capsys.readouterr().out and len(read_csv(tmp_path / "results.csv")) == 5
    assert not rows.csv_is_stale(tmp_path)
    rows.record_row(tmp_path, tmp_path / "5", row("p5"))
    assert rows.csv_is_stale(tmp_path)
    assert rows.main([str(tmp_path)]) == 0 and "results: 6 rows ->" in capsys.readouterr().out


def test_a_single_run_writes_its_csv_right_away(tmp_path, monkeypatch):
    monkeypatch.setattr(rows, "LIVE_MAX_ROWS", 0)
    rows.record_row(tmp_path, tmp_path, row("a"))
    assert [r["point_id"] for r in read_csv(tmp_path / "results.csv")] == ["a"]
    assert not (tmp_path / row_store.INDEX_NAME).exists()


def test_the_sweep_end_builds_results_csv_then_starts_the_report(tmp_path, monkeypatch, capsys):
    from omegaconf import OmegaConf

    from runners import report_process
    from runners.callbacks import SweepCallback

    sweep = tmp_path / "sweep"
    rows.ensure_index(sweep)  # as the sweep callback does at the start
    monkeypatch.setattr(rows, "LIVE_MAX_ROWS", 0)  # a large sweep: jobs leave results.csv to the end
    for i, n in enumerate((256, 512, 1024)):
        rows.record_row(sweep, sweep / str(i), row(f"p{i}", seq_len=n))
    assert not (sweep / "results.csv").exists()
    seen = []

    def write_report(csv_path, out_dir, *, limit_s, baseline=None):  # its process is tested in tests/runners/test_report_process.py
        seen.append((csv_path, out_dir, limit_s, len(read_csv(sweep / "results.csv"))))
        return None

    monkeypatch.setattr(report_process, "write_report", write_report)
    cfg = OmegaConf.create({"name": "t", "report": True, "wandb": {"mode": "disabled"},
                            "hydra": {"sweep": {"dir": str(sweep)}}})
    SweepCallback().on_multirun_end(cfg)
    assert seen == [(sweep / "results.csv", sweep / "report", report_process.default_timeout_s(3), 3)]


def test_rows_import_without_torch():
    import subprocess
    import sys

    code = "import runners.rows, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


# --- killed writers and many writers ---------------------------------------------------------


KILLED_WRITER = """
import sys
from pathlib import Path

import pytest
from runners import rows
from selfattn.results import Row
sweep, start = Path(sys.argv[1]), int(sys.argv[2])
rows.LIVE_MAX_ROWS = 10**9  # rebuild results.csv after every row: the kill lands in a CSV write too
for i in range(start, start + 10**6):
    r = Row(status="ok", backend="naive", seq_len=64, causal=True, point_id=f"k{i}", timestamp="2026").to_dict()
    rows.record_row(sweep, sweep / str(i), {**r, "pad": "x" * 20000})
"""


def _check_whole(sweep: Path) -> list[dict]:
    """Every row file parses, and results.csv (if any) is whole: the header and complete rows only."""
    found = [json.loads(p.read_text()) for p in sweep.glob("*/row*.json")]  # raises on a partial row
    if (sweep / "results.csv").exists():
        text = (sweep / "results.csv").read_text()
        table = read_csv(sweep / "results.csv")
        assert text.endswith("\n") and all(len(r) == len(table[0]) and None not in r.values() for r in table)
        assert all(r["pad"] == "x" * 20000 for r in table)
    return found


@pytest.mark.parametrize("delay_s", [0.3, 0.45, 0.6])
def test_a_writer_killed_at_any_moment_leaves_no_partial_row_or_csv(tmp_path, delay_s):
    import signal
    import subprocess
    import sys
    import time

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(tmp_path), "0"], cwd=root)
    time.sleep(delay_s)
    while not list(tmp_path.glob("*/row.json")) and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    found = _check_whole(tmp_path)
    assert found, "the writer was killed before its first row"
    # the rerun measures exactly the points without a row: what point_status says is missing
    ids = [f"k{i}" for i in range(len(found) + 5)]
    missing = [p for p in ids if row_store.point_status(tmp_path, p, tmp_path / p[1:]) is None]  # job i ran point k<i>
    assert set(ids) - set(missing) == {r["point_id"] for r in found}
    for p in missing:
        rows.record_row(tmp_path, tmp_path / p, {**row(p), "pad": "x" * 20000})
    rows.rebuild_csv(tmp_path)
    assert sorted(r["point_id"] for r in _check_whole(tmp_path)) == sorted(ids)
    assert sorted(r["point_id"] for r in read_csv(tmp_path / "results.csv")) == sorted(ids)


def test_an_interrupted_atomic_write_leaves_the_old_file(tmp_path, monkeypatch):
    path = row_store.write_row(tmp_path / "0", row("a"))

    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(row_store.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        row_store.write_row(tmp_path / "0", row("a", status="error"))
    assert json.loads(path.read_text())["status"] == "ok"
    assert [p.name for p in (tmp_path / "0").iterdir()] == ["row.json"]


def _recorder(args):
    folder, worker = args
    sweep = Path(folder)
    for i in range(15):
        point = f"{worker}-{i}"
        assert row_store.point_status(sweep, point) is None
        rows.record_row(sweep, sweep / f"{worker * 100 + i}", row(point))
        assert row_store.point_status(sweep, point) == "ok"


@pytest.mark.parametrize("live", [True, False], ids=["csv-after-each-job", "csv-at-the-end"])
def test_eight_concurrent_jobs_lose_no_row_and_duplicate_none(tmp_path, monkeypatch, live):
    monkeypatch.setattr(rows, "LIVE_MAX_ROWS", 10**9 if live else 0)  # fork: the workers inherit it
    rows.ensure_index(tmp_path)  # as the sweep callback does at the start
    with mp.get_context("fork").Pool(8) as pool:
        pool.map(_recorder, [(str(tmp_path), w) for w in range(8)])
    if not live:
        assert not (tmp_path / "results.csv").exists()
    else:
        # Kept current while small, without waiting for each other: a job that finds another
        # building skips its own build, so the last CSV may miss a row; it then reads as stale,
        # never as complete.
        assert len(read_csv(tmp_path / "results.csv")) == 120 or rows.csv_is_stale(tmp_path)
    rows.build_stale([tmp_path])  # what the sweep's end (and the report) does
    table = read_csv(tmp_path / "results.csv")
    assert len(table) == 120 and len({r["point_id"] for r in table}) == 120
    assert len(list((tmp_path / row_store.INDEX_NAME).iterdir())) == 120
    assert not rows.csv_is_stale(tmp_path)


def test_live_rebuilds_reuse_parsed_rows_yet_write_what_a_fresh_build_writes(tmp_path):
    # A small sweep rebuilds results.csv after each job from rows parsed before (the same file:
    # the same object); a row file rewritten since (a retried point) must be read again.
    for i in range(5):
        row_store.write_row(tmp_path / str(i), row(f"p{i}", **({"compile_s": 0.5} if i == 3 else {})))
        rows.rebuild_csv(tmp_path, wait=False)
    first = row_store.read_rows(tmp_path, cached=True)
    assert all(a is b for a, b in zip(first, row_store.read_rows(tmp_path, cached=True)))  # parsed once
    row_store.write_row(tmp_path / "2", row("p2", status="error"))  # job 2's file replaced
    again = row_store.read_rows(tmp_path, cached=True)
    assert again[2] is not first[2] and again[2]["status"] == "error" and again[1] is first[1]
    rows.rebuild_csv(tmp_path, wait=False)
    live = (tmp_path / rows.CSV_NAME).read_text()
    rows.rebuild_csv(tmp_path)  # a build from the files alone, as another process would make it
    assert (tmp_path / rows.CSV_NAME).read_text() == live
    assert [r["status"] for r in read_csv(tmp_path / rows.CSV_NAME)] == ["ok", "ok", "error", "ok", "ok"]
