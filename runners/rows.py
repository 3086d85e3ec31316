"""results.csv: the CSV view of a sweep's row store, built whole from the row files.

The row files and the point index (runners/row_store.py) are the truth; results.csv is built
from them, whole, under the folder's lock: at the end of a sweep (the sweep callback), by
`python -m runners.rows DIR` (a sweep still running or killed), and after each job only while
the sweep is small (LIVE_MAX_ROWS), where rebuilding it stays cheap. A stamp beside it records
what the last build saw, so `csv_is_stale` knows without reading a row.

Stdlib only (plus the schema's column list): no torch. `--table` loads pandas (runners/table.py), only when asked.
"""

from __future__ import annotations

import argparse
import csv
import errno
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Sequence, overload

from runners import row_store
from runners.row_store import INDEX_NAME, best_rows
from selfattn.results import COLUMNS

CSV_NAME = "results.csv"
STAMP_NAME = ".results.json"  # what the last build of results.csv saw: row count, index state
SWEEP_META = "sweep.json"
# Below this many row files, each job rebuilds results.csv right after its row (a few ms
# here), so a small sweep's CSV is current while it runs; beyond it, rebuilding after every
# job would make a sweep's bookkeeping grow with the square of its size.
LIVE_MAX_ROWS = 50


def ensure_index(sweep_dir: Path) -> Path:
    """The sweep's point index (row_store.ensure_index); a folder with rows but no index gets
    results.csv built from the same read of its rows."""
    sweep_dir = Path(sweep_dir)
    return row_store.ensure_index(
        sweep_dir, built=lambda rows: _write_csv(sweep_dir, rows, len(rows), row_store.index_mtime_ns(sweep_dir)))


def record_row(sweep_dir: Path, job_dir: Path, row: Mapping[str, Any]) -> Path:
    """Everything a finished job writes: its row file, its index entry, results.csv while cheap.

    The row file comes first: a build that sees the new index entry (results.csv's staleness is
    read from the index) then finds the row too. A job killed between the two leaves a row the
    index does not name yet; the resume check also looks in the job's own folder
    (`row_store.point_status(..., job_dir)`), so the rerun does not measure it again. A single run (its
    job folder is the sweep folder) writes its one-row results.csv right away.
    """
    sweep_dir, job_dir = Path(sweep_dir), Path(job_dir)
    path = row_store.write_row(job_dir, row)
    if job_dir.resolve() == sweep_dir.resolve():
        rebuild_csv(sweep_dir)
        return path
    row_store.index_row(sweep_dir, path, row)
    if _live(sweep_dir):
        try:
            rebuild_csv(sweep_dir, wait=False)  # another job is building it: that build or the last one has our row
        except OSError:
            pass  # the row and its index entry are recorded; the sweep's end (or `python -m runners.rows`) builds the CSV
    return path


def _live(sweep_dir: Path) -> bool:
    """Whether results.csv is rebuilt after each job: while the last build saw few rows."""
    stamp = row_store.load_json(Path(sweep_dir) / STAMP_NAME) or {}
    return int(stamp.get("rows") or 0) < LIVE_MAX_ROWS


# --- results.csv -----------------------------------------------------------------------------


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return value


def _csv_line(row: dict[str, Any], fieldnames: tuple[str, ...]) -> str:
    """One row's line of results.csv, formatted once per (row, columns) and kept (_LINES)."""
    key = (id(row), fieldnames)
    cached = _LINES.get(key)
    if cached is not None and cached[0] is row:
        return cached[1]
    buffer = io.StringIO(newline="")
    csv.DictWriter(buffer, fieldnames=fieldnames, restval="").writerow({k: _cell(v) for k, v in row.items()})
    _LINES[key] = (row, buffer.getvalue())
    return buffer.getvalue()


# Lines of the rows a rebuild of this process formatted, by the row object (kept alive here, so its id is
# not reused) and the columns. A small sweep rebuilds results.csv after every job (LIVE_MAX_ROWS) from
# rows that row_store.load_rows keeps parsed while their files are unchanged: only the new row is
# formatted again (150 columns x 20 rows took 6 ms a job). Bounded: cleared past LINES_MAX entries.
_LINES: dict[tuple[int, tuple[str, ...]], tuple[dict[str, Any], str]] = {}
LINES_MAX = 4 * LIVE_MAX_ROWS


