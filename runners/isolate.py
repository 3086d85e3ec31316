"""A point in a worker process with a time limit: a back end that exits, crashes or hangs costs one row.

`isolate` (a RunnerConf key) chooses which points run here: `plugins` (the default: a back end that is not
built in), `true` (every point) or `false` (none: everything in the sweep's own process, as before).
One long-lived worker per sweep process (`python -m runners.isolate_worker`, a fresh interpreter started
by exec, never a fork of this process, which holds torch's thread pools) imports torch once and serves
points one at a time over two pipes, so a point pays a round trip, not torch's import. The worker owns the
device for its points: this process never calls a back end or initialises CUDA for them.

The channel is built so that a plugin, which runs in the worker, cannot speak on it by accident, and carries
no pickle either way: requests are JSON (runners/isolate_request.py), answers are lines of JSON, each naming
a nonce fresh for its request and the point's id; a
row must pass the row schema (selfattn/row_check.py) and be of the point asked for; one answer per request,
nothing after it. Anything else (garbage, a forged row, an answer to another request) makes the point
`crashed` with what came, and the worker is replaced. The pipes reach the worker by the environment (not
argv) and sit above the low descriptor numbers, close-on-exec. A deliberately malicious plugin in the same
process can still read the nonce from memory: isolation contains mistakes, not an attacker (docs/plugins.md).

The worker leads a session of its own and is a child subreaper: whatever it starts, however it detaches
(a double fork, setsid), stays in its tree. After each point every process in that tree is one that
outlived its call (the point becomes an `error` row, the worker is replaced), and at a replacement and at
the sweep's end the tree and the whole group are killed.

What the worker's end says about the point (`Outcome`):
- a row: measure_point's, whatever its status (an allocation past the worker's memory limit is its `oom`);
- `timeout`: the limit passed (`limit_s`): the worker's group is killed and the worker replaced;
- `crashed`: the worker ended (os._exit, abort, a segfault, a SIGKILL: the exit code or the signal named),
  the back end raised SystemExit (sys.exit(n); the worker itself lives on), or the channel broke (above);
- `error`: the back end raised KeyboardInterrupt (its own: the worker ignores SIGINT), or left a process.
Ctrl-C and SIGTERM stay this process's (the worker ignores both): while it waits for the worker, the
signal's exception (runners/interrupts.py) kills the worker first, so the point in flight is discarded
as in-process, and the sweep ends in one line. The worker also dies with this process (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from selfattn.backends import description
from selfattn.backends.discovery import backend_source
from selfattn.measure.budget import Budget
from selfattn.measure.timing_options import TimingOptions
from selfattn.point import Point
from runners import isolate_request
from runners.isolate_worker import ENV_FDS
from selfattn.results import COLUMNS, Row
from selfattn.row_check import checked_row, row_problem

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
MAX_MESSAGE_BYTES = 64 * 2**20  # an answer is a row of a few KiB (its samples included): past this, garbage
POLL_S = 0.25  # how often a wait for the worker looks whether it is still alive


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
    """The worker's pipe closed, or the worker ended: it is gone."""


class ChannelBroken(Exception):
    """What came over the channel is no answer to the request in flight (the message says what it was)."""


