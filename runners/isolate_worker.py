"""The isolated worker's process: `python -m runners.isolate_worker READ_FD WRITE_FD` (runners/isolate.py starts it).

It imports torch and the harness once, says ready, then serves points one at a time: for each, it first
sends the point's predicted seconds (the parent's limit derives from them), then measure_point's row. A
CPU point runs under an address-space limit of what the process maps now plus budget.mem_fraction of the
memory available (the share the budget guard lets a point be predicted to use), so a back end that
allocates without end gets a failed allocation, hence measure_point's `oom` row, and this process lives
on; the limit is lifted after the point. Not on CUDA: its driver reserves a huge address range up front,
and the device's own memory is the caching allocator's, whose failures are `oom` rows already.
SIGINT and SIGTERM are ignored: the sweep's process decides, and kills this one by its PID.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import struct
import sys
from typing import Any, Iterator

_HEADER = struct.Struct("!Q")  # the same framing as runners/isolate.py: length, then a pickle


def _read_exactly(fd: int, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def receive(fd: int) -> Any:
    """The next message, or None when the parent closed its end."""
    header = _read_exactly(fd, _HEADER.size)
    if header is None:
        return None
    data = _read_exactly(fd, _HEADER.unpack(header)[0])
    return None if data is None else pickle.loads(data)


def send(fd: int, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the sweep's process ends, however it ends (even by SIGKILL)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent ended before the call above
        os._exit(1)


def predicted(point: Any, budget: Any) -> tuple[float | None, bool, dict[str, Any]]:
    """The point's predicted seconds (as measure_point's guard predicts them), whether it compiles, and the
    columns a row of it gets from this process (the device's environment, the kernel's label), so that a
    point this process does not finish still says where it ran; (None, False, what is known) where there is
    no prediction (a training run, a point that will not validate: measure_point says why)."""
    columns: dict[str, Any] = {}
    try:
        import torch

        from selfattn.backends.resolved import resolve_point
        from selfattn.measure.device import device_peak_tflops, environment, resolve_device
        from selfattn.measure.predict import nominal_peak_tflops, predict_point_s
        from selfattn.precision import precision_context

        point = point.with_device(resolve_device(point.device))
        if point.device == "cpu" or torch.cuda.is_available():
            columns.update(environment(point.device))
        point.validate()
        if point.scope == "train":
            return None, False, columns
        resolved = resolve_point(point, point.device)
        columns["kernel"] = resolved.label
        if resolved.why_not:  # measure_point says it in the row, before anything runs
            return None, False, columns
        with precision_context(point.precision, point.device):
            peak = (device_peak_tflops(point.device, resolved.storage_dtype) if budget.measure_device_peak
                    else nominal_peak_tflops(point.device, point.precision))
        rows = min(budget.accuracy_rows, point.q_len_resolved)
        return float(predict_point_s(point, peak, budget.timing_s, rows, resolved)), resolved.compiles, columns
    except Exception:  # measure_point says what is wrong with the point; the limit falls back to max_point_s
        return None, False, columns


def _mapped_bytes() -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


@contextlib.contextmanager
def memory_limit(device: str, mem_fraction: float) -> Iterator[int | None]:
    """A CPU point: RLIMIT_AS at what is mapped now + mem_fraction x MemAvailable (yields it; None: no limit)."""
    try:
        import resource
    except ImportError:  # not a POSIX system: no limit
        yield None
        return
    from selfattn.measure.memory import free_bytes

    mapped, free = _mapped_bytes(), free_bytes("cpu")
    if not str(device).startswith("cpu") or mapped is None or free is None:
        yield None
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = int(mapped + mem_fraction * free)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield limit
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def serve(read_fd: int, write_fd: int) -> int:
    import torch

    from selfattn.measure import failures, measure_point
    from selfattn.measure.device import resolve_device

    torch.ones(64, 64) @ torch.ones(64, 64)  # the intra-op threads start now, not under a point's memory limit
    send(write_fd, ("ready",))
    while True:
        message = receive(read_fd)
        if message is None:
            return 0
        _, point, budget, metrics = message
        predicted_s, compiling, columns = predicted(point, budget)
        send(write_fd, ("predicted", predicted_s, compiling, columns))
        try:
            device = resolve_device(point.device)
        except Exception:  # measure_point says why
            device = str(point.device)
        try:
            with memory_limit(device, budget.mem_fraction) as limit_bytes:
                row = measure_point(point, budget, metrics)
        except SystemExit as exc:  # sys.exit inside the back end: a crash of the point, not of this process
            send(write_fd, ("exit", exc.code))
            continue
        if row.status == "oom" and limit_bytes is not None:
            row.error = (f"{row.error} (past the isolated process's memory limit of {limit_bytes / 2**30:.2f} GiB "
                         f"mapped: what it held before plus budget.mem_fraction={budget.mem_fraction:g} of the "
                         "memory available)")
        send(write_fd, ("row", row, failures.take_traceback()))


def main(argv: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    _die_with_parent()
    read_fd, write_fd = int(argv[0]), int(argv[1])
    return serve(read_fd, write_fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
