"""Where a run may write: the rules for `name` and for the folder it writes into, each broken one a line.

`name` makes the default folder, sweeps/<name>/<time> (conf/config.yaml), and the wandb group: it must stay
inside sweeps/ (no `..` part, not absolute) and fit a wandb group (128 characters, less the folder's
`/<time>`), so at most NAME_MAX_CHARS characters. A folder (`hydra.sweep.dir`, `hydra.run.dir`) must not be
empty (an empty one would write the sweep into the current folder), must not be a file or lie under one,
and the nearest part of it that exists must be a folder this process may write into.

runners/cli_check.py applies them to the command line before Hydra starts; runners/callbacks.py and
runners/sweep.py to the composed config (a name from a config file) before the first point. No torch.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Any

from selfattn.fields import shown

NAME_MAX_CHARS = 100
PATH_PART_MAX_BYTES = 255  # a file name's limit on Linux and macOS file systems
def name_problem(name: Any) -> str:
    """'' when `name` may name a sweep, else the one-line problem."""
    if not isinstance(name, str) or not name:
        return f"name: expected 1 to {NAME_MAX_CHARS} characters naming a folder inside sweeps/, got {shown(name)}"
    if len(name) > NAME_MAX_CHARS:
        return (f"name: at most {NAME_MAX_CHARS} characters (it names the sweep folder and the wandb group), "
                f"got {len(name)}: {shown(name)}")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return f"name: no control characters (it names a folder), got {shown(name)}"
    parts = PurePosixPath(name).parts
    if name.startswith(("/", "~")) or any(p in ("..", ".") for p in parts) or "//" in name or name.endswith("/"):
        return f"name: a folder inside sweeps/ (plain parts joined by /, no '..', not absolute), got {shown(name)}"
    return ""


SUBDIR_KEY = "hydra.sweep.subdir"


def subdir_problem(value: Any) -> str:
    """'' when `value` (a job's folder inside the sweep folder, hydra.sweep.subdir) stays inside it, else the line.
    A job folder outside would get its row written elsewhere and the sweep's end find none of it."""
    text = "" if value is None else str(value)
    parts = PurePosixPath(text).parts
    if not parts or text.startswith(("/", "~")) or any(p in ("..", ".") for p in parts) or "\0" in text:
        return (f"{SUBDIR_KEY}: a folder inside the sweep folder (plain parts joined by /, no '..', not absolute, "
                f"not empty), got {shown(text)}")
    return ""


def job_folder_problem(sweep_dir: Path, job_dir: Path) -> str:
    """'' when `job_dir` lies strictly inside `sweep_dir` (by its path's parts, no link followed), else the line."""
    sweep, job = Path(os.path.normpath(os.path.abspath(sweep_dir))), Path(os.path.normpath(os.path.abspath(job_dir)))
    if sweep == job or sweep not in job.parents:
        return f"{SUBDIR_KEY}: the job's folder {job} is not inside the sweep folder {sweep}"
    return ""


def folder_problem(key: str, value: Any) -> str:
    """'' when `value` may be the folder a run writes into (what exists of it is a writable folder), else the line."""
    text = "" if value is None else str(value)
    if not text.strip():
        return f"{key}: expected a folder, got an empty path (it would write the sweep into the current folder)"
    if "\0" in text:
        return f"{key}: a path cannot hold a NUL character, got {shown(text)}"
    path = Path(text)
    if any(len(part.encode(errors="replace")) > PATH_PART_MAX_BYTES for part in path.parts):
        return f"{key}: each part of a path has at most {PATH_PART_MAX_BYTES} bytes, got {shown(text)}"
    probe = path
    while True:
        try:
            is_dir = probe.is_dir()
            exists = is_dir or probe.exists()
        except OSError as exc:  # a part too long, a loop of links: the OS's own words
            return f"{key}: {shown(text)} cannot be used ({exc.strerror or exc})"
        if exists:
            break
        if probe.parent == probe:
            return ""
        probe = probe.parent
    if not is_dir:
        where = "is a file" if probe == path else f"lies under the file {probe}"
        return f"{key}: {path} {where}, not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        why = "a read-only file system" if _read_only(probe) else "no permission to write there"
        return f"{key}: {probe.absolute()} cannot be written ({why})"
    return ""


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False
