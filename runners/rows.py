"""Rows on disk: one JSON file per job, an index by point id, and results.csv built from them.

Why this shape: a job killed at any moment (SIGKILL, OOM killer, a SLURM timeout) must
never leave a partial row, and jobs finishing at once (joblib, submitit, a SLURM array on a
network file system) must never corrupt results.csv nor wait for each other. So:

- every file is written to a temporary name in the same folder and moved into place with
  os.replace (atomic on POSIX): readers see the old file or the new one, never a mix;
- the row files are the truth; `.points/<point_id>` names the best row of each point, so a
  job's resume check and its bookkeeping touch a few small files whatever the sweep's size;
- results.csv is a view built from the row files, whole, under a lock: at the end of a
  sweep, by the report when it is stale, by `python -m runners.rows DIR`, and after each job
  only while the sweep is small (LIVE_MAX_ROWS), where rebuilding it stays cheap.

Stdlib only (plus the schema's column list): the report builds results.csv without torch.
"""

from __future__ import annotations

import argparse
import csv
import errno
import fcntl
import io
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence
from urllib.parse import quote

from selfattn.results import COLUMNS

CSV_NAME = "results.csv"
LOCK_NAME = ".results.lock"
INDEX_NAME = ".points"  # point_id -> its best row file, one small file per point
STAMP_NAME = ".results.json"  # what the last build of results.csv saw: row count, index state
SWEEP_META = "sweep.json"
# Below this many row files, each job rebuilds results.csv right after its row (a few ms
# here), so a small sweep's CSV is current while it runs; beyond it, rebuilding after every
# job would make a sweep's bookkeeping grow with the square of its size.
LIVE_MAX_ROWS = 50
READ_THREADS = 8  # reading a whole sweep: enough requests in flight to hide a disk's or a server's latency
_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read the process umask (os.umask can only read it by setting it)


# --- files -------------------------------------------------------------------------------


