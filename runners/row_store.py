"""The row store: one JSON file per job, written atomically, and an index by point id.

Why this shape: a job killed at any moment (SIGKILL, OOM killer, a SLURM timeout) must
never leave a partial row, and jobs finishing at once (joblib, submitit, a SLURM array on a
network file system) must never corrupt a file nor wait for each other. So:

- every file is written to a temporary name in the same folder and moved into place with
  os.replace (atomic on POSIX): readers see the old file or the new one, never a mix;
- the row files are the truth; `.points/<point_id>` names the best row of each point (the one
  rule of `selfattn.results.rank`), so a job's resume check and its bookkeeping touch a few
  small files whatever the sweep's size;
- builds that read every row (results.csv, runners/rows.py) take an exclusive lock on the folder.

Stdlib only: the CSV view and `python -m runners.rows` run without torch.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence
from urllib.parse import quote

from selfattn.results import rank
from selfattn.row_check import row_problem

LOCK_NAME = ".results.lock"
INDEX_NAME = ".points"  # point_id -> its best row file, one small file per point
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
    tmp = _written_aside(path, text, durable)
    try:
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _naming(exc, path) from exc
        raise


def _written_aside(path: Path, text: str, durable: bool) -> str:
    """`text` in a temporary file beside `path` (same folder, so a rename moves it into place); its name."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:  # a read-only or full folder: name the file we meant, not a temporary name
        raise _naming(exc, path) from exc
    try:
        # mkstemp creates the file 0600; a sweep folder shared on a cluster must stay readable
        # by colleagues, so give it the permissions a plain open() would (0666 less the umask).
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
            f.flush()
            if durable:
                os.fsync(f.fileno())
    except BaseException as exc:
        # A full disk (ENOSPC at write, flush or fsync) or a lost permission: no partial file stays
        # behind, and the file already there (an earlier row, results.csv) is untouched.
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _naming(exc, path) from exc
        raise
    return tmp


def _naming(exc: OSError, path: Path) -> OSError:
    """The same error (same errno, same subclass: PermissionError, ...) naming `path`."""
    return OSError(exc.errno, exc.strerror or str(exc), str(path)) if exc.errno else exc


def write_failure(exc: OSError) -> str:
    """One line on a write that failed: `could not write PATH: No space left on device (ENOSPC)`."""
    code = errno.errorcode.get(exc.errno or 0)
    what = exc.strerror or str(exc)
    if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a link: say what it means here
        what = "it is a symbolic link, which the harness never writes through in a sweep folder"
    return f"could not write {exc.filename or '?'}: {what}{f' ({code})' if code else ''}"


def load_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in `path` (never through a symbolic link), or None."""
    blob = _read_bytes(path)
    try:
        row = json.loads(blob) if blob is not None else None
    except ValueError:
        return None  # not a row: never produced by write_row, so skip it
    return row if isinstance(row, dict) else None


def refuse_link(path: Path) -> None:
    """OSError (ELOOP) when `path` is a symbolic link: nothing in a sweep folder is written through one, so a
    link planted there (by whoever else may write into a shared folder) cannot send a write to another file."""
    if os.path.islink(path):
        raise OSError(errno.ELOOP, "a symbolic link, which the harness never writes through", str(path))


def real_folder(sweep_dir: Path, folder: Path) -> None:
    """OSError (ELOOP) when `folder` or a folder between `sweep_dir` and it is a symbolic link."""
    sweep_dir, folder = Path(sweep_dir), Path(folder)
    try:
        parts = folder.relative_to(sweep_dir).parts
    except ValueError:
        parts = ()
    for depth in range(1, len(parts) + 1):
        refuse_link(sweep_dir.joinpath(*parts[:depth]))


# Row files found that are not rows (cut short by a copy, edited by hand, planted: a status the schema does not
# know, an impossible value): write_row never leaves one, so each is said once, by the job that meets it
# (runners/job.py) or the sweep's end (runners/callbacks.py). path -> what is wrong with it.
CORRUPT: dict[Path, str] = {}
NOT_WHOLE = "holds no whole row"


def _open_nofollow(path: Path) -> int:
    """A read-only descriptor of `path`, which must not be a symbolic link (ELOOP otherwise)."""
    return os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))


def _read_bytes(path: Path) -> bytes | None:
    """The file's bytes; None when it is missing, unreadable or a symbolic link (never followed: whoever can
    write into a shared sweep folder could point a row's name at any file its owner may read)."""
    try:
        fd = _open_nofollow(path)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            return f.read()
    except OSError:
        return None


def _parsed_row(path: Path, blob: bytes | None) -> dict[str, Any] | None:
    """The row in `blob` (read from `path`) when it is one by the schema; else None, and CORRUPT says why."""
    if blob is None:
        return None
    try:
        row = json.loads(blob)
    except ValueError:
        row = None
    if not isinstance(row, dict):
        CORRUPT[Path(path)] = NOT_WHOLE
        return None
    problem = row_problem(row)
    if problem is not None:
        CORRUPT[Path(path)] = f"holds no valid row ({problem})"
        return None
    return row


