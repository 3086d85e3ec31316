"""Each point starts from the same process state: what a back end changes for itself is put back after it.

A back end runs in a process that measures other points after it (the isolated worker, or the sweep's own
process with isolate=false). torch keeps global state that every later point's time or numbers depend on:
its intra-op and inter-op threads, the default dtype, grad mode, the deterministic-algorithms flags, the
float32 matmul precision and cuDNN/cuBLAS TF32 flags, the random generators. A plugin calling
`torch.set_num_threads(1)` would have every later point timed on one thread while its `num_threads` column
said otherwise. So `kept()` records that state before a point and restores it after, and says what the
back end changed (the row's note). The standard descriptors 0-2 are kept too: a plugin that closes fd 2
would otherwise break the harness's own `os.dup(2)` (selfattn/measure/memory.py) for every later point.

torch.set_num_interop_threads can be called once per process, before any inter-op work: a back end that
changed it cannot be undone, so a change is reported (`unrestorable`) and the isolated worker is replaced.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

_STD_FDS = (0, 1, 2)


def _torch_settings(torch: Any) -> dict[str, tuple[Callable[[], Any], Callable[[Any], object] | None]]:
    """name -> (read it, set it back; None where it cannot be set again)."""
    backends = torch.backends
    settings: dict[str, tuple[Callable[[], Any], Callable[[Any], object] | None]] = {
        "num_threads": (torch.get_num_threads, torch.set_num_threads),
        "num_interop_threads": (torch.get_num_interop_threads, None),
        "default_dtype": (torch.get_default_dtype, torch.set_default_dtype),
        "grad_enabled": (torch.is_grad_enabled, torch.set_grad_enabled),
        "deterministic_algorithms": (
            lambda: (torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled()),
            lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1])),
        "float32_matmul_precision": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
        "cudnn": (lambda: (backends.cudnn.enabled, backends.cudnn.benchmark, backends.cudnn.deterministic,
                           backends.cudnn.allow_tf32),
                  lambda v: _set_cudnn(backends.cudnn, v)),
        "cuda_matmul_allow_tf32": (lambda: backends.cuda.matmul.allow_tf32,
                                   lambda v: setattr(backends.cuda.matmul, "allow_tf32", v)),
        "cuda_matmul_reduced_precision": (
            lambda: (backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
                     backends.cuda.matmul.allow_bf16_reduced_precision_reduction),
            lambda v: _set_reduced_precision(backends.cuda.matmul, v)),
    }
    if hasattr(torch, "is_inference_mode_enabled"):
        settings["inference_mode"] = (torch.is_inference_mode_enabled, None)  # a context only: not set again
    return settings


def _set_reduced_precision(matmul: Any, values: tuple) -> None:
    matmul.allow_fp16_reduced_precision_reduction, matmul.allow_bf16_reduced_precision_reduction = values


def _set_cudnn(cudnn: Any, values: tuple) -> None:
    cudnn.enabled, cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32 = values


@dataclass
class Snapshot:
    settings: dict[str, Any] = field(default_factory=dict)
    rng: dict[str, Any] = field(default_factory=dict)  # generator states: compared by restoring, not named
    std_fds: dict[int, int] = field(default_factory=dict)  # fd -> a saved duplicate (close-on-exec, above the low fds)


@dataclass
class Changes:
    """What a back end changed: restored (`restored`), or not restorable in this process (`unrestorable`)."""

    restored: list[str] = field(default_factory=list)
    unrestorable: list[str] = field(default_factory=list)

    def note(self) -> str:
        parts = []
        if self.restored:
            parts.append(f"the back end changed {', '.join(self.restored)}; restored after its point")
        if self.unrestorable:
            parts.append(f"the back end changed {', '.join(self.unrestorable)}, which this process cannot set back")
        return "; ".join(parts)


def take(torch: Any | None = None) -> Snapshot:
    """The state now (torch's where it is imported)."""
    torch = torch if torch is not None else sys.modules.get("torch")
    snap = Snapshot()
    if torch is not None:
        for name, (read, _) in _torch_settings(torch).items():
            try:
                snap.settings[name] = read()
            except Exception:  # an older torch without the setting: not kept
                continue
        snap.rng["torch"] = torch.random.get_rng_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            snap.rng["cuda"] = torch.cuda.get_rng_state_all()
    snap.rng["random"] = random.getstate()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        snap.rng["numpy"] = numpy.random.get_state()
    return snap


def restore(snap: Snapshot, torch: Any | None = None) -> Changes:
    """Set everything in `snap` back; what differed is named in the result."""
    torch = torch if torch is not None else sys.modules.get("torch")
    changes = Changes()
    if torch is not None:
        for name, (read, write) in _torch_settings(torch).items():
            if name not in snap.settings:
                continue
            try:
                now = read()
            except Exception:
                continue
            if now == snap.settings[name]:
                continue
            what = f"{name} ({_text(snap.settings[name])} -> {_text(now)})"
            if write is None:
                changes.unrestorable.append(what)
                continue
            try:
                write(snap.settings[name])
                changes.restored.append(what)
            except Exception:
                changes.unrestorable.append(what)
        if "torch" in snap.rng:
            torch.random.set_rng_state(snap.rng["torch"])
        if "cuda" in snap.rng and torch.cuda.is_initialized():
            torch.cuda.set_rng_state_all(snap.rng["cuda"])
    random.setstate(snap.rng["random"])
    if "numpy" in snap.rng and "numpy" in sys.modules:
        sys.modules["numpy"].random.set_state(snap.rng["numpy"])
    return changes


def _text(value: Any) -> str:
    return str(value).replace("torch.", "")


def keep_std_fds() -> dict[int, int]:
    """Duplicates of fds 0-2 kept aside (close-on-exec, above the low fds) for `restore_std_fds`."""
    import fcntl

    saved = {}
    for fd in _STD_FDS:
        try:
            saved[fd] = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, high_fd())
        except OSError:  # not open to begin with: /dev/null is put there if a point leaves it closed
            continue
    return saved


def restore_std_fds(saved: dict[int, int]) -> list[int]:
    """Put back fds 0-2 a back end closed (or pointed elsewhere: dup2 is cheap); the ones that were closed."""
    closed = []
    for fd in _STD_FDS:
        try:
            os.fstat(fd)
        except OSError:
            closed.append(fd)
        source = saved.get(fd)
        if source is not None:
            os.dup2(source, fd)
        elif fd in closed:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    return closed


def high_fd() -> int:
    """The lowest descriptor number the harness's own long-lived descriptors take: out of the way of the
    low numbers a plugin opens, closes or guesses (fd 3, 4, ...)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(10, min(1000, (soft if soft != resource.RLIM_INFINITY else 1024) - 24))


@contextlib.contextmanager
def kept(changes: Changes, signals: tuple[int, ...] = ()) -> Iterator[None]:
    """Record the state before the block, put it back after (however the block ends); `changes` is filled.
    `signals`: handlers kept too (the sweep's own process: its Ctrl-C and SIGTERM handlers)."""
    snap = take()
    saved = keep_std_fds()
    handlers = {sig: signal.getsignal(sig) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            if signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)
                changes.restored.append(f"the {signal.Signals(sig).name} handler")
        closed = restore_std_fds(saved)
        for fd in saved.values():
            os.close(fd)
        done = restore(snap)
        changes.restored += done.restored + [f"fd {fd} (closed)" for fd in closed]
        changes.unrestorable += done.unrestorable