def atomic_write_text(path: Path, text: str, durable: bool = True) -> None:
    """Write `text` to `path` so readers see the old file or the new one, never a mix.

    durable=False skips the fsync (5 ms or more on a shared disk): for files rebuilt from
    the rows anyway, whose loss in a machine crash costs one rebuild. A killed process
    loses nothing either way (its written pages are the kernel's).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp creates the file 0600; a sweep folder shared on a cluster must stay readable
        # by colleagues, so give it the permissions a plain open() would (0666 less the umask).
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _load(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            row = json.loads(f.read())
        return row if isinstance(row, dict) else None
    except (OSError, ValueError):
        return None  # missing, or not a row: never produced by write_row, so skip it


def write_row(job_dir: Path, row: Mapping[str, Any]) -> Path:
    """Write one row into its job folder as row.json (atomically) and return the path.

    If row.json already holds another point (a resumed sweep whose grid changed, so job
    numbers map to other points), that row is kept and this one goes to row-<point_id>.json.
    """
    path = row_path(job_dir, row)
    atomic_write_text(path, json.dumps(dict(row), default=str, indent=1))
    return path


def row_path(job_dir: Path, row: Mapping[str, Any]) -> Path:
    """Where write_row puts `row` (creating the job folder): row.json, or row-<point_id>.json
    when row.json already holds another point."""
    job_dir = Path(job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    path = job_dir / "row.json"
    existing = _load(path)
    if existing is not None and existing.get("point_id") != row.get("point_id"):
        path = job_dir / f"row-{row.get('point_id')}.json"
    return path


def _is_row_file(name: str) -> bool:
    return name.startswith("row") and name.endswith(".json")


def row_paths(sweep_dir: Path) -> list[Path]:
    """Every row file of a sweep folder (or a single run's folder), jobs in launch order.

    Rows sit in the folder itself (a single run) or one level down (a sweep's job folders);
    hidden folders (the index, .submitit, .hydra) never hold rows and are not entered.
    """
    sweep_dir = Path(sweep_dir)
    found: list[tuple[tuple, Path]] = []
    if not sweep_dir.is_dir():
        return []
    with os.scandir(sweep_dir) as top:
        for entry in top:
            if entry.name.startswith("."):
                continue
            if _is_row_file(entry.name) and entry.is_file():
                found.append(((-1, "", entry.name), Path(entry.path)))
            elif entry.is_dir(follow_symlinks=False):
                job = entry.name
                order = (int(job) if job.isdigit() else -1, job)  # job 2 before job 10
                try:
                    with os.scandir(entry.path) as inner:
                        found.extend(((*order, e.name), Path(e.path)) for e in inner if _is_row_file(e.name))
                except OSError:
                    continue  # removed while we looked: nothing to read there
    found.sort(key=lambda item: item[0])
    return [path for _, path in found]


def _read_bytes(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def load_rows(paths: Sequence[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """(file, row) of these files, in order; unreadable or partial files are skipped.

    The files are read by a few threads (the reads wait on the disk or the network file
    system, not on Python: 100,000 small files not in the page cache take minutes one by
    one) and parsed here, one after another (parsing holds the interpreter lock anyway).
    """
    if len(paths) < 256:
        blobs: Iterable[bytes | None] = map(_read_bytes, paths)
    else:
        pool = ThreadPoolExecutor(max_workers=READ_THREADS)
        blobs = pool.map(_read_bytes, paths)
    found = []
    try:
        for path, blob in zip(paths, blobs):
            try:
                row = json.loads(blob) if blob is not None else None
            except ValueError:
                continue
            if isinstance(row, dict):
                found.append((path, row))
    finally:
        if len(paths) >= 256:
            pool.shutdown()
    return found


def read_rows(sweep_dir: Path) -> list[dict[str, Any]]:
    """Every row under a sweep folder (or a single run's folder), in a stable order."""
    return [row for _, row in load_rows(row_paths(sweep_dir))]


def best_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per point_id: an ok row if there is one, else the newest; first-seen order."""
    best: dict[str, dict[str, Any]] = {}
    for row in rows:
        key = str(row.get("point_id") or id(row))
        old = best.get(key)
        if old is None or _rank(row) > _rank(old):
            best[key] = row
    return list(best.values())


def _rank(row: Mapping[str, Any]) -> tuple[bool, str]:
    return (row.get("status") == "ok", str(row.get("timestamp") or ""))


def done_points(sweep_dir: Path) -> dict[str, str]:
    """point_id -> status of the best row in the sweep folder; reads every row (a job uses point_status)."""
    return {str(r.get("point_id")): str(r.get("status")) for r in best_rows(read_rows(sweep_dir))}


# --- the lock ------------------------------------------------------------------------------


@contextmanager
def locked(sweep_dir: Path, wait: bool = True) -> Iterator[bool]:
    """An exclusive lock on the sweep folder, one build at a time across processes.

    Yields whether it is held: with wait=False a busy lock yields False at once. A file
    system without locks (some cluster mounts) yields True unlocked: every file is still
    replaced whole, only two builds at once could finish in either order.
    """
    with open(Path(sweep_dir) / LOCK_NAME, "a") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
            yield True
            return
        try:
            yield True
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


# --- the index: point_id -> its best row file ------------------------------------------------


def _entry_name(point_id: str) -> str:
    """A file name for a point id (ids are hex hashes; anything else is quoted)."""
    name = quote(point_id, safe="-_.")
    return name if name.strip(".") else f"%{name}"


def _mtime_ns(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _relative(sweep_dir: Path, path: Path) -> str:
    try:
        return str(Path(path).relative_to(sweep_dir))
    except ValueError:
        return str(Path(path).resolve())  # a job folder outside the sweep folder: keep it whole


def ensure_index(sweep_dir: Path) -> Path:
    """The sweep's point index, made on first use from the row files already there.

    Costs a stat when it exists. A folder from before the index (or any folder with rows but
    no index) is read once, under the lock, and gets results.csv built from the same read.
    The index appears whole (built aside, then renamed), so a job never sees half of it.
    """
    sweep_dir = Path(sweep_dir)
    index = sweep_dir / INDEX_NAME
    if index.is_dir():
        return index
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with locked(sweep_dir):
        if index.is_dir():
            return index
        tmp = Path(tempfile.mkdtemp(dir=sweep_dir, prefix=f"{INDEX_NAME}.", suffix=".tmp"))
        try:
            os.chmod(tmp, 0o777 & ~_UMASK)
            paths = row_paths(sweep_dir)
            loaded = load_rows(paths)
            by_id = {id(row): path for path, row in loaded}
            for row in best_rows([row for _, row in loaded]):
                if row.get("point_id"):
                    # Plain writes, no fsync per file: nobody reads the folder before the rename, and
                    # an entry lost to a crash only means its point is measured once more.
                    with open(tmp / _entry_name(str(row["point_id"])), "w") as f:
                        f.write(_entry_text(_relative(sweep_dir, by_id[id(row)]), row))
            os.rename(tmp, index)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if loaded:
            _write_csv(sweep_dir, [row for _, row in loaded], len(loaded), _mtime_ns(index))
    return index


def _entry_text(row_file: str, row: Mapping[str, Any]) -> str:
    # The row file is what counts (lookups read it back); status and time are there for a person.
    return json.dumps({"row": row_file, "status": row.get("status"), "timestamp": row.get("timestamp")})


def _write_entry(index: Path, point_id: str, row_file: str, row: Mapping[str, Any]) -> None:
    atomic_write_text(index / _entry_name(point_id), _entry_text(row_file, row))


def _indexed_row(sweep_dir: Path, point_id: str) -> tuple[Path, dict[str, Any]] | None:
    """The row file the index names for this point and its row, if it is still there and still this point."""
    index = Path(sweep_dir) / INDEX_NAME
    if not index.is_dir():
        if not row_paths(sweep_dir):
            return None  # nothing recorded yet (a fresh folder; a single run's own folder)
        index = ensure_index(sweep_dir)
    entry = _load(index / _entry_name(point_id))
    if entry is None or not isinstance(entry.get("row"), str):
        return None
    path = Path(sweep_dir) / entry["row"]  # an absolute path stays absolute
    row = _load(path)
    if row is None or str(row.get("point_id")) != point_id:
        return None  # the row was deleted (to measure the point again) or replaced
    return path, row


def point_status(sweep_dir: Path, point_id: str, job_dir: Path | None = None) -> str | None:
    """The status of this point's best row in the sweep folder, or None: a lookup by id, not a scan.

    `job_dir`: the job's own folder, looked in when the index names no row for the point (a job
    killed after its row file but before its index entry); the index entry is then written.
    """
    sweep_dir, point_id = Path(sweep_dir), str(point_id)
    found = _indexed_row(sweep_dir, point_id)
    if found is None and job_dir is not None:
        for path in (Path(job_dir) / "row.json", Path(job_dir) / f"row-{point_id}.json"):
            row = _load(path)
            if row is not None and str(row.get("point_id")) == point_id:
                _write_entry(ensure_index(sweep_dir), point_id, _relative(sweep_dir, path), row)
                return str(row.get("status"))
    return None if found is None else str(found[1].get("status"))


def record_row(sweep_dir: Path, job_dir: Path, row: Mapping[str, Any]) -> Path:
    """Everything a finished job writes: its row file, its index entry, results.csv while cheap.

    The row file comes first: a build that sees the new index entry (results.csv's staleness is
    read from the index) then finds the row too. A job killed between the two leaves a row the
    index does not name yet; the resume check also looks in the job's own folder
    (`point_status(..., job_dir)`), so the rerun does not measure it again. A single run (its
    job folder is the sweep folder) writes its one-row results.csv right away.
    """
    sweep_dir, job_dir = Path(sweep_dir), Path(job_dir)
    path = write_row(job_dir, row)
    if job_dir.resolve() == sweep_dir.resolve():
        rebuild_csv(sweep_dir)
        return path
    point_id = str(row.get("point_id") or "")
    if point_id:
        index = ensure_index(sweep_dir)
        old = _indexed_row(sweep_dir, point_id)
        # The one duplicate rule decides which row the index names: a failed retry keeps the ok row.
        if old is None or old[0] == path or best_rows([old[1], dict(row)])[0] is not old[1]:
            _write_entry(index, point_id, _relative(sweep_dir, path), row)
    if _live(sweep_dir):
        rebuild_csv(sweep_dir, wait=False)  # another job is building it: that build or the last one has our row
    return path


def _live(sweep_dir: Path) -> bool:
    """Whether results.csv is rebuilt after each job: while the last build saw few rows."""
    stamp = _load(Path(sweep_dir) / STAMP_NAME) or {}
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


def _write_csv(sweep_dir: Path, all_rows: list[dict[str, Any]], files: int, index_mtime: int | None,
               durable: bool = True) -> list[dict[str, Any]]:
    """Write results.csv from rows already read (the caller holds the lock), then its stamp."""
    kept = best_rows(all_rows)
    extra = sorted({k for row in kept for k in row} - set(COLUMNS))
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=[*COLUMNS, *extra], restval="")
    writer.writeheader()
    writer.writerows({k: _cell(v) for k, v in row.items()} for row in kept)
    atomic_write_text(Path(sweep_dir) / CSV_NAME, buffer.getvalue(), durable=durable)
    # The index's mtime as seen before the rows were read: any row recorded since changes it,
    # which is how csv_is_stale knows without reading a row.
    stamp = {"rows": files, "points": len(kept), "index_mtime_ns": index_mtime, "built_unix": time.time()}
    atomic_write_text(Path(sweep_dir) / STAMP_NAME, json.dumps(stamp), durable=False)
    return kept


def rebuild_csv(sweep_dir: Path, wait: bool = True) -> tuple[Path, list[dict[str, Any]]] | None:
    """Build <sweep_dir>/results.csv from the row files, under the lock; returns (path, rows).

    Columns: the Row schema in order, then any extra fields rows carry, sorted. With
    wait=False (a job keeping a small sweep's CSV current), returns None at once when another
    process is building it, and skips the fsync: the next build replaces this one anyway.
    """
    sweep_dir = Path(sweep_dir)
    with locked(sweep_dir, wait=wait) as held:
        if not held:
            return None
        index_mtime = _mtime_ns(sweep_dir / INDEX_NAME)  # before reading: a row recorded meanwhile makes it stale
        all_rows = read_rows(sweep_dir)
        kept = _write_csv(sweep_dir, all_rows, len(all_rows), index_mtime, durable=wait)
    return sweep_dir / CSV_NAME, kept


def csv_is_stale(sweep_dir: Path) -> bool:
    """Whether results.csv is missing or older than the rows recorded in the index (a few stats)."""
    sweep_dir = Path(sweep_dir)
    index = sweep_dir / INDEX_NAME
    if not (sweep_dir / CSV_NAME).is_file():
        if index.is_dir():
            with os.scandir(index) as entries:
                return any(True for _ in entries)
        return bool(row_paths(sweep_dir))
    stamp = _load(sweep_dir / STAMP_NAME)
    if stamp is None:
        return bool(row_paths(sweep_dir))  # built by hand or by an older harness: build it once
    return stamp.get("index_mtime_ns") != _mtime_ns(index)


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
    args = parser.parse_args(argv)
    folders = list(dict.fromkeys(f for d in args.dirs for f in sweep_folders(Path(d))))
    if not folders:
        print(f"error: DIR: no sweep folder (with {SWEEP_META} or {INDEX_NAME}/) in {' '.join(args.dirs)}", file=sys.stderr)
        return 2
    if args.if_stale:
        for line in build_stale(folders):
            print(line)
        return 0
    for folder in folders:
        start = time.perf_counter()
        path, kept = rebuild_csv(folder)  # type: ignore[misc]  (wait=True always builds)
        print(f"results: {len(kept)} rows -> {path} ({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
