"""Rows on disk: one JSON file per job, and results.csv rebuilt from all of them.

Why this shape: a job killed at any moment (SIGKILL, OOM killer, a SLURM timeout) must
never leave a partial row, and two jobs finishing at once (joblib, submitit) must never
corrupt results.csv. So every file is written to a temporary name in the same folder and
moved into place with os.replace (atomic on POSIX), and results.csv is only ever rebuilt
from the row files, whole, under an fcntl lock. The row files are the truth; the CSV is a
view that any run (or `rebuild_csv`) can regenerate.
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

from selfattn.results import COLUMNS, rank

ROW_GLOBS = ("row*.json", "*/row*.json")  # a single run's folder, or a sweep's job folders
CSV_NAME = "results.csv"
_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read the process umask (os.umask can only read it by setting it)
LOCK_NAME = ".results.lock"


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` so readers see the old file or the new one, never a mix."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp creates the file 0600; a sweep folder shared on a cluster must stay readable
        # by colleagues, so give it the permissions a plain open() would (0666 less the umask).
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_row(job_dir: Path, row: Mapping[str, Any]) -> Path:
    """Write one row into its job folder as row.json (atomically) and return the path.

    If row.json already holds another point (a resumed sweep whose grid changed, so job
    numbers map to other points), that row is kept and this one goes to row-<point_id>.json.
    """
    job_dir = Path(job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    path = job_dir / "row.json"
    existing = _load(path)
    if existing is not None and existing.get("point_id") != row.get("point_id"):
        path = job_dir / f"row-{row.get('point_id')}.json"
    atomic_write_text(path, json.dumps(dict(row), default=str, indent=1))
    return path


def _job_order(path: Path) -> tuple:
    """Job folders in launch order (2 before 10), then the file name."""
    folder = path.parent.name
    return (int(folder) if folder.isdigit() else -1, folder, path.name)


def _load(path: Path) -> dict[str, Any] | None:
    try:
        with open(path) as f:
            row = json.load(f)
        return row if isinstance(row, dict) else None
    except (OSError, ValueError):
        return None  # missing, or not a row: never produced by write_row, so skip it


# Parsed row files by path, valid while (inode, mtime, size) match (os.replace makes a new inode): a long sweep rebuilds its CSV after
# every job, and parsing only the new files keeps that cost flat as the sweep grows.
_parsed: dict[Path, tuple[tuple[int, int, int], dict[str, Any]]] = {}


def _load_cached(path: Path) -> dict[str, Any] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
    hit = _parsed.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    row = _load(path)
    if row is not None:
        _parsed[path] = (stamp, row)
    return row


def read_rows(sweep_dir: Path) -> list[dict[str, Any]]:
    """Every row file under a sweep folder (or a single run's folder), in a stable order."""
    sweep_dir = Path(sweep_dir)
    paths = sorted({p for pattern in ROW_GLOBS for p in sweep_dir.glob(pattern)}, key=_job_order)
    return [dict(row) for row in map(_load_cached, paths) if row is not None]


def best_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per point_id, chosen by `selfattn.results.rank` (ok first, then newest); first-seen order."""
    best: dict[str, dict[str, Any]] = {}
    for row in rows:
        key = str(row.get("point_id") or id(row))
        old = best.get(key)
        if old is None or rank(row) > rank(old):
            best[key] = row
    return list(best.values())




def done_points(sweep_dir: Path) -> dict[str, str]:
    """point_id -> status of the best row already in the sweep folder (for resume)."""
    return {str(r.get("point_id")): str(r.get("status")) for r in best_rows(read_rows(sweep_dir))}


@contextmanager
def locked(sweep_dir: Path) -> Iterator[None]:
    """An exclusive lock on the sweep folder, held by one rebuild at a time across processes."""
    with open(Path(sweep_dir) / LOCK_NAME, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return value


def rebuild_csv(sweep_dir: Path) -> tuple[Path, list[dict[str, Any]]]:
    """Rebuild <sweep_dir>/results.csv from the row files, under the lock; returns (path, rows).

    Columns: the Row schema in order, then any extra fields rows carry, sorted.
    """
    sweep_dir = Path(sweep_dir)
    path = sweep_dir / CSV_NAME
    with locked(sweep_dir):
        rows = best_rows(read_rows(sweep_dir))
        extra = sorted({k for row in rows for k in row} - set(COLUMNS))
        columns = [*COLUMNS, *extra]
        buffer = io.StringIO(newline="")
        writer = csv.DictWriter(buffer, fieldnames=columns, restval="")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(v) for k, v in row.items()})
        atomic_write_text(path, buffer.getvalue())
    return path, rows
