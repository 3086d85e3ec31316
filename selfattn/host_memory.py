"""The host's available memory (Linux's MemAvailable, else the free pages sysconf reports). Standard library only:
the sweep's process reads it before torch is imported (runners/cgroup_memory.py), the budget guard inside
measure_point (selfattn/measure/memory.py)."""

from __future__ import annotations

import os


def proc_kib_field(path: str, key: str) -> int | None:
    """The bytes of a `key: N kB` line of a /proc file (/proc/meminfo's MemAvailable:, /proc/self/status's
    VmSize:), None where the file or the line cannot be read."""
    try:
        with open(path) as lines:
            for line in lines:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def host_available_bytes() -> int | None:
    """MemAvailable in bytes, else free pages times their size; None where neither is known."""
    available = proc_kib_field("/proc/meminfo", "MemAvailable:")
    if available is not None:
        return available
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None
