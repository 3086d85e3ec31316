"""The host's available memory (Linux's MemAvailable, else the free pages sysconf reports). Standard library only:
the sweep's process reads it before torch is imported (runners/cgroup_memory.py), the budget guard inside
measure_point (selfattn/measure/memory.py)."""

from __future__ import annotations

import os


def host_available_bytes() -> int | None:
    """MemAvailable in bytes, else free pages times their size; None where neither is known."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None
