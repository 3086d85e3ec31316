"""Ctrl-C and SIGTERM end a sweep in one line: the point in flight is discarded or written whole.

`run(main, argv)` installs a handler for SIGINT and SIGTERM that raises `Interrupted` (a
BaseException, which no measuring code catches) wherever the process is, except while a job
records its row (`hold()` to `release()`): there the signal waits until the row file, its index entry and
results.csv are written, so a row is never half there; and while the launcher composes a job's config (an
interrupt raised inside OmegaConf can leave it half set and surface as another error). Every file is replaced whole anyway
(runners/row_store.py), so a point cut short leaves nothing, and the rerun measures it.
Then: results.csv is built from the rows there are, one line says how far the sweep got and the
command that resumes it, and the exit status is 128 + the signal's number (130, 143), no traceback.
The jobs tell this module how far the sweep is (`sweep_started`, `job_done`): same process.
Before that, while torch and Hydra import, `before_run()` (runners/sweep.py's first call) makes a signal
one line too ("interrupted before the first point; nothing was measured").
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived; `signum` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class _State:
    guarded: int = 0  # > 0 while a row is being recorded, or while the launcher composes a job
    composing: bool = False  # the launcher composes a job: a plugin's import may hang there (the watcher ends it)
    pending: int | None = None  # a signal that arrived meanwhile
    done: int = 0  # jobs finished in this process (measured, refused or already measured)
    total: int | None = None
    sweep_dir: Path | None = None


STATE = _State()


def _on_signal(signum: int, frame: Any) -> None:
    if STATE.guarded:
        STATE.pending = signum
        return
    raise Interrupted(signum)


def hold(composing: bool = False) -> None:
    """From now until `release()`, a signal waits (a job recording its row; `composing`: the launcher composing a
    job, where the wait is at most COMPOSING_GRACE_S: see `_watch`)."""
    STATE.guarded = 1
    STATE.composing = composing


def release() -> None:
    """Signals act at once again; one that arrived meanwhile is raised by `raise_pending()`."""
    STATE.guarded = 0
    STATE.composing = False


def raise_pending() -> None:
    if not STATE.guarded and STATE.pending is not None:
        signum, STATE.pending = STATE.pending, None
        raise Interrupted(signum)


def sweep_started(sweep_dir: Path, total: int | None) -> None:
    STATE.sweep_dir, STATE.total, STATE.done = Path(sweep_dir), total, 0


def job_done() -> None:
    STATE.done += 1


def resume_command(argv: Sequence[str], sweep_dir: Path | None) -> str:
    """The command that carries on: the same arguments, and the sweep's folder when Hydra named it
    by the clock (`${now:...}`), else a rerun would start a new folder and measure everything again."""
    args = list(argv)
    if sweep_dir is not None and not any(a.startswith(("hydra.sweep.dir=", "++hydra.sweep.dir=")) for a in args):
        args.append(f"hydra.sweep.dir={sweep_dir}")
    return shlex.join(["python", "-m", "runners.sweep", *args])


def summary(signum: int, argv: Sequence[str]) -> str:
    """The one line an interrupted run prints."""
    if STATE.sweep_dir is None:  # a single run, or before the sweep started
        return "interrupted; nothing half-written was kept (the same command measures the point)"
    total = STATE.total if STATE.total is not None else "?"
    return (f"interrupted after {STATE.done} of {total} points; the same command resumes: "
            f"{resume_command(argv, STATE.sweep_dir)}")


def _rebuild_csv() -> None:
    """results.csv from every row there is (a sweep's end would have built it)."""
    if STATE.sweep_dir is None or not STATE.sweep_dir.is_dir():
        return
    from runners import rows

    try:
        rows.rebuild_final(STATE.sweep_dir)  # in the room set aside at the start, should the disk be full
    except OSError as exc:  # the rows are intact; `python -m runners.rows DIR` builds it later
        print(f"results: not rebuilt ({exc.strerror or exc})", file=sys.stderr)


def _before_run(signum: int, frame: Any) -> None:
    # nothing has started: no row, no folder; os._exit, since SystemExit raised inside an import could be
    # caught there (a plugin's import failure is caught whole: selfattn/backends/registry.py)
    try:
        sys.stdout.flush()
    except (OSError, RuntimeError):  # a write the signal cut short
        pass
    os.write(2, b"interrupted before the first point; nothing was measured\n")
    os._exit(128 + int(signum))


def before_run() -> None:
    """Until `run`: SIGINT/SIGTERM end the process with one line and 128 + the signal, not a KeyboardInterrupt
    traceback from inside torch's or Hydra's imports (seconds, the moment a mistyped command is cancelled)."""
    for sig in SIGNALS:
        signal.signal(sig, _before_run)


# While the launcher composes a job, a signal waits for the composition to end (an interrupt raised inside
# OmegaConf leaves its config half set), but at most this long: composition imports plugin modules, and one
# whose import hangs (in C code, or past its limit) would hold the signal for ever. Past it, `_watch` ends the
# process from its own thread: every row file is whole (none is being written while composing).
COMPOSING_GRACE_S = 0.5
_watching: list[int] = []  # the wakeup pipe's read end, once the watcher runs


def _watch(read_fd: int, argv: Sequence[str]) -> None:
    """The watcher thread: Python's C-level handler writes each signal's number to the wakeup pipe even while
    the main thread is stuck in C code, where the Python-level handler cannot run."""
    while True:
        try:
            received = os.read(read_fd, 64)
        except OSError:
            return
        for signum in received:
            if signum not in SIGNALS or not STATE.composing:
                continue
            deadline = time.monotonic() + COMPOSING_GRACE_S
            while STATE.composing and time.monotonic() < deadline:
                time.sleep(0.01)
            if STATE.composing:  # still composing: the main thread cannot take the signal; end it from here
                _end_from_watcher(signum, argv)


def _end_from_watcher(signum: int, argv: Sequence[str]) -> None:
    from runners import isolate

    isolate.kill_worker_now()
    _rebuild_csv()
    os.write(2, (summary(signum, argv) + "\n").encode())
    os._exit(128 + int(signum))


def _start_watcher(argv: Sequence[str]) -> None:
    if _watching:
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    _watching.append(read_fd)
    threading.Thread(target=_watch, args=(read_fd, list(argv)), name="signal watcher", daemon=True).start()


def run(main: Callable[[], Any], argv: Sequence[str]) -> None:
    """Call `main` with the handlers installed; on SIGINT/SIGTERM: results.csv, one line, exit 128 + signal."""
    for sig in SIGNALS:
        signal.signal(sig, _on_signal)
    _start_watcher(argv)
    try:
        main()
    except (Interrupted, KeyboardInterrupt) as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        for sig in SIGNALS:  # a second Ctrl-C while tidying up must not leave a traceback either
            signal.signal(sig, signal.SIG_IGN)
        _rebuild_csv()
        sys.stdout.flush()
        print(summary(signum, argv), file=sys.stderr, flush=True)
        sys.exit(128 + int(signum))
