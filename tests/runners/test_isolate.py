"""The isolated worker without a sweep: its limit's derivation, its selection, a restart after a crash, a
limit cut near its value, and a signal that stops it (runners/isolate.py)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from runners import isolate
from runners.interrupts import Interrupted
from selfattn.measure.budget import Budget
from selfattn.point import Point

HERE = Path(__file__).resolve().parent
BUDGET = Budget(timing_s=0.01, accuracy_rows=4, measure_device_peak=False)


def point(name: str) -> Point:
    return Point(backend=f"misbehaving:{name}", seq_len=32, heads=1, head_dim=8, device="cpu")


@pytest.fixture
def worker_env(monkeypatch):
    """The worker imports the plugins from this folder; each test ends with no worker left."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE.parents[1]), str(HERE)]))
    yield
    isolate.stop_worker()


def test_the_limit_derives_from_the_prediction_within_max_point_s():
    budget = Budget(max_point_s=60.0, max_compile_s=120.0)
    grace = isolate.GRACE_S
    assert isolate.derive_limit_s(None, budget) == 60.0 + grace  # no prediction: max_point_s
    assert isolate.derive_limit_s(0.01, budget) == isolate.MIN_LIMIT_S + grace  # a tiny point: the floor
    assert isolate.derive_limit_s(2.0, budget) == isolate.SLACK * 2.0 + grace
    assert isolate.derive_limit_s(30.0, budget) == 60.0 + grace  # never past max_point_s: a 120 s sleep is cut
    assert isolate.derive_limit_s(2.0, budget, compiling=True) == isolate.SLACK * 2.0 + grace + 120.0
    assert isolate.derive_limit_s(2.0, budget, fixed_s=3.5) == 3.5  # isolate_limit_s wins


def test_isolate_selects_plugins_by_default_and_refuses_other_values():
    assert isolate.parse_isolate("plugins") == "plugins"
    assert isolate.parse_isolate("true") is True and isolate.parse_isolate(False) is False
    with pytest.raises(ValueError, match=r"^isolate: expected true, false or plugins, got 'sometimes'$"):
        isolate.parse_isolate("sometimes")
    builtin, plugin = Point(backend="sdpa"), Point(backend="misbehaving:fine")
    assert not isolate.isolated(builtin, "plugins") and isolate.isolated(plugin, "plugins")
    assert isolate.isolated(builtin, True) and not isolate.isolated(plugin, False)


def test_ended_reason_names_the_signal_or_the_exit_code():
    assert isolate.ended_reason(-signal.SIGSEGV) == "the back end's process ended with SIGSEGV"
    assert isolate.ended_reason(3) == "the back end's process ended with exit code 3"


def test_one_worker_serves_points_survives_sys_exit_and_is_replaced_after_a_crash(worker_env):
    first = isolate.run_isolated(point("fine"), BUDGET, ())
    assert first.row is not None and first.row.status == "ok", first
    pid = isolate.worker_pid()
    again = isolate.run_isolated(point("fine_too"), BUDGET, ())
    assert again.row.status == "ok" and isolate.worker_pid() == pid  # the same process: no start per point

    raised = isolate.run_isolated(point("raises"), BUDGET, ())  # an ordinary error row, its traceback sent along
    assert raised.row.status == "error" and raised.row.error == "RuntimeError: kernel raised", raised
    assert 'in raises' in raised.traceback and raised.traceback.rstrip().endswith("RuntimeError: kernel raised")

    exited = isolate.run_isolated(point("exits"), BUDGET, ())
    assert (exited.status, exited.error) == ("crashed", "the back end called sys.exit(0)")
    assert isolate.worker_pid() == pid  # SystemExit is caught inside the worker: it lives on
    assert exited.columns["device_name"] and exited.columns["kernel"] == "misbehaving.exits"

    crashed = isolate.run_isolated(point("os_exit"), BUDGET, ())
    assert (crashed.status, crashed.error) == ("crashed", "the back end's process ended with exit code 3")
    assert isolate.worker_pid() is None and not Path(f"/proc/{pid}").exists()

    after = isolate.run_isolated(point("fine"), BUDGET, ())
    assert after.row.status == "ok" and isolate.worker_pid() not in (None, pid)  # a new worker


def test_a_derived_limit_cuts_a_sleep_near_the_limit_not_after_it(worker_env, monkeypatch):
    # the derivation's floor and grace made small, so the derived limit is seconds: max_point_s=2 caps it
    monkeypatch.setattr(isolate, "MIN_LIMIT_S", 0.5)
    monkeypatch.setattr(isolate, "GRACE_S", 1.0)
    budget = Budget(timing_s=0.01, accuracy_rows=4, measure_device_peak=False, max_point_s=2.0)
    assert isolate.run_isolated(point("fine"), budget, ()).row.status == "ok"  # started: its start is not timed below
    pid = isolate.worker_pid()
    started = time.monotonic()
    outcome = isolate.run_isolated(point("sleeps"), budget, ())
    took = time.monotonic() - started
    assert outcome.status == "timeout" and "x its predicted time" in outcome.error, outcome
    assert took < 3.0 + 2.0, took  # the limit is at most max_point_s + grace = 3 s; the 120 s sleep is cut
    assert not Path(f"/proc/{pid}").exists()


def test_a_signal_while_the_worker_measures_kills_it_and_is_raised(worker_env):
    assert isolate.run_isolated(point("fine"), BUDGET, ()).row.status == "ok"
    pid = isolate.worker_pid()

    def interrupt(signum, frame):
        raise Interrupted(signal.SIGINT)

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        with pytest.raises(Interrupted):
            isolate.run_isolated(point("spins"), BUDGET, ())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert not Path(f"/proc/{pid}").exists()  # killed by its PID and reaped, not left spinning


def test_a_change_the_worker_cannot_undo_gets_the_next_point_a_fresh_worker(worker_env):
    assert isolate.run_isolated(point("fine"), BUDGET, ()).row.status == "ok"
    pid = isolate.worker_pid()
    changed = isolate.run_isolated(Point(backend="hostile:changes_interop", seq_len=32, heads=1, head_dim=8,
                                         device="cpu"), BUDGET, ())
    assert changed.row.status == "ok" and "num_interop_threads" in changed.row.note, changed
    assert "cannot set back" in changed.row.note
    after = isolate.run_isolated(point("fine"), BUDGET, ())
    assert after.row.status == "ok" and isolate.worker_pid() not in (None, pid)  # replaced: every point alike