def _load_row(path: Path) -> dict[str, Any] | None:
    """The row in `path`, or None; a file that exists but holds no valid row joins CORRUPT."""
    return _parsed_row(path, _read_bytes(path))


def take_corrupt() -> list[tuple[Path, str]]:
    """The row files found not to hold a valid row since the last call, with what is wrong (each said once)."""
    found = list(CORRUPT.items())
    CORRUPT.clear()
    return found


def write_row(job_dir: Path, row: Mapping[str, Any]) -> Path:
    """Write one row into its job folder as row.json (atomically) and return the path.

    If row.json already holds another point (a resumed sweep whose grid changed, so job
    numbers map to other points), that row is kept and this one goes to row-<point_id>.json.
    Never replaces another point's row, even when two processes write one job folder at once (two
    sweeps' job 0): row.json is created with a hard link, which fails when the name exists, where a
    check followed by a rename would let the later writer replace the earlier one's row.
    """
    job_dir = Path(job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    refuse_link(job_dir)  # a job folder planted as a link: its row would be written wherever it points
    path = job_dir / "row.json"
    tmp = _written_aside(path, json.dumps(dict(row), default=str, indent=1), durable=True)
    try:
        try:
            os.link(tmp, path)  # only if no row.json exists: then it is ours, whole
            return path
        except FileExistsError:
            pass
        except OSError as exc:
            if exc.errno not in _NO_LINKS:
                raise
        existing = load_json(path)
        if existing is not None and existing.get("point_id") != row.get("point_id"):
            path = job_dir / f"row-{row.get('point_id')}.json"  # a name no other point writes
        os.replace(tmp, path)  # this point's own earlier row (a retry), or a file that is no row
        return path
    except OSError as exc:
        raise _naming(exc, path) from exc
    finally:
        Path(tmp).unlink(missing_ok=True)  # a link leaves the temporary name behind; a rename leaves nothing


# A file system without hard links (some FUSE and cluster mounts): the check, then the rename
_NO_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK)


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
            if _is_row_file(entry.name) and entry.is_file(follow_symlinks=False):
                found.append(((-1, "", entry.name), Path(entry.path)))
            elif entry.is_dir(follow_symlinks=False):
                job = entry.name
                order = (int(job) if job.isdigit() else -1, job)  # job 2 before job 10
                try:
                    with os.scandir(entry.path) as inner:
                        found.extend(((*order, e.name), Path(e.path)) for e in inner
                                     if _is_row_file(e.name) and e.is_file(follow_symlinks=False))
                except OSError:
                    continue  # removed while we looked: nothing to read there
    found.sort(key=lambda item: item[0])
    return [path for _, path in found]


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
            row = _parsed_row(path, blob)  # read, but no valid row: said once (take_corrupt), left out
            if row is not None:
                found.append((path, row))
    finally:
        if len(paths) >= 256:
            pool.shutdown()
    return found


def read_rows(sweep_dir: Path, *, cached: bool = False) -> list[dict[str, Any]]:
    """Every row under a sweep folder (or a single run's folder), in a stable order.

    cached=True (a small sweep's results.csv rebuilt after each job): a file unchanged since this
    process last parsed it (the same inode, size and mtime: every write replaces the file whole) gives
    the same row object again, not to be modified; the rest are read as usual."""
    paths = row_paths(sweep_dir)
    if not cached:
        return [row for _, row in load_rows(paths)]
    stats: dict[Path, tuple[int, int, int]] = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue  # removed since row_paths listed it
        stats[path] = (st.st_ino, st.st_size, st.st_mtime_ns)
    if len(_PARSED) > PARSED_MAX:
        _PARSED.clear()
    changed = [path for path, stat in stats.items() if _PARSED.get(path, (None,))[0] != stat]
    for path, row in load_rows(changed):
        _PARSED[path] = (stats[path], row)
    # a file that did not parse (partial, not a row) has no fresh entry and is left out, as load_rows does
    return [_PARSED[path][1] for path, stat in stats.items() if path in _PARSED and _PARSED[path][0] == stat]


# Rows parsed by read_rows(cached=True), by file: (inode, size, mtime_ns), row. Bounded: a small
# sweep's live rebuilds are what it serves (runners/rows.py).
_PARSED: dict[Path, tuple[tuple[int, int, int], dict[str, Any]]] = {}
PARSED_MAX = 1000


