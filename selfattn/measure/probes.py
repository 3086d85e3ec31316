"""The device probes (matmul peak, copy bandwidth) kept in a cache file, once per machine.

Measuring the peak and the bandwidth costs a fresh process about half a second on a CPU (more
on a GPU): on a SLURM array, where every point is a fresh process, that is most of a tiny
point's cost. Their values depend on the machine, not on the point, so the first process to
measure them writes them to a file and later processes read it:

    <cache folder>/probes-<host>-<hash of the key>.json

one file per machine (hostname, CPU model), device (its name, CUDA's index), torch version and
CPU thread count, holding one entry per probe (`tflops float32 tf32=off`, `gbps`): the value, its
unit, when it was measured (UTC), and the command that measures it again. The cache folder is
$SELFATTN_CACHE_DIR, else $XDG_CACHE_HOME/selfattn-bench, else ~/.cache/selfattn-bench;
SELFATTN_CACHE_DIR=none turns the cache off (every process measures, as before). A row names
where its peaks came from (`device_peak_tflops_source`, `device_peak_gbps_source`).

    python -m selfattn.measure.remeasure            # show this machine's cached probes
    python -m selfattn.measure.remeasure --remeasure   # measure them again (fp32, the CPU or the GPU)

The one place selfattn writes a file: a cache that can be deleted at any time (it is then
measured again), written whole (a temporary file renamed into place) so two processes never see
half of it; one that cannot be written is simply not kept. This module only reads and writes the
file: the key comes from selfattn/measure/device.py (`machine_key`), which measures.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

CACHE_ENV = "SELFATTN_CACHE_DIR"
OFF = "none"  # SELFATTN_CACHE_DIR=none: no cache
REMEASURE_COMMAND = "python -m selfattn.measure.remeasure --remeasure"
MEASURED = "measured"  # a row's source of a peak this process measured


def cache_dir() -> Path | None:
    """The cache folder (not created here), or None when the cache is off."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen is not None and chosen.strip():
        return None if chosen.strip().lower() == OFF else Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "selfattn-bench"


def cache_file(key: Mapping[str, Any]) -> Path | None:
    """The cache file of `key` (hostname, device, torch version, ...: device.machine_key), None when off."""
    folder = cache_dir()
    if folder is None:
        return None
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    host = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(key.get("hostname", ""))) or "host"
    return folder / f"probes-{host}-{key.get('device', 'device')}-{digest}.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and isinstance(data.get("probes"), dict) else {}


def source_text(path: Path, measured_at: str) -> str:
    return f"cache {path} (measured {measured_at})"


def lookup(key: Mapping[str, Any], probe: str) -> tuple[float, str] | None:
    """(value, source) of a cached probe, or None when it is not cached (or the cache is off)."""
    path = cache_file(key)
    if path is None:
        return None
    entry = _read(path).get("probes", {}).get(probe)
    if not isinstance(entry, dict):
        return None
    value = entry.get("value")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return None
    return float(value), source_text(path, str(entry.get("measured_at", "?")))


def store(key: Mapping[str, Any], probe: str, value: float, unit: str) -> None:
    """Keep a measured probe in the cache file (beside the file's other probes); quietly nothing when
    the folder cannot be written: the next process measures it again."""
    path = cache_file(key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _read(path) or {"probes": {}}
        data["machine"] = dict(key)
        data["remeasure"] = f"{REMEASURE_COMMAND} (or delete this file)"
        data["probes"][probe] = {"value": value, "unit": unit,
                                 "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(data, indent=1, sort_keys=True))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass


def read(key: Mapping[str, Any]) -> dict[str, Any]:
    """The cache file's contents for `key` ({} when absent, unreadable or off)."""
    path = cache_file(key)
    return {} if path is None else _read(path)


def forget(key: Mapping[str, Any]) -> Path | None:
    """Remove the cache file of `key` (the next lookup measures again); returns it."""
    path = cache_file(key)
    if path is not None:
        path.unlink(missing_ok=True)
    return path
