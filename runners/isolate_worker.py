"""The isolated worker's process: `python -m runners.isolate_worker` (runners/isolate.py starts it).

It imports torch and the harness once, says ready, then serves points one at a time: for each, it first
sends the point's predicted seconds (the parent's limit derives from them), then measure_point's row. A
CPU point runs under an address-space limit of what the process maps now plus budget.mem_fraction of the
memory available, the cgroup's limit included (the share the budget guard lets a point be predicted to use),
so a back end that allocates without end gets a failed allocation, hence measure_point's `oom` row, and this
process lives on; the limit is lifted after the point. Not on CUDA: its driver reserves a huge address range
up front, and the device's own memory is the caching allocator's, whose failures are `oom` rows already.
SIGINT and SIGTERM are ignored: the sweep's process decides, and kills this one's process group.

The channel (runners/isolate.py says why it is shaped so): requests arrive as JSON (runners/isolate_request.py:
Point and Budget as field mappings, rebuilt here through the same field checks a config passes; one that fails
them is refused with the reason); answers leave as one line of JSON each, naming the request's nonce and point
id. Nothing on the channel is a pickle, in either direction. The pipes' numbers come in the environment
(ENV_FDS, removed from it at once), not in argv, and are moved to high numbers, close-on-exec, before any
plugin is imported.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import sys
from typing import Any, Iterator

from runners.isolate_request import HEADER, MAX_REQUEST_BYTES, decode, identity

ENV_FDS = "SELFATTN_ISOLATE_FDS"  # "READ_FD,WRITE_FD": the pipes this process was given


def _read_exactly(fd: int, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def receive(fd: int) -> bytes | None:
    """The next request's JSON, or None when the parent closed its end (or sent a length past any request's)."""
    header = _read_exactly(fd, HEADER.size)
    if header is None or HEADER.unpack(header)[0] > MAX_REQUEST_BYTES:
        return None
    return _read_exactly(fd, HEADER.unpack(header)[0])


def send(fd: int, message: dict[str, Any]) -> None:
    """One answer: a line of JSON (no newline inside: json.dumps escapes it)."""
    data = json.dumps(message, default=str).encode() + b"\n"
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _moved_high(fd: int) -> int:
    """`fd` as a close-on-exec descriptor above the low numbers (runners/point_state.high_fd); the old closed."""
    from runners.point_state import high_fd

    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, high_fd())
    os.close(fd)
    return moved


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the sweep's process ends, however it ends (even by SIGKILL); and make it
    a child subreaper, so that every process a plugin starts stays below it, however it detaches (the sweep
    looks there after each point: runners/isolate.py's `descendants`)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        libc.prctl(36, 1)  # PR_SET_CHILD_SUBREAPER = 36
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
        from selfattn.scopes import SCOPES
        from selfattn.measure.device import device_peak_tflops, environment, resolve_device
        from selfattn.measure.predict import nominal_peak_tflops, predict_point_s
        from selfattn.precision import precision_context

        point = point.with_device(resolve_device(point.device))
        if point.device == "cpu" or torch.cuda.is_available():
            columns.update(environment(point.device))
        point.validate()
        if SCOPES[point.scope].trains:  # its own loop, no timed call to predict
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
    """What this process has mapped now (VmSize), the base its address-space limit is set above."""
    from selfattn.host_memory import proc_kib_field

    return proc_kib_field("/proc/self/status", "VmSize:")


@contextlib.contextmanager
def memory_limit(device: str, mem_fraction: float) -> Iterator[int | None]:
    """A CPU point: RLIMIT_AS at what is mapped now + mem_fraction x the memory available to this process
    (MemAvailable, or the cgroup's room where that is less: runners/cgroup_memory.py); yields it (None: no limit)."""
    try:
        import resource
    except ImportError:  # not a POSIX system: no limit
        yield None
        return
    from runners.cgroup_memory import available_bytes

    mapped, free = _mapped_bytes(), available_bytes()
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

    from runners import point_state
    from selfattn.measure import failures, measure_point
    from selfattn.measure.device import resolve_device

    torch.ones(64, 64) @ torch.ones(64, 64)  # the intra-op threads start now, not under a point's memory limit
    send(write_fd, {"kind": "ready"})
    while True:
        data = receive(read_fd)
        if data is None:
            return 0
        try:
            nonce, point_id = identity(data)
        except ValueError:  # no request to answer: the sweep sees the worker end (`crashed`)
            return 1
        said = {"nonce": nonce, "point_id": point_id}
        try:
            request = decode(data)
        except ValueError as exc:
            send(write_fd, {"kind": "refused", **said, "what": _first_line(exc)})
            continue
        point, budget, metrics, timing = request.point, request.budget, request.metrics, request.timing
        changes = point_state.Changes()
        answer: dict[str, Any]
        with point_state.kept(changes):  # torch's global state, the RNGs and fds 0-2 as they were, after the point
            threads = torch.get_num_threads()
            try:
                predicted_s, compiling, columns = predicted(point, budget)  # imports the plugin's module
                send(write_fd, {"kind": "predicted", **said, "predicted_s": predicted_s, "compiling": compiling,
                                "columns": columns})
                try:
                    device = resolve_device(point.device)
                except Exception:  # measure_point says why
                    device = str(point.device)
                with memory_limit(device, budget.mem_fraction) as limit_bytes:
                    row = measure_point(point, budget, metrics, timing)
            except SystemExit as exc:  # sys.exit inside the back end: a crash of the point, not of this process
                answer = {"kind": "exit", **said, "code": exc.code if isinstance(exc.code, (int, str, type(None))) else repr(exc.code)}
            except BaseException as exc:  # KeyboardInterrupt (SIGINT is ignored here, so the plugin's own): its row
                answer = {"kind": "raised", **said, "what": f"{type(exc).__name__}: {_first_line(exc)}"}
            else:
                if row.status == "oom" and limit_bytes is not None:
                    row.error = (f"{row.error} (past the isolated process's memory limit of {limit_bytes / 2**30:.2f} "
                                 f"GiB mapped: what it held before plus budget.mem_fraction={budget.mem_fraction:g} "
                                 "of the memory available)")
                if torch.get_num_threads() != threads and row.num_threads is not None:
                    row.num_threads = torch.get_num_threads()  # the back end changed it: what its timed calls ran on
                answer = {"kind": "row", **said, "row": row.to_dict(), "traceback": failures.take_traceback()}
        if changes.restored or changes.unrestorable:
            answer["state"] = changes.note()
            answer["replace"] = bool(changes.unrestorable)
        send(write_fd, answer)


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else ""


def main(argv: list[str]) -> int:
    os.environ.pop("SELFATTN_PLUGIN_DESCRIBE_S", None)  # plugins imported here: the point's time limit stops a hang
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    _die_with_parent()
    read_fd, write_fd = (_moved_high(int(fd)) for fd in os.environ.pop(ENV_FDS).split(","))
    return serve(read_fd, write_fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
