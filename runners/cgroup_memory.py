"""Memory this process may still use: the host's MemAvailable, or its cgroup's room where that is less.

Inside a container (docker --memory, a SLURM job's cgroup, systemd's MemoryMax) /proc/meminfo still
describes the whole host, so a limit derived from it lets a point grow past the container's and meet the
kernel's out-of-memory killer (a `crashed` row) instead of a failed allocation (`oom`). cgroup v2
(`memory.max` - `memory.current`, the tightest of the process's cgroup and its parents) and v1
(`memory.limit_in_bytes` - `memory.usage_in_bytes`) are both read, the inactive page cache counted as room;
"max" or v1's huge value is no limit.
"""

from __future__ import annotations

from pathlib import Path

from selfattn.host_memory import host_available_bytes

CGROUP_ROOT = Path("/sys/fs/cgroup")  # read at each call, as PROC_CGROUP is (a test points them at a fake tree)
PROC_CGROUP = Path("/proc/self/cgroup")
_NO_LIMIT_V1 = 1 << 60  # v1 says "no limit" with a page-rounded LONG_MAX


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text or text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _stat(path: Path, key: str) -> int:
    """One counter of a memory.stat file (0 where missing): the inactive page cache, which the kernel reclaims
    before it fails an allocation, so it counts as room (as `docker stats`' working set does)."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def cgroup_room_bytes(proc_cgroup: str | None = None, root: Path | None = None) -> int | None:
    """Bytes left under the tightest memory limit of this process's cgroups, or None where none is set."""
    root = CGROUP_ROOT if root is None else root
    if proc_cgroup is None:
        try:
            proc_cgroup = PROC_CGROUP.read_text()
        except OSError:
            return None
    rooms = []
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # v2: walk from the process's cgroup up to the root
            folder = root / path.lstrip("/")
            while True:
                limit, used = _read_int(folder / "memory.max"), _read_int(folder / "memory.current")
                if limit is not None and used is not None:
                    rooms.append(max(0, limit - used + _stat(folder / "memory.stat", "inactive_file")))
                if folder == root or root not in folder.parents:
                    break
                folder = folder.parent
        elif "memory" in controllers.split(","):  # v1: the memory controller's own tree
            for base in (root / "memory" / path.lstrip("/"), root / "memory"):
                limit, used = _read_int(base / "memory.limit_in_bytes"), _read_int(base / "memory.usage_in_bytes")
                if limit is not None and used is not None and limit < _NO_LIMIT_V1:
                    rooms.append(max(0, limit - used + _stat(base / "memory.stat", "total_inactive_file")))
                    break
    return min(rooms) if rooms else None


def available_bytes() -> int | None:
    """The smaller of the host's MemAvailable and the cgroup's room (None: neither is known)."""
    known = [b for b in (host_available_bytes(), cgroup_room_bytes()) if b is not None]
    return min(known) if known else None