def best_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per point_id: an ok row if there is one, else the newest; first-seen order."""
    best: dict[str, dict[str, Any]] = {}
    for row in rows:
        key = str(row.get("point_id") or id(row))
        old = best.get(key)
        if old is None or rank(row) > rank(old):
            best[key] = row
    return list(best.values())



# --- the lock ------------------------------------------------------------------------------


@contextmanager
def locked(sweep_dir: Path, wait: bool = True) -> Iterator[bool]:
    """An exclusive lock on the sweep folder, one build at a time across processes.

    Yields whether it is held: with wait=False a busy lock yields False at once. A file
    system without locks (some cluster mounts) yields True unlocked: every file is still
    replaced whole, only two builds at once could finish in either order.
    """
    # read-only, created if missing, never through a link (a link planted in its place is not opened: ELOOP)
    fd = os.open(Path(sweep_dir) / LOCK_NAME, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666 & ~_UMASK)
    with os.fdopen(fd, "rb") as f:
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


def index_mtime_ns(sweep_dir: Path) -> int | None:
    """When the index last changed (any row recorded changes it), or None without an index."""
    try:
        return (Path(sweep_dir) / INDEX_NAME).stat().st_mtime_ns
    except OSError:
        return None


def _relative(sweep_dir: Path, path: Path) -> str:
    try:
        return str(Path(path).relative_to(sweep_dir))
    except ValueError:
        return str(Path(path).resolve())  # a job folder outside the sweep folder: keep it whole


def ensure_index(sweep_dir: Path, built: Callable[[list[dict[str, Any]]], object] | None = None) -> Path:
    """The sweep's point index, made on first use from the row files already there.

    Costs a stat when it exists. A folder from before the index (or any folder with rows but
    no index) is read once, under the lock; `built(rows)` then runs on the rows of that same
    read, still under the lock (the CSV view builds results.csv from them: runners/rows.py).
    The index appears whole (built aside, then renamed), so a job never sees half of it.
    """
    sweep_dir = Path(sweep_dir)
    index = sweep_dir / INDEX_NAME
    refuse_link(index)  # a link in its place would receive every index entry
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
        if loaded and built is not None:
            built([row for _, row in loaded])
    return index


def _entry_text(row_file: str, row: Mapping[str, Any]) -> str:
    # The row file is what counts (lookups read it back); status and time are there for a person.
    return json.dumps({"row": row_file, "status": row.get("status"), "timestamp": row.get("timestamp")})


def _write_entry(index: Path, point_id: str, row_file: str, row: Mapping[str, Any]) -> None:
    # No fsync (2-3 ms a job here): the row file is the durable record, and after a machine crash an
    # entry lost with it is found again in the job's folder (point_status), or its point measured once more
    atomic_write_text(index / _entry_name(point_id), _entry_text(row_file, row), durable=False)


def _indexed_row(sweep_dir: Path, point_id: str) -> tuple[Path, dict[str, Any]] | None:
    """The row file the index names for this point and its row, if it is still there and still this point."""
    index = Path(sweep_dir) / INDEX_NAME
    if not index.is_dir():
        if not row_paths(sweep_dir):
            return None  # nothing recorded yet (a fresh folder; a single run's own folder)
        index = ensure_index(sweep_dir)
    entry = load_json(index / _entry_name(point_id))
    if entry is None or not isinstance(entry.get("row"), str):
        return None
    named = PurePosixPath(entry["row"])
    if named.is_absolute() or ".." in named.parts:  # an entry leading out of the sweep folder: not followed
        return None
    path = Path(sweep_dir) / named
    row = _load_row(path)
    if row is None or str(row.get("point_id")) != point_id:
        return None  # the row was deleted (to measure the point again) or replaced
    return path, row


def point_status(sweep_dir: Path, point_id: str, job_dir: Path | None = None) -> str | None:
    """The status of this point's best row in the sweep folder, or None: a lookup by id, not a scan.

    `job_dir`: the job's own folder, looked in when the index names no row for the point (a job
    killed after its row file but before its index entry); the index entry is then written.
    """
    row = point_row(sweep_dir, point_id, job_dir)
    return None if row is None else str(row.get("status"))


def point_row(sweep_dir: Path, point_id: str, job_dir: Path | None = None) -> dict[str, Any] | None:
    """This point's best row in the sweep folder (what `point_status` reads), or None."""
    sweep_dir, point_id = Path(sweep_dir), str(point_id)
    found = _indexed_row(sweep_dir, point_id)
    if found is None and job_dir is not None:
        for path in (Path(job_dir) / "row.json", Path(job_dir) / f"row-{point_id}.json"):
            row = _load_row(path)
            if row is not None and str(row.get("point_id")) == point_id:
                _write_entry(ensure_index(sweep_dir), point_id, _relative(sweep_dir, path), row)
                return row
    return None if found is None else found[1]


def index_row(sweep_dir: Path, path: Path, row: Mapping[str, Any]) -> None:
    """Name the row file `path` in the index as its point's row, unless the index names a better one.

    The one duplicate rule decides (`best_rows`): a failed retry keeps the ok row. Called after the
    row file is written: a build that sees the new index entry then finds the row too.
    """
    point_id = str(row.get("point_id") or "")
    if not point_id:
        return
    index = ensure_index(sweep_dir)
    old = _indexed_row(sweep_dir, point_id)
    if old is None or old[0] == path or best_rows([old[1], dict(row)])[0] is not old[1]:
        _write_entry(index, point_id, _relative(sweep_dir, path), row)
