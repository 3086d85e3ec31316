"""A point in a worker process with a time limit: a back end that exits, crashes or hangs costs one row.

`isolate` (a RunnerConf key) chooses which points run here: `plugins` (the default: a back end that is not
built in), `true` (every point) or `false` (none: everything in the sweep's own process, as before).
One long-lived worker per sweep process (`python -m runners.isolate_worker`, a fresh interpreter started
by exec, never a fork of this process, which holds torch's thread pools) imports torch once and serves
points one at a time over two pipes, so a point pays a pickled round trip, not torch's import. The worker
owns the device for its points: this process never calls a back end or initialises CUDA for them.

What the worker's end says about the point (`Outcome`):
- a row: measure_point's, whatever its status (an allocation past the worker's memory limit is its `oom`);
- `timeout`: the limit passed (`limit_s`): the worker is killed by its PID and replaced for the next point;
- `crashed`: the worker ended (os._exit, abort, a segfault, a SIGKILL: the exit code or the signal named),
  or the back end raised SystemExit (sys.exit(n); the worker itself lives on).
Ctrl-C and SIGTERM stay this process's (the worker ignores both): while it waits for the worker, the
signal's exception (runners/interrupts.py) kills the worker first, so the point in flight is discarded
as in-process, and the sweep ends in one line. The worker also dies with this process (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from selfattn.backends.discovery import backend_source
from selfattn.measure.budget import Budget
from selfattn.point import Point
from selfattn.results import Row

ISOLATE_CHOICES = (True, False, "plugins")
# The limit, when not set (isolate_limit_s: null): SLACK times the point's predicted seconds, at least
# MIN_LIMIT_S, at most budget.max_point_s (which no point may be predicted past, and whose warm-up check
# skips a point measured to need more), plus GRACE_S for what the prediction leaves out (the accuracy,
# stability and permutation passes, a loaded machine's scheduling) and, for a compiled back end,
# budget.max_compile_s. The predictions are optimistic by design (selfattn/measure/predict.py), so SLACK is
# wide: a point 10x slower than predicted still finishes, and a 120 s sleep under max_point_s=60 is cut
# after at most 75 s, not after its whole call.
SLACK = 10.0
MIN_LIMIT_S = 10.0
GRACE_S = 15.0
# Before the worker has predicted the point (loading the plugin, the device's peak, measured once per
# process): max_point_s plus this.
SETUP_S = 60.0
START_S = 180.0  # a worker's start: Python, torch and the harness imported on a loaded machine
_HEADER = struct.Struct("!Q")


def parse_isolate(value: Any) -> bool | str:
    """`isolate`'s rule: true, false or plugins (text forms too); else ValueError naming the key."""
    text = str(value).strip().lower() if not isinstance(value, bool) else value
    forms: dict[str | bool, bool | str] = {"true": True, "false": False, "plugins": "plugins", True: True, False: False}
    canonical = forms.get(text)
    if canonical is None:
        raise ValueError(f"isolate: expected true, false or plugins, got {value!r}")
    return canonical


def isolated(point: Point, isolate: bool | str) -> bool:
    """Whether `point` runs in the worker under `isolate` (plugins: a back end that is not built in)."""
    if isolate == "plugins":
        return backend_source(str(point.backend)) != "builtin"
    return bool(isolate)


def derive_limit_s(predicted_s: float | None, budget: Budget, fixed_s: float | None = None,
                   compiling: bool = False) -> float:
    """The point's time limit in seconds from its predicted seconds and the budget (see SLACK), or `fixed_s`."""
    if fixed_s is not None:
        return float(fixed_s)
    base = budget.max_point_s if predicted_s is None else min(budget.max_point_s,
                                                              max(MIN_LIMIT_S, SLACK * predicted_s))
    return base + GRACE_S + (budget.max_compile_s if compiling else 0.0)


@dataclass
class Outcome:
    """What came back for one point: the worker's row, or the status and reason of a point it did not finish."""

    row: Row | None = None
    status: str = ""  # timeout | crashed, when row is None
    error: str = ""
    traceback: str = ""  # an `error` row's full traceback, from the worker
    columns: dict[str, Any] = field(default_factory=dict)  # what the worker knew before it failed: environment, kernel


def ended_reason(returncode: int) -> str:
    """One line naming how the back end's process ended (a signal by its name)."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        hint = " (the system's out-of-memory killer sends it too)" if -returncode == signal.SIGKILL else ""
        return f"the back end's process ended with {name}{hint}"
    return f"the back end's process ended with exit code {returncode}"


class WorkerGone(Exception):
    """The worker's pipe closed: it ended."""


