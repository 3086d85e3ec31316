"""Where a row was measured: the environment columns and the device's own matmul peak.

Both are computed once per process (the peak once per device, dtype and TF32 setting) and
cached, so a sweep of many points pays for them once: no subprocess per row. The two probes
(matmul peak, copy bandwidth) are also kept in a cache file per machine (selfattn/measure/probes.py),
so a fresh process reads them instead of measuring; `peak_source` says where a value came from.
"""

from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch


# Square GEMM sizes for the peak: big enough to saturate the device, small enough to be quick.
# The matrix doubles from START_N while the next size's call (8x the work) would stay under
# GROW_CALL_S, up to MAX_N: ~1024 for fp32 on a small CPU, less for dtypes a CPU computes slowly
# (fp16, bf16 without AMX), 8192 on a datacenter GPU, less for fp64 on a consumer GPU. So the
# whole measurement stays well under a second, once per process, device, dtype and TF32 setting.
START_N = {"cpu": 256, "cuda": 2048}
MAX_N = {"cpu": 2048, "cuda": 8192}
GROW_CALL_S = {"cpu": 0.1, "cuda": 0.05}
PEAK_TIMING_S = {"cpu": 0.15, "cuda": 0.1}  # the timed window of all the trials together
# A peak measured while other processes load the machine can be 10-100x too low (every thread's barriers collapse
# in the GEMM, seen on 2 shared cores), and a low peak makes the physical floor (floor.py) too strict and the time
# guard skip points that fit. So the peak is the best of up to PEAK_TRIALS short trials, each growing the matrix from
# the size the last one reached (a slowed call stops one trial's growth, not the next one's); two trials within
# PEAK_AGREE of each other end it early (a quiet machine pays what one longer window cost). Trials that never agree
# say the machine is loaded: on a CPU one more trial then runs on one thread, which no barrier collapse drags down,
# and the better value is kept (a sanity bound from below: all threads never do worse than one).
PEAK_TRIALS = 3
PEAK_AGREE = 0.1

_REPO = Path(__file__).resolve().parents[2]


def resolve_device(device: str) -> str:
    """"auto" -> "cuda" when a GPU is usable, else "cpu"; "cpu"/"cuda" pass through."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device: expected auto, cpu or cuda, got {device!r}")
    return device


@functools.lru_cache(maxsize=1)
def git_sha() -> str:
    """The harness's git commit (with "-dirty" when the tree has changes), or "" outside git."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=_REPO, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    try:
        sha = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return ""
    return sha + ("-dirty" if dirty else "")


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=1)
def _cpu_mem_bytes() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


@functools.lru_cache(maxsize=1)
def _nvidia_driver() -> str:
    """The NVIDIA driver version (torch does not expose it): NVML if installed, else nvidia-smi."""
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # pynvml missing or NVML unusable: try the command line once
        pass
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
        return out.strip().splitlines()[0] if out.strip() else ""
    except (OSError, subprocess.SubprocessError):
        return ""


@functools.lru_cache(maxsize=4)
def _environment(device: str) -> dict[str, Any]:
    env: dict[str, Any] = {
        "device": device,
        "cpu_model": cpu_model(),
        "num_threads": torch.get_num_threads(),
        "hostname": socket.gethostname(),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda or "",
        "git_sha": git_sha(),
    }
    if device == "cuda":
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        env.update(
            device_name=props.name,
            device_capability=f"{props.major}.{props.minor}",
            device_mem_bytes=int(props.total_memory),
            driver_version=_nvidia_driver(),
        )
    else:
        env.update(device_name=cpu_model(), device_capability="", device_mem_bytes=_cpu_mem_bytes(), driver_version="")
    return env


def machine_key(device: str) -> dict[str, Any]:
    """What the probes' values depend on (their cache file's key, selfattn/measure/probes.py): the machine,
    the device, torch's version and, on a CPU, torch's thread count."""
    device = resolve_device(device)
    key: dict[str, Any] = {"hostname": socket.gethostname(), "cpu_model": cpu_model(), "device": device,
                           "torch_version": torch.__version__}
    if device == "cuda":
        index = torch.cuda.current_device()
        key.update(device_name=torch.cuda.get_device_name(index), device_index=index, cuda_version=torch.version.cuda)
    else:
        key["num_threads"] = torch.get_num_threads()
    return key