class Worker:
    """One worker process, the leader of its own session, and its two pipes; `run` sends a point and waits for
    its answer within the limit."""

    def __init__(self, start_s: float = START_S) -> None:
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # The pipes' numbers in the environment, not argv (which every process on the machine can read);
        # the worker moves them high and close-on-exec, and removes the variable, before a plugin loads.
        env = {**{k: v for k, v in os.environ.items() if k != description.ENV_LIMIT},  # it imports plugins itself
               "PYTHONUNBUFFERED": "1", ENV_FDS: f"{to_child_r},{from_child_w}"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runners.isolate_worker"], pass_fds=(to_child_r, from_child_w),
            stdin=subprocess.DEVNULL, env=env, start_new_session=True)  # its own session: one group to kill
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer, self._closed = b"", False
        try:
            message = self._receive(time.monotonic() + start_s)
            if message.get("kind") != "ready":
                raise WorkerGone(f"the worker said {message.get('kind')!r} instead of ready")
        except BaseException:  # it did not start (or this process was interrupted meanwhile): no worker left
            self.kill()
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, point: Point, budget: Budget, metrics: Iterable[str], fixed_s: float | None = None,
            point_id: str = "", timing: TimingOptions | None = None) -> Outcome:
        """Measure `point` in the worker; a timeout, a crash or a broken channel is an Outcome (the worker
        killed where it cannot serve the next point), this process's signal is raised."""
        columns: dict[str, Any] = {}
        nonce = secrets.token_hex(16)
        point_id = point_id or point.point_id()
        limit = derive_limit_s(None, budget, fixed_s) + (0.0 if fixed_s is not None else SETUP_S)
        try:
            self._send(isolate_request.encode(nonce, point_id, point, budget, metrics, timing or TimingOptions()))
            deadline = time.monotonic() + limit
            message = self._answer(deadline, nonce, point_id)
            if message["kind"] == "predicted":  # the worker's prediction: the limit of the point itself starts now
                columns = _columns(message.get("columns"))
                predicted_s = message.get("predicted_s")
                if predicted_s is not None and not (isinstance(predicted_s, (int, float)) and predicted_s >= 0):
                    raise ChannelBroken(f"a prediction of {predicted_s!r} s")
                limit = derive_limit_s(predicted_s, budget, fixed_s, bool(message.get("compiling")))
                deadline = time.monotonic() + limit
                message = self._answer(deadline, nonce, point_id)
            outcome = self._outcome(message, point, columns)
            self._nothing_more()
        except TimeoutError:
            self.kill()
            return Outcome(status="timeout", columns=columns, error=(
                f"the point ran past its limit of {limit:.3g} s ({_limit_words(fixed_s)}); its process was "
                "stopped and replaced"))
        except WorkerGone:
            code = self.wait_briefly()
            self.kill()  # the group: whatever the worker started goes with it
            return Outcome(status="crashed", error=ended_reason(code) if code is not None else
                           "the back end's process closed its channel", columns=columns)
        except ChannelBroken as exc:
            self.kill()
            return Outcome(status="crashed", columns=columns, error=(
                f"the isolated process's answer was not the harness's: {exc}; something in it wrote to the "
                "harness's channel, so its process was stopped and replaced"))
        except BaseException:  # Ctrl-C, SIGTERM, a scheduler's stop: the point in flight goes with the worker
            self.kill()
            raise
        left = [pid for pid in descendants(self.pid) if not _torch_compile_worker(pid)]
        if left:  # a fork that outlived its call: it would run beside the next points and hold the channel
            self.kill()
            return Outcome(status="error", columns=columns,
                           error=(f"the back end left {len(left)} process(es) running after its call "
                                  f"(pid {', '.join(map(str, left[:5]))}); they were killed with the isolated "
                                  "process, which was replaced"))
        return outcome

    def _outcome(self, message: dict[str, Any], point: Point, columns: dict[str, Any]) -> Outcome:
        kind = message["kind"]
        if message.get("replace"):  # a change of global state this process cannot undo: a fresh worker next
            self.kill()
        if kind == "row":
            values = message.get("row")
            problem = row_problem(values, strict=True)
            if problem is None and isinstance(values, dict):
                problem = _identity_problem(values, point)
            if problem is not None or not isinstance(values, dict):
                raise ChannelBroken(f"its row {problem or 'is not an object'}")
            row = checked_row(values)
            if message.get("state"):
                row.note = "; ".join(filter(None, (row.note, str(message["state"]))))
            return Outcome(row=row, traceback=str(message.get("traceback") or ""))
        if kind == "exit":  # SystemExit inside the back end: the worker caught it and lives on
            return Outcome(status="crashed", error=exit_reason(message.get("code")), columns=columns)
        if kind == "raised":  # KeyboardInterrupt or another BaseException of the back end's own
            return Outcome(status="error", columns=columns,
                           error=f"the back end raised {str(message.get('what'))[:500]}")
        if kind == "refused":  # the request failed the worker's field checks (a bug of the harness's: said whole)
            return Outcome(status="error", columns=columns,
                           error=f"the isolated process refused the request: {str(message.get('what'))[:500]}")
        raise ChannelBroken(f"a message of kind {kind!r}")

    def stop(self, wait_s: float = 5.0) -> None:
        """Close its pipes (it exits between points), then kill its process group and what was below it."""
        below = descendants(self.pid) if self.alive() else []  # once it exits, its orphans go to init
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
            pass
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.kill()

    def kill(self) -> None:
        """SIGKILL the worker's whole process group and anything else in its session, then reap the worker."""
        for _ in range(3):  # a member forking while it is killed: look again
            members = descendants(self.pid)
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            for pid in members:  # a member that made a group of its own (setpgid) but stayed in the session
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            if not members:
                break
        if self.alive():
            self.proc.kill()
        self.wait()

    def wait(self) -> int:
        return self.proc.wait()

    def wait_briefly(self, wait_s: float = 2.0) -> int | None:
        try:
            return self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            return None

    def _send(self, framed: bytes) -> None:
        try:
            _write_all(self._to_child, framed)
        except (BrokenPipeError, OSError) as exc:
            raise WorkerGone(str(exc)) from exc

    def _answer(self, deadline: float, nonce: str, point_id: str) -> dict[str, Any]:
        """The next message, which must answer this request (its nonce and point id)."""
        message = self._receive(deadline)
        if message.get("nonce") != nonce or message.get("point_id") != point_id:
            raise ChannelBroken(f"a message for another request (kind {str(message.get('kind'))[:40]!r}, "
                                f"point {str(message.get('point_id'))[:80]!r}, not {point_id!r} with this request's nonce)")
        return message

    def _receive(self, deadline: float) -> dict[str, Any]:
        """The next line of JSON from the worker, as a mapping: never unpickled, never evaluated."""
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line, self._buffer = self._buffer[:end], self._buffer[end + 1:]
                try:
                    message = json.loads(line)
                except ValueError:
                    raise ChannelBroken(f"{len(line)} bytes that are no JSON ({line[:40]!r})") from None
                if not isinstance(message, dict) or not isinstance(message.get("kind"), str):
                    raise ChannelBroken(f"JSON that is no message ({line[:40]!r})")
                return message
            if len(self._buffer) > MAX_MESSAGE_BYTES:
                raise ChannelBroken(f"more than {MAX_MESSAGE_BYTES} bytes without a line's end")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            # in slices: a worker that died while something it forked holds the pipe open is seen at once
            ready, _, _ = select.select([self._from_child], [], [], min(left, POLL_S))
            if not ready:
                if not self.alive():
                    raise WorkerGone("it ended")
                continue
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise WorkerGone("its pipe closed")
            self._buffer += chunk

    def _nothing_more(self) -> None:
        """After the answer, the channel must be empty: a second answer is a forged one (or the real one behind a
        forgery), and left there it would be taken as the next point's."""
        ready, _, _ = select.select([self._from_child], [], [], 0)
        if ready:
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                return  # the worker ended after answering: the next point starts another
            self._buffer += chunk
        if self._buffer:
            raise ChannelBroken(f"{len(self._buffer)} more bytes after its answer ({self._buffer[:40]!r})")


