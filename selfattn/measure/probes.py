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

    python -m selfattn.measure.probes               # show this machine's cached probes
    python -m selfattn.measure.probes --remeasure   # measure them again (fp32, the CPU or the GPU)

The one place selfattn writes a file: a cache that can be deleted at any time (it is then
measured again), written whole (a temporary file renamed into place) so two processes never see
half of it; one that cannot be written is simply not kept.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

CACHE_ENV = "SELFATTN_CACHE_DIR"
OFF = "none"  # SELFATTN_CACHE_DIR=none: no cache
REMEASURE_COMMAND = "python -m selfattn.measure.probes --remeasure"
MEASURED = "measured"  # a row's source of a peak this process measured


def cache_dir() -> Path | None:
    """The cache folder (not created here), or None when the cache is off."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen is not None and chosen.strip():
        return None if chosen.strip().lower() == OFF else Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "selfattn-bench"


def machine_key(device: str) -> dict[str, Any]:
    """What the probes' values depend on: the machine, the device, torch's version and its threads."""
    import torch

    from selfattn.measure.device import cpu_model

    key: dict[str, Any] = {"hostname": socket.gethostname(), "cpu_model": cpu_model(), "device": device,
                           "torch_version": torch.__version__}
    if device == "cuda":
        index = torch.cuda.current_device()
        key.update(device_name=torch.cuda.get_device_name(index), device_index=index, cuda_version=torch.version.cuda)
    else:
        key["num_threads"] = torch.get_num_threads()
    return key


def cache_file(device: str) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    key = machine_key(device)
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    host = "".join(c if c.isalnum() or c in "-_." else "_" for c in key["hostname"]) or "host"
    return folder / f"probes-{host}-{device}-{digest}.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and isinstance(data.get("probes"), dict) else {}


def source_text(path: Path, measured_at: str) -> str:
    return f"cache {path} (measured {measured_at})"


def lookup(device: str, probe: str) -> tuple[float, str] | None:
    """(value, source) of a cached probe, or None when it is not cached (or the cache is off)."""
    path = cache_file(device)
    if path is None:
        return None
    entry = _read(path).get("probes", {}).get(probe)
    if not isinstance(entry, dict):
        return None
    value = entry.get("value")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return None
    return float(value), source_text(path, str(entry.get("measured_at", "?")))


def store(device: str, probe: str, value: float, unit: str) -> None:
    """Keep a measured probe in the cache file (beside the file's other probes); quietly nothing when
    the folder cannot be written: the next process measures it again."""
    path = cache_file(device)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _read(path) or {"probes": {}}
        data["machine"] = machine_key(device)
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


def forget(device: str) -> Path | None:
    """Remove this machine's cache file for `device` (the next lookup measures again); returns it."""
    path = cache_file(device)
    if path is not None:
        path.unlink(missing_ok=True)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m selfattn.measure.probes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--remeasure", action="store_true", help="measure the probes again and cache them")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--precision", nargs="*", default=["fp32"], help="precisions whose matmul peak to measure")
    args = parser.parse_args(argv)
    from selfattn.measure import device as probes_of
    from selfattn.precision import precision_context

    device = probes_of.resolve_device(args.device)
    path = cache_file(device)
    if path is None:
        print(f"the probe cache is off ({CACHE_ENV}={OFF})")
    if args.remeasure:
        forget(device)
        probes_of.forget_peaks()
        for precision in args.precision:
            with precision_context(precision, device) as dtype:
                print(f"{precision}: matmul peak {probes_of.device_peak_tflops(device, dtype):.3g} TFLOP/s")
        print(f"copy bandwidth {probes_of.device_peak_gbps(device):.3g} GB/s")
    if path is not None:
        data = _read(path)
        print(f"{path}:" if data else f"{path}: nothing cached yet")
        for probe, entry in sorted(data.get("probes", {}).items()):
            print(f"  {probe}: {entry.get('value'):.4g} {entry.get('unit', '')} (measured {entry.get('measured_at')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