def _write_csv(sweep_dir: Path, all_rows: list[dict[str, Any]], files: int, index_mtime: int | None,
               durable: bool = True) -> list[dict[str, Any]]:
    """Write results.csv from rows already read (the caller holds the lock), then its stamp."""
    kept = best_rows(all_rows)
    extra = sorted({k for row in kept for k in row} - set(COLUMNS))
    fieldnames = (*COLUMNS, *extra)
    buffer = io.StringIO(newline="")
    csv.DictWriter(buffer, fieldnames=fieldnames, restval="").writeheader()
    if len(_LINES) > LINES_MAX:
        _LINES.clear()
    buffer.write("".join(_csv_line(row, fieldnames) for row in kept))
    row_store.atomic_write_text(Path(sweep_dir) / CSV_NAME, buffer.getvalue(), durable=durable)
    # The index's mtime as seen before the rows were read: any row recorded since changes it,
    # which is how csv_is_stale knows without reading a row.
    stamp = {"rows": files, "points": len(kept), "index_mtime_ns": index_mtime, "built_unix": time.time()}
    row_store.atomic_write_text(Path(sweep_dir) / STAMP_NAME, json.dumps(stamp), durable=False)
    return kept


@overload
def rebuild_csv(sweep_dir: Path, wait: Literal[True] = True) -> tuple[Path, list[dict[str, Any]]]: ...
@overload
def rebuild_csv(sweep_dir: Path, wait: bool) -> tuple[Path, list[dict[str, Any]]] | None: ...
def rebuild_csv(sweep_dir: Path, wait: bool = True) -> tuple[Path, list[dict[str, Any]]] | None:
    """Build <sweep_dir>/results.csv from the row files, under the lock; returns (path, rows).

    Columns: the Row schema in order, then any extra fields rows carry, sorted. With
    wait=False (a job keeping a small sweep's CSV current), returns None at once when another
    process is building it, and skips the fsync: the next build replaces this one anyway.
    """
    sweep_dir = Path(sweep_dir)
    with row_store.locked(sweep_dir, wait=wait) as held:
        if not held:
            return None
        index_mtime = row_store.index_mtime_ns(sweep_dir)  # before reading: a row recorded meanwhile makes it stale
        all_rows = row_store.read_rows(sweep_dir, cached=not wait)  # a live rebuild: most rows parsed before
        kept = _write_csv(sweep_dir, all_rows, len(all_rows), index_mtime, durable=wait)
    return sweep_dir / CSV_NAME, kept


# Room set aside at a sweep's start for its last results.csv: a disk that fills while the sweep runs loses the
# rows it cannot write (their jobs say so, the sweep's end counts them), but results.csv is still rebuilt from
# the rows that were written, in this room. About what a row's line takes (1-3 KiB with its columns), per job.
RESERVE_NAME = ".results.reserve"
RESERVE_PER_JOB_BYTES = 3 * 1024
RESERVE_MIN_BYTES, RESERVE_MAX_BYTES = 256 * 1024, 64 * 2**20


def reserve_room(sweep_dir: Path, jobs: int | None) -> None:
    """Set aside room for the sweep's last results.csv (RESERVE_NAME); OSError when there is none (a full disk
    at the start: the caller refuses the sweep)."""
    size = min(RESERVE_MAX_BYTES, max(RESERVE_MIN_BYTES, (jobs or 0) * RESERVE_PER_JOB_BYTES))
    path = Path(sweep_dir) / RESERVE_NAME
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)  # never a link's target
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
            os.pwrite(fd, bytes(size), 0)  # a file system without fallocate: the blocks written instead
            os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    os.close(fd)


def release_room(sweep_dir: Path) -> bool:
    """Give the room set aside back to the file system; whether there was any."""
    try:
        (Path(sweep_dir) / RESERVE_NAME).unlink()
        return True
    except OSError:
        return False


def rebuild_final(sweep_dir: Path) -> tuple[Path, list[dict[str, Any]]]:
    """results.csv at a sweep's end (or interruption): built from the rows; on a full disk, again in the room
    set aside at the start. The room is given back either way; OSError when even that does not fit."""
    try:
        return rebuild_csv(sweep_dir)  # waits: always builds
    except OSError:
        if not release_room(sweep_dir):
            raise
        return rebuild_csv(sweep_dir)
    finally:
        release_room(sweep_dir)


def csv_is_stale(sweep_dir: Path) -> bool:
    """Whether results.csv is missing or older than the rows recorded in the index (a few stats)."""
    sweep_dir = Path(sweep_dir)
    index = sweep_dir / INDEX_NAME
    if not (sweep_dir / CSV_NAME).is_file():
        if index.is_dir():
            with os.scandir(index) as entries:
                return any(True for _ in entries)
        return bool(row_store.row_paths(sweep_dir))
    stamp = row_store.load_json(sweep_dir / STAMP_NAME)
    if stamp is None:
        return bool(row_store.row_paths(sweep_dir))  # built by hand or by an older harness: build it once
    return stamp.get("index_mtime_ns") != row_store.index_mtime_ns(sweep_dir)


def sweep_folders(path: Path) -> list[Path]:
    """The sweep folders at or below `path` (a results.csv stands for its folder)."""
    path = Path(path)
    if path.is_file():
        path = path.parent
    if not path.is_dir():
        return []
    if (path / INDEX_NAME).is_dir() or (path / SWEEP_META).is_file():
        return [path]
    return sorted({p.parent for p in path.rglob(SWEEP_META)} | {p.parent for p in path.rglob(INDEX_NAME) if p.is_dir()})


