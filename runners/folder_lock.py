"""One sweep owns its folder: an OS file lock, held from before the first point until the process ends.

Why the kernel's lock (fcntl.flock on LOCK_NAME in the folder) and not a PID file: the kernel drops it
when its process dies, however it dies (SIGKILL, the OOM killer, a lost node), so a killed sweep never
leaves a folder that refuses its own rerun, and no stale file has to be judged by its PID.

- A multirun's launching process takes it exclusively (`own`, from the sweep callback's start,
  runners/callbacks.py), before sweep.json, the index or any point. A second sweep into that folder is
  refused in one line naming the holder's PID and command (which the holder writes into the lock file),
  exit 2, before any work. Two sweeps in one folder would measure on the same cores at once while their
  rows say `jobs_sharing_device=1`, and resume checks would skip points the other has not finished.
- A single run takes it shared (`own(..., shared=True)`): single runs into one folder do not exclude each
  other (each writes its own row file), but a sweep refuses them and they refuse a sweep.
- The jobs a parallel launcher starts in other processes (joblib, submitit, a SLURM array) take no lock:
  they run for the process that holds it, and they write only what never replaces another point's record
  (row files linked into place, runners/row_store.py; one index entry per point), while builds of
  results.csv take the results lock. So a job left running after its launcher died (a SLURM array whose
  submitter was killed) still cannot lose a row of the sweep that took the folder over.
- A file system without locks (some cluster mounts): the sweep runs unlocked, with a one-line note.

Stdlib only: taken before torch has imported.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

LOCK_NAME = ".sweep.lock"
COMMAND_MAX_CHARS = 200  # the holder's command as the refusal quotes it
NO_LOCKS = (errno.ENOLCK, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP)

# folder (resolved) -> the open lock file's descriptor, kept open for the process's life (closing it drops the lock)
_HELD: dict[Path, int] = {}


class FolderBusy(Exception):
    """Another sweep (or single run) holds the folder; the message is the one line to print."""


def own(folder: Path, command: str, shared: bool = False, key: str = "hydra.sweep.dir") -> str:
    """Take `folder`'s lock (creating the folder), exclusive or shared, without waiting.

    Returns '' or a one-line note (a file system without locks: the run goes on unlocked). Raises
    FolderBusy when another process holds it, OSError when the folder or the lock file cannot be made
    (a file in the way, a read-only or full file system): the caller says which in one line.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    held = folder.resolve()
    if held in _HELD:  # this process holds it already (a second multirun in one process: tests)
        return ""
    # held through a read-only descriptor: a file open for writing would keep its file system from being
    # remounted read-only while the sweep runs
    # never through a symbolic link: one planted in its place (a shared folder) would have the record below
    # truncate and overwrite whatever file it points to (ELOOP instead, which the caller refuses in one line)
    fd = os.open(folder / LOCK_NAME, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        holder_text = _read(fd)
        os.close(fd)
        raise FolderBusy(refusal(folder, holder_text, key)) from None
    except OSError as exc:
        os.close(fd)
        if exc.errno in NO_LOCKS:
            return f"note: {folder} is on a file system without locks: nothing stops a second sweep writing into it"
        raise
    try:
        record = f"{os.getpid()}\t{'single run' if shared else 'sweep'}\t{command[:COMMAND_MAX_CHARS]}\n".encode()
        writer = os.open(folder / LOCK_NAME, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.write(writer, record)
        finally:
            os.close(writer)
    except OSError as exc:  # a full file system: the holder cannot even say who it is
        os.close(fd)
        raise OSError(exc.errno, exc.strerror, str(folder / LOCK_NAME)) from exc
    _HELD[held] = fd
    return ""


def release(folder: Path) -> None:
    """Drop this process's lock on `folder` (the process's end does it too)."""
    fd = _HELD.pop(Path(folder).resolve(), None)
    if fd is not None:
        os.close(fd)


def _read(fd: int) -> str:
    try:
        return os.pread(fd, 4096, 0).decode(errors="replace")
    except OSError:
        return ""


def refusal(folder: Path, holder_text: str, key: str = "hydra.sweep.dir") -> str:
    """The one line that refuses a run into a held folder, naming the holder from its lock file's record."""
    pid, kind, command = (holder_text.rstrip("\n").split("\t", 2) + ["", "", ""])[:3]
    kind = kind or "sweep"
    who = f"pid {pid}: {command}" if pid else "its PID not written yet"
    return (f"{key}: {folder} is in use by another {kind} ({who}); wait for it to end, "
            "or choose another folder")