def environment(device: str) -> dict[str, Any]:
    """Environment columns of a row measured on `device` (cached), plus a fresh UTC timestamp."""
    env = dict(_environment(resolve_device(device)))
    env["timestamp"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return env


_PEAKS: dict[tuple[str, torch.dtype, bool], float] = {}
_SOURCES: dict[Any, str] = {}  # a peak's key (or ("gbps", device)) -> where its value came from
_REMEASURED: dict[Any, int] = {}  # a peak's key (or ("gbps", device)) -> times measured again
# How often one process may measure a peak again (see `remeasure` below): bounded, so a sweep
# full of truly oversized points pays for it a few times, not once per point.
MAX_REMEASURES = 3


def device_peak_tflops(device: str, dtype: torch.dtype, *, remeasure: bool = False) -> float:
    """Measured matmul throughput of a large square GEMM on `device` in `dtype`, in TFLOP/s
    (2 n^3 FLOPs over the fastest timed call).

    Measured under the caller's current TF32 setting (so tf32 points get the TF32 peak) and
    cached per device, dtype and that setting. `remeasure=True` measures again (at most
    MAX_REMEASURES times per process) and keeps the better value: a peak measured while other
    processes hammered the CPU can be 10x too low, and the time guard would then skip points
    that fit.
    """
    from selfattn.measure import probes

    key = _peak_key(device, dtype)
    device, probe = key[0], _probe_name(dtype, key[2])
    if key not in _PEAKS:
        cached = probes.lookup(machine_key(device), probe)
        if cached is not None:
            _PEAKS[key], _SOURCES[key] = cached
        else:
            _PEAKS[key], _SOURCES[key] = _measure_peak(device, dtype), probes.MEASURED
            probes.store(machine_key(device), probe, _PEAKS[key], "TFLOP/s")
    elif remeasure and _REMEASURED.get(key, 0) < MAX_REMEASURES:
        _REMEASURED[key] = _REMEASURED.get(key, 0) + 1
        again = _measure_peak(device, dtype)
        if again > _PEAKS[key]:  # the better value wins, here and in the cache
            _PEAKS[key], _SOURCES[key] = again, probes.MEASURED
            probes.store(machine_key(device), probe, again, "TFLOP/s")
    return _PEAKS[key]


def _peak_key(device: str, dtype: torch.dtype) -> tuple[str, torch.dtype, bool]:
    device = resolve_device(device)
    return device, dtype, device == "cuda" and torch.backends.cuda.matmul.allow_tf32


def _probe_name(dtype: torch.dtype, tf32: bool) -> str:
    return f"tflops {str(dtype).removeprefix('torch.')} tf32={'on' if tf32 else 'off'}"


def peak_source(device: str, dtype: torch.dtype | None = None) -> str:
    """Where the value device_peak_tflops(device, dtype) (dtype None: device_peak_gbps(device)) returned
    came from: "measured" (this process) or "cache <file> (measured <date>)"; "" before it was asked for."""
    key = ("gbps", resolve_device(device)) if dtype is None else _peak_key(device, dtype)
    return _SOURCES.get(key, "")


def forget_peaks() -> None:
    """Forget this process's peaks (the next call reads the cache file or measures)."""
    for table in (_PEAKS, _SOURCES, _REMEASURED, _BANDWIDTH):
        table.clear()


def _measure_peak(device: str, dtype: torch.dtype) -> float:
    """The best of up to PEAK_TRIALS short GEMM trials (see PEAK_TRIALS), in TFLOP/s."""
    n, best, agreed = START_N[device], 0.0, False
    for _ in range(PEAK_TRIALS):
        n, tflops = _gemm_trial(device, dtype, n, PEAK_TIMING_S[device] / PEAK_TRIALS)
        agreed = best > 0 and abs(tflops - best) <= PEAK_AGREE * max(tflops, best)
        best = max(best, tflops)
        if agreed:
            break
    if not agreed and device == "cpu" and torch.get_num_threads() > 1:
        from selfattn.measure.threads import one_thread

        with one_thread():
            best = max(best, _gemm_trial(device, dtype, n, PEAK_TIMING_S[device] / PEAK_TRIALS)[1])
    return best


def _gemm_trial(device: str, dtype: torch.dtype, n: int, timing_s: float) -> tuple[int, float]:
    """One trial: the square GEMM grown from size `n` while a call stays short (GROW_CALL_S), then timed for
    `timing_s`; the size reached and its fastest call's TFLOP/s."""
    from selfattn.measure.timing import time_call, wall_call

    generator = torch.Generator(device=device).manual_seed(0)
    while True:
        a = torch.randn(n, n, generator=generator, device=device, dtype=torch.float32).to(dtype)
        b = torch.randn(n, n, generator=generator, device=device, dtype=torch.float32).to(dtype)
        _, first_s = wall_call(lambda: torch.mm(a, b), device)  # warm-up: library init (cuBLAS) is not the GEMM
        _, call_s = wall_call(lambda: torch.mm(a, b), device)
        call_s = min(first_s, call_s)  # one call slowed by another process should not stop the growth
        if 8 * call_s > GROW_CALL_S[device] or n >= MAX_N[device]:
            break
        n *= 2
    timing = time_call(lambda: torch.mm(a, b), device, timing_s, call_s)
    # A peak is the best the device does: the fastest sample, so a moment of contention from
    # another process during this short measurement does not drag it down.
    best_ms = timing.min_ms if timing.min_ms is not None else timing.p20_ms
    return n, 2.0 * n**3 / (best_ms * 1e-3) / 1e12


# The bandwidth peak copies a buffer far larger than any cache: a CPU's last-level cache is tens
# of MiB, a GPU's L2 up to ~100 MiB. A copy reads and writes every byte once (2 x its size).
BANDWIDTH_BYTES = {"cpu": 256 * 2**20, "cuda": 2 * 2**30}
BANDWIDTH_RUNS = 5  # the best of a few copies: the peak is what the device can do, not its average
_BANDWIDTH: dict[str, float] = {}


def device_peak_gbps(device: str, *, remeasure: bool = False) -> float:
    """Measured memory bandwidth of `device` in GB/s (1e9 bytes): the fastest of BANDWIDTH_RUNS
    copies of a large buffer, bytes read plus bytes written over its time. Once per process and
    device, like device_peak_tflops (and, like it, `remeasure=True` measures again, at most
    MAX_REMEASURES times, keeping the better value); decode steps are judged against it (their
    arithmetic per byte is too low for the matmul peak to matter)."""
    from selfattn.measure import probes

    device = resolve_device(device)
    if device not in _BANDWIDTH:
        cached = probes.lookup(machine_key(device), "gbps")
        if cached is not None:
            _BANDWIDTH[device], _SOURCES[("gbps", device)] = cached
        else:
            _BANDWIDTH[device], _SOURCES[("gbps", device)] = _measure_bandwidth(device), probes.MEASURED
            probes.store(machine_key(device), "gbps", _BANDWIDTH[device], "GB/s")
    elif remeasure and _REMEASURED.get(("gbps", device), 0) < MAX_REMEASURES:
        _REMEASURED[("gbps", device)] = _REMEASURED.get(("gbps", device), 0) + 1
        again = _measure_bandwidth(device)
        if again > _BANDWIDTH[device]:  # the better value wins, here and in the cache
            _BANDWIDTH[device], _SOURCES[("gbps", device)] = again, probes.MEASURED
            probes.store(machine_key(device), "gbps", again, "GB/s")
    return _BANDWIDTH[device]


def _measure_bandwidth(device: str) -> float:
    from selfattn.measure.timing import wall_call

    n = BANDWIDTH_BYTES[device]
    if device == "cuda":  # leave room: a GPU shared with other jobs may not have 2 x 2 GiB free
        n = min(n, int(torch.cuda.mem_get_info()[0] // 8))
    src = torch.ones(n // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up: first-touch page faults are not bandwidth
    best_s = min(wall_call(lambda: dst.copy_(src), device)[1] for _ in range(BANDWIDTH_RUNS))
    del src, dst
    return 2.0 * n / best_s / 1e9
