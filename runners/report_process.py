"""The report at a multirun's end, written by its own process within a time limit.

The sweep's process holds torch's thread pools and wandb's threads, and its memory: the report runs as its own
command, `python -m analysis.report RESULTS --out DIR`, in a fresh interpreter (started by exec: nothing of this
process comes with it but the environment), in a session of its own so that anything it starts shares its
process group. This process waits for it up to a limit (the `report_timeout_s` key; by default
`default_timeout_s` of the rows' count); past it the whole group is killed by the child's PID (its process
group id), one line says the exact command that writes the report, and the sweep goes on as if no report had
been asked for: the report only reads results.csv, so the rows and the CSV are as they were.

The report's own lines ("report: ... (N of M figures ...)", its warnings) come from the child on the same
terminal. wandb's report run (analysis.wandb_report) reads report.md and its figures from the files written,
so it needs nothing from the child but those files.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import runners

# The limit's default: a fixed part for the child's start (Python and the analysis's imports: 6 s on the project's
# 2-core CPU under a load of 25) and the figures' fixed cost, plus a part per row (the fits and the figures grow
# with the rows). The default sweep's report (219 rows) took 10-28 s there, loaded; the default gives it 230 s:
# a limit meant to catch a hang, never a slow machine.
TIMEOUT_BASE_S = 120.0
TIMEOUT_PER_ROW_S = 0.5
REPORT_MODULE = "analysis.report"  # the command the child runs, and the one a user reruns


def default_timeout_s(rows: int) -> float:
    """The report's time limit for a sweep of `rows` rows when `report_timeout_s` is null."""
    return TIMEOUT_BASE_S + TIMEOUT_PER_ROW_S * max(0, rows)


def timeout_s(configured: float | None, rows: int) -> float:
    """The limit in force: the `report_timeout_s` key when set, else default_timeout_s(rows)."""
    return float(configured) if configured is not None else default_timeout_s(rows)


def rerun_command(csv_path: Path, out_dir: Path) -> str:
    """The command that writes this report (what the child ran), as a user types it."""
    return shlex.join(["python", "-m", REPORT_MODULE, str(csv_path), "--out", str(out_dir)])


def _child_env() -> dict[str, str]:
    """This process's environment, with the folder holding runners/ (and analysis/ beside it: a checkout, or
    site-packages) first on PYTHONPATH, so the child imports the same code from any working folder."""
    env = dict(os.environ)
    root = str(Path(runners.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([root, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env


def _kill(child: subprocess.Popen) -> None:
    """Kill the report and anything it started: the process group whose id is the child's PID (a session of
    its own), where the platform has groups; else the child alone."""
    try:
        if hasattr(os, "killpg"):
            os.killpg(child.pid, signal.SIGKILL)
        else:
            child.kill()
    except ProcessLookupError:  # it ended just now
        pass
    child.wait()


def write_report(csv_path: Path, out_dir: Path, *, limit_s: float) -> Path | None:
    """Write the report of `csv_path` into `out_dir` in a child process within `limit_s` seconds; returns
    report.md when the child wrote it, else None after one line on stderr saying why and how to rerun it."""
    csv_path, out_dir = Path(csv_path), Path(out_dir)
    rerun = rerun_command(csv_path, out_dir)
    command = [sys.executable, "-m", REPORT_MODULE, str(csv_path), "--out", str(out_dir)]
    sys.stdout.flush()  # what this process printed comes before the child's lines
    sys.stderr.flush()
    started_ns = time.time_ns()
    try:
        child = subprocess.Popen(command, env=_child_env(), stdin=subprocess.DEVNULL,
                                 start_new_session=hasattr(os, "setsid"))
    except OSError as exc:  # no process can be started (a limit on processes or memory)
        print(f"warning: no report (it could not be started: {exc}); results.csv is complete: `{rerun}` writes "
              "it", file=sys.stderr, flush=True)
        return None
    try:
        code = child.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
        _kill(child)
        print(f"warning: the report did not finish within report_timeout_s={limit_s:g} s and was stopped; "
              f"results.csv is complete: `{rerun}` writes it", file=sys.stderr, flush=True)
        return None
    except BaseException:  # Ctrl-C or SIGTERM (runners/interrupts.py): the report goes with the sweep
        _kill(child)
        raise
    report_md = out_dir / "report.md"
    try:
        written = report_md.stat().st_mtime_ns >= started_ns - 2_000_000_000  # this run's, not an older one's
    except OSError:
        written = False
    if not written:
        print(f"warning: no report (`python -m {REPORT_MODULE}` exited with status {code}); results.csv is "
              f"complete: `{rerun}` writes it once the cause is fixed", file=sys.stderr, flush=True)
        return None
    if code != 0:  # report.md written, but the report says it failed: no figure its rows call for was drawn
        print(f"warning: the report drew none of the figures its rows call for (its lines above say which and why); "
              f"results.csv is complete: `{rerun}` writes them once the cause is fixed", file=sys.stderr, flush=True)
    return report_md