class Worker:
    """One worker process and its two pipes; `run` sends a point and waits for its outcome within the limit."""

    def __init__(self, start_s: float = START_S) -> None:
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runners.isolate_worker", str(to_child_r), str(from_child_w)],
            pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL, env=env)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer, self._closed = b"", False
        try:
            kind, *_ = self._receive(time.monotonic() + start_s)
            if kind != "ready":
                raise WorkerGone(f"the worker said {kind!r} instead of ready")
        except BaseException:  # it did not start (or this process was interrupted meanwhile): no worker left
            self.kill()
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, point: Point, budget: Budget, metrics: Iterable[str], fixed_s: float | None = None) -> Outcome:
        """Measure `point` in the worker; a timeout or a crash is an Outcome, this process's signal is raised."""
        columns: dict[str, Any] = {}
        try:
            self._send(("point", point, budget, tuple(metrics)))
            limit = derive_limit_s(None, budget, fixed_s) + (0.0 if fixed_s is not None else SETUP_S)
            deadline = time.monotonic() + limit
            message = self._receive(deadline)
            if message[0] == "predicted":  # the worker's prediction: the limit of the point itself starts now
                _, predicted_s, compiling, columns = message
                limit = derive_limit_s(predicted_s, budget, fixed_s, compiling)
                deadline = time.monotonic() + limit
                message = self._receive(deadline)
        except TimeoutError:
            self.kill()
            return Outcome(status="timeout", columns=columns, error=(
                f"the point ran past its limit of {limit:.3g} s ({_limit_words(fixed_s)}); its process was "
                "stopped and replaced"))
        except WorkerGone:
            return Outcome(status="crashed", error=ended_reason(self.wait()), columns=columns)
        except BaseException:  # Ctrl-C, SIGTERM, a scheduler's stop: the point in flight goes with the worker
            self.kill()
            raise
        kind = message[0]
        if kind == "row":
            return Outcome(row=message[1], traceback=message[2])
        if kind == "exit":  # SystemExit inside the back end: the worker caught it and lives on
            return Outcome(status="crashed", error=exit_reason(message[1]), columns=columns)
        self.kill()
        return Outcome(status="error", error=f"the worker sent {kind!r}")

    def stop(self, wait_s: float = 5.0) -> None:
        """Close its pipes (it exits between points), then kill it by its PID if it has not."""
        if not self._closed:  # once: a closed descriptor's number may already be another file's
            self._closed = True
            for fd in (self._to_child, self._from_child):
                try:
                    os.close(fd)
                except OSError:
                    pass
        try:
            self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()  # by its PID
        self.wait()

    def wait(self) -> int:
        return self.proc.wait()

    def _send(self, message: Any) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            _write_all(self._to_child, _HEADER.pack(len(data)) + data)
        except (BrokenPipeError, OSError) as exc:
            raise WorkerGone(str(exc)) from exc

    def _receive(self, deadline: float) -> tuple:
        while True:
            if len(self._buffer) >= _HEADER.size:
                (size,) = _HEADER.unpack_from(self._buffer)
                if len(self._buffer) >= _HEADER.size + size:
                    data = self._buffer[_HEADER.size:_HEADER.size + size]
                    self._buffer = self._buffer[_HEADER.size + size:]
                    return pickle.loads(data)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self._from_child], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise WorkerGone("its pipe closed")
            self._buffer += chunk


def exit_reason(code: Any) -> str:
    return f"the back end called sys.exit({code!r})"


def _limit_words(fixed_s: float | None) -> str:
    if fixed_s is not None:
        return "isolate_limit_s"
    return (f"{SLACK:g}x its predicted time, within [{MIN_LIMIT_S:g} s, budget.max_point_s], "
            f"+ {GRACE_S:g} s; isolate_limit_s sets it")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


_worker: Worker | None = None


def run_isolated(point: Point, budget: Budget, metrics: Iterable[str], fixed_s: float | None = None) -> Outcome:
    """`point` in this process's worker (started on first use, and again after one ended)."""
    global _worker
    _forget_ended_worker()
    if _worker is None:
        _release_parent_device(point)
        try:
            _worker = Worker()
        except (WorkerGone, TimeoutError, OSError) as exc:
            _worker = None
            return Outcome(status="error", error=f"the isolated worker did not start: {exc or type(exc).__name__}")
    outcome = _worker.run(point, budget, metrics, fixed_s)
    _forget_ended_worker()
    return outcome


def _forget_ended_worker() -> None:
    global _worker
    if _worker is not None and not _worker.alive():
        _worker.stop()  # its pipes closed; the process already reaped
        _worker = None


def stop_worker() -> None:
    """Stop this process's worker, if any (at exit; a test between sweeps)."""
    global _worker
    if _worker is not None:
        _worker.stop()
        _worker = None


def worker_pid() -> int | None:
    return _worker.pid if _worker is not None and _worker.alive() else None


def _release_parent_device(point: Point) -> None:
    """Memory this process's in-process points left in torch's CUDA cache is given back before a worker
    that owns the device starts (the cache would be the worker's missing free memory)."""
    torch = sys.modules.get("torch")
    if torch is not None and str(point.device).startswith("cuda") and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


atexit.register(stop_worker)


def unfinished_row(point: Point, outcome: Outcome) -> Row:
    """The row of a point whose measurement did not finish (timeout, crashed): its validated columns, what
    the worker told of its device and kernel, and why."""
    row = Row(status=outcome.status, error=outcome.error)
    for name, value in {**point.columns(), **outcome.columns}.items():
        if hasattr(row, name):
            setattr(row, name, value)
    return row