def _columns(values: Any) -> dict[str, Any]:
    """The worker's columns for a row it may not finish: Row's columns, plain values, or ChannelBroken."""
    if not isinstance(values, dict):
        raise ChannelBroken(f"columns that are no mapping ({type(values).__name__})")
    problem = row_problem({**values, "status": "crashed"})
    if problem is not None or not set(values) <= set(COLUMNS):
        raise ChannelBroken(f"its columns: {problem or 'a column the row schema does not have'}")
    return values


def _identity_problem(row: dict[str, Any], point: Point) -> str | None:
    """Whether the row is of this point: its back end and sizes (the nonce and point id named the request)."""
    expected = point.columns()
    for name in ("backend", "batch", "heads", "seq_len", "head_dim"):
        if row.get(name) not in (None, "") and expected.get(name) is not None and row[name] != expected[name]:
            return f"names {name}={row[name]!r}, but the point has {expected[name]!r}"
    return None


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (the worker, a child subreaper: an orphan of its tree, a daemon that
    forked twice or called setsid included, becomes its child). Read from /proc/<pid>/task/*/children, a few
    small files; where the kernel has none of them (no CONFIG_PROC_CHILDREN), its session scan."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        children: set[int] = set()
        readable = False
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children", "rb") as f:
                    children.update(int(c) for c in f.read().split())
                readable = True
            except (OSError, ValueError):
                continue
        if not readable and parent == pid:
            return [member for member in session_members(pid) if member != pid]
        for child in sorted(children - set(found)):
            if _state(child) in (b"Z", b"X", None):  # ended, not yet reaped (or gone): nothing runs
                continue
            found.append(child)
            todo.append(child)
    return found


def _state(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2:].split()[0]


def session_members(leader: int) -> list[int]:
    """Live processes in `leader`'s session or process group, or its children (Linux's /proc; [] elsewhere)."""
    members: list[int] = []
    if leader <= 0:  # no process: never "every process" (0 and -1 mean that to kill)
        return members
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        state, ppid, pgrp, session = fields[0], int(fields[1]), int(fields[2]), int(fields[3])
        if state in (b"Z", b"X"):  # ended, not yet reaped: nothing runs
            continue
        pid = int(entry)
        if pid == leader or leader in (session, pgrp, ppid) and not _torch_compile_worker(pid):
            members.append(pid)
    return members


def _torch_compile_worker(pid: int) -> bool:
    """torch.compile's pool of compile processes (inductor's), which the worker's torch keeps between points."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return False
    return b"_inductor" in cmdline and b"compile_worker" in cmdline


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


def run_isolated(point: Point, budget: Budget, metrics: Iterable[str], fixed_s: float | None = None,
                 point_id: str = "", timing: TimingOptions | None = None) -> Outcome:
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
    outcome = _worker.run(point, budget, metrics, fixed_s, point_id, timing)
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


def kill_worker_now() -> None:
    """Kill this process's worker group at once (from the signal watcher, while the main thread is stuck)."""
    worker = _worker
    if worker is not None:
        for pid in descendants(worker.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.killpg(worker.pid, signal.SIGKILL)
        except OSError:
            pass


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