def build_stale(paths: Iterable[str | Path]) -> list[str]:
    """Build results.csv in every sweep folder under `paths` whose CSV is missing or stale; one line each."""
    lines = []
    for folder in dict.fromkeys(f for p in paths for f in sweep_folders(Path(p))):
        if not csv_is_stale(folder):
            continue
        start = time.perf_counter()
        try:
            built = rebuild_csv(folder)
        except OSError as exc:
            lines.append(f"results: could not build {folder / CSV_NAME} ({exc.strerror or exc}); using what is there")
            continue
        if built is not None:
            lines.append(f"results: built {built[0]} from its row files ({len(built[1])} rows, {time.perf_counter() - start:.1f} s)")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m runners.rows",
        description="Build results.csv of sweep folders from their row files (a running or killed sweep included).")
    parser.add_argument("dirs", nargs="+", metavar="DIR", help="sweep folders (or folders holding them)")
    parser.add_argument("--if-stale", action="store_true", help="only where results.csv is missing or behind the rows")
    parser.add_argument("--table", action="store_true",
                        help="then print each sweep's summary table (what a finished sweep prints)")
    parser.add_argument("--baseline", metavar="NAME", default=None,
                        help="with --table: the back end each cell's speed-up is over (its time / the cell's; "
                             "default: sdpa when it ran; none: no speed-ups)")
    parser.add_argument("--repro", metavar="POINT_ID",
                        help="print the one `python -m runners.sweep ...` command (at the row's commit) that measures "
                             "that point again (a unique prefix of its point_id will do), and nothing else")
    args = parser.parse_args(argv)
    folders = list(dict.fromkeys(f for d in args.dirs for f in sweep_folders(Path(d))))
    if not folders:
        print(f"error: DIR: no sweep folder (with {SWEEP_META} or {INDEX_NAME}/) in {' '.join(args.dirs)}", file=sys.stderr)
        return 2
    if args.baseline is not None and not args.table:
        parser.error("--baseline: only with --table (it picks the table's reference back end)")
    if args.repro is not None:
        return _print_repro(folders, args.repro)
    if args.if_stale:
        for line in build_stale(folders):
            print(line)
    else:
        for folder in folders:
            start = time.perf_counter()
            path, kept = rebuild_csv(folder)  # waits: always builds
            print(f"results: {len(kept)} rows -> {path} ({time.perf_counter() - start:.1f} s)")
    for bad, why in row_store.take_corrupt():  # a row file cut short or invalid: left out, and the rerun measures its point
        print(f"warning: {bad} {why}; left out of results.csv", file=sys.stderr)
    if args.table:
        from runners.table import table_text  # pandas, through the analysis package: only when asked

        status = 0
        for folder in folders:
            try:
                table = table_text(folder / CSV_NAME, baseline=args.baseline) if (folder / CSV_NAME).is_file() else None
            except ValueError as exc:  # --baseline names no back end of this sweep: the others still print
                print(f"error: --{exc} ({folder})", file=sys.stderr)
                status = 2
                continue
            print(f"\n{folder}:\n{table or 'no usable row to tabulate'}")
        return status
    return 0


def _print_repro(folders: Sequence[Path], wanted: str) -> int:
    """`--repro`: the reproduction command of the row whose point_id is (or starts with) `wanted`."""
    from analysis.repro import repro_command  # pure Python: the point's fields, no pandas

    rows = [row for folder in folders for row in best_rows(row_store.read_rows(folder))]
    found = {str(row.get("point_id")): row for row in rows if str(row.get("point_id") or "").startswith(wanted.strip())}
    if len(found) != 1:
        what = "no row has" if not found else f"{len(found)} points have"
        print(f"error: --repro: {what} a point_id starting with {wanted!r} in {' '.join(map(str, folders))}"
              + (f" ({', '.join(sorted(found)[:5])})" if found else ""), file=sys.stderr)
        return 2
    row = next(iter(found.values()))
    print(repro_command(row, _option_defaults(row)))
    return 0


def _option_defaults(row: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The row's back end's option defaults (so the command names only options set off them); None when the back
    end does not load here (a plugin not installed): the command then names every option the row recorded."""
    try:
        from selfattn.backends import get_backend
        from selfattn.fields import defaults

        return defaults(get_backend(str(row.get("backend_path") or row.get("backend"))).options_type)
    except Exception:  # any failure to load a plugin: fall back to every option
        return None


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # each results.csv is replaced whole (row_store), so nothing is left half-written
        print("interrupted: every results.csv written so far is complete; rerun to rebuild the rest", file=sys.stderr)
        sys.exit(130)
