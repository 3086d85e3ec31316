"""Peak memory one call needs beyond what was live before it, measured for real on both devices.

CUDA: the caching allocator's own counters (`reset_peak_memory_stats`, `max_memory_allocated`).
CPU: the process's peak resident set. Linux lets a process reset its high-water mark by writing
"5" to /proc/self/clear_refs; after `malloc_trim(0)` has handed freed heap pages back to the OS,
every byte the call allocates and writes shows up in VmHWM. Large tensors are mmap'ed by glibc and
returned to the OS on free, which is fine: VmHWM still records their peak. Pages allocated but
never written are not counted, which is also fine: attention writes every buffer it allocates.
Where /proc is not available (macOS, Windows) the CPU measurement is None, never a guess.

RSS is the process's view and carries the allocator's and the OS's noise (a few MiB of pages
kept or returned). `alloc_peak_bytes` is exact instead: the peak of the running sum of every
allocation and free made through torch's CPU allocator during the call (kernel-internal buffers
included), read from the profiler's memory events. The same call gives the same number each time.
Buffers a BLAS library allocates with its own malloc are not in it; on CUDA the caching
allocator's counter (`cuda_peak_bytes`) is that same number.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
import os
import sys
import time
from typing import Callable, Iterator

import torch

from selfattn.host_memory import host_available_bytes

from selfattn import torch_private

_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    # glibc's soname first: find_library runs `ldconfig -p` in a subprocess (17 ms of a fresh process)
    for name in ("libc.so.6", ctypes.util.find_library("c")):
        try:
            return ctypes.CDLL(name) if name else None
        except OSError:
            continue
    return None


def malloc_trim() -> None:
    """Give freed heap memory back to the OS (glibc only; a no-op elsewhere)."""
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is not None:
        trim(0)


def _status_kib(field: str) -> int | None:
    """A `VmXXX:  1234 kB` value of /proc/self/status in KiB, or None when unavailable."""
    try:
        with open(_STATUS) as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def rss_bytes() -> int | None:
    """The process's resident set size now."""
    kib = _status_kib("VmRSS")
    return None if kib is None else kib * 1024


def peak_rss_bytes() -> int | None:
    """The process's peak resident set size since start or the last `reset_peak_rss`."""
    kib = _status_kib("VmHWM")
    return None if kib is None else kib * 1024


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS; False when the kernel does not allow it."""
    try:
        with open(_CLEAR_REFS, "w") as clear_refs:
            clear_refs.write("5")
        return True
    except OSError:
        return False


# Young generations only: what a point leaves behind is freed by reference counting, and a full
# collection walks every object torch ever created (~0.1-0.3 s), too slow to pay per point.
# A failed point (whose traceback may hold tensors in a cycle) gets a full one in release_memory.
_GC_GENERATION = 1


def cpu_peak_bytes(fn: Callable[[], object]) -> tuple[int | None, float]:
    """Peak RSS growth while `fn` runs (its result included, then dropped) or None, and fn's seconds."""
    gc.collect(_GC_GENERATION)
    malloc_trim()
    reset = reset_peak_rss()
    before = rss_bytes()
    start = time.perf_counter()
    result = fn()
    call_s = time.perf_counter() - start
    peak = peak_rss_bytes()
    del result
    if not reset or before is None or peak is None:
        return None, call_s
    return max(0, peak - before), call_s


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[None]:
    """Point file descriptor 2 at /dev/null for a moment: C++ code writes there, not to sys.stderr.
    SELFATTN_VERBOSE=1 (verbose=true) leaves it alone."""
    if os.environ.get("SELFATTN_VERBOSE") == "1":
        yield
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # fd 2 closed (by a back end): nothing to silence
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def alloc_peak_bytes(fn: Callable[[], object]) -> int | None:
    """Peak bytes allocated through torch's CPU allocator while `fn` runs (its result included),
    beyond what was live before; None when this torch's profiler does not expose memory events."""
    # torch.autograd.profiler.profile is what torch.profiler.profile(activities=[CPU], profile_memory=True)
    # runs, with the same settings; called directly, because torch.profiler's start asks
    # `hasattr(torch, "_inductor")`, which imports inductor and dynamo (~2 s of a fresh process's time).
    from torch.autograd.profiler import profile

    gc.collect(_GC_GENERATION)
    prof = profile(use_cpu=True, use_device=None, profile_memory=True, use_kineto=True)
    with _stderr_silenced():  # the profiler prints two lines per start and stop; a sweep prints one per point
        prof.__enter__()
    # While it records, torch's allocator notes on fd 2 the first free (and every 1000th) of a block allocated
    # before the profiler started ("Memory block of unknown size ..."): a c10 LOG(WARNING), which torch's own
    # TORCH_CPP_LOG_LEVEL hides; the sweep sets it (runners/quiet.py), a library caller sees the note.
    try:
        result = fn()  # its own errors (a CPU OOM is a RuntimeError) propagate
        del result
    finally:
        with _stderr_silenced():
            prof.__exit__(None, None, None)
    deltas = torch_private.memory_events(prof)
    if deltas is None:  # a torch whose profiler keeps its results elsewhere: no number rather than a guess
        return None
    live = peak = 0
    for _start, nbytes in deltas:  # allocations are positive, frees negative, in time order
        live += nbytes
        peak = max(peak, live)
    return peak


def cuda_peak_bytes(fn: Callable[[], object]) -> tuple[int, float]:
    """Peak bytes allocated on the current CUDA device while `fn` runs beyond what was live, and fn's seconds."""
    gc.collect(_GC_GENERATION)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    result = fn()
    torch.cuda.synchronize()
    call_s = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated()
    del result
    return max(0, peak - before), call_s


def measure_peak(fn: Callable[[], object], device: str) -> tuple[int | None, float]:
    """Run `fn` once: (peak bytes beyond what was live before, or None; the call's seconds)."""
    if device == "cuda":
        return cuda_peak_bytes(fn)
    return cpu_peak_bytes(fn)


def free_bytes(device: str) -> int | None:
    """Memory a point may still use: CUDA free + cached-but-unused blocks; CPU MemAvailable."""
    if device == "cuda":
        free, _total = torch.cuda.mem_get_info()
        # Blocks the caching allocator holds but does not use are free to this process too.
        return int(free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated())
    return host_available_bytes()


def release_memory(device: str) -> None:
    """Drop everything a failed point left behind, so the next point measures as if fresh."""
    gc.collect()
    if device == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    else:
        malloc_trim()
