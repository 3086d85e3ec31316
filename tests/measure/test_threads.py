"""The timed calls' threads (measure/threads.py): one only where every thread collapsed, and the row says so."""

import time

import pytest
import torch

import selfattn.measure.run as run_module
from selfattn import Point
from selfattn.measure import Budget, measure_point
from selfattn.measure.threads import COLLAPSE_FACTOR, QUIET_MIN_CALL_S, QUIET_OTHERS, choose_threads, one_thread

QUICK = Budget(timing_s=0.02, accuracy_rows=8, max_point_s=600.0)
pytestmark = pytest.mark.exclusive  # the thread choice compares timed calls: nothing may run beside them


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def sleeper(every_thread_s: float, one_thread_s: float, calls: list[int]):
    """A call that takes `every_thread_s` on more than one intra-op thread, `one_thread_s` on one."""
    def call():
        calls.append(torch.get_num_threads())
        time.sleep(every_thread_s if torch.get_num_threads() > 1 else one_thread_s)
    return call


def test_a_collapsed_call_is_timed_on_one_thread(two_threads):
    calls = []
    choice = choose_threads(sleeper(0.03, 0.002, calls), "cpu", warm_call_s=0.03)
    assert choice.threads == 1 and choice.collapsed
    assert calls == [1, 2]  # one call on one thread, one more on both to confirm
    assert choice.every_thread_s >= COLLAPSE_FACTOR * choice.one_thread_s
    assert "timed on one thread" in choice.note() and torch.get_num_threads() == 2  # restored


def test_a_quiet_call_keeps_every_thread_and_costs_one_call(two_threads):
    calls = []
    choice = choose_threads(sleeper(0.004, 0.006, calls), "cpu", warm_call_s=0.004)
    assert choice.threads == 2 and not choice.collapsed and calls == [1]


def test_a_slow_warm_up_alone_does_not_switch(two_threads):  # first-call costs: the second call on both decides
    calls = []
    choice = choose_threads(sleeper(0.002, 0.002, calls), "cpu", warm_call_s=0.03)
    assert choice.threads == 2 and calls == [1, 2]


def test_a_long_collapsed_call_is_checked_too(two_threads):
    # naive at n=256 on 2 collapsed threads: 54.7 ms against 0.70 ms on one, left unchecked above 50 ms before
    calls = []
    choice = choose_threads(sleeper(0.12, 0.004, calls), "cpu", warm_call_s=0.12)
    assert choice.collapsed and calls == [1, 2]


def test_a_long_warm_up_on_a_quiet_machine_needs_no_one_thread_call(two_threads):
    """Barriers wait only where others hold the cores: with others at most QUIET_OTHERS of the machine during a
    warm-up long enough to tell (QUIET_MIN_CALL_S), no check call; otherwise the check runs as before."""
    calls = []
    quiet = choose_threads(sleeper(0.12, 0.004, calls), "cpu", warm_call_s=0.12, others_frac=QUIET_OTHERS)
    assert quiet.threads == 2 and not quiet.collapsed and not quiet.unchecked and calls == []
    busy = choose_threads(sleeper(0.12, 0.004, calls), "cpu", warm_call_s=0.12, others_frac=0.5)
    assert busy.collapsed and calls == [1, 2]
    calls.clear()  # too short for /proc/stat's ticks to say the machine was quiet: checked
    short = choose_threads(sleeper(0.03, 0.002, calls), "cpu", warm_call_s=QUIET_MIN_CALL_S / 2, others_frac=0.0)
    assert short.collapsed and calls == [1, 2]
    calls.clear()
    unknown = choose_threads(sleeper(0.12, 0.004, calls), "cpu", warm_call_s=0.12, others_frac=None)  # no /proc
    assert unknown.collapsed and calls == [1, 2]


def test_a_call_whose_check_would_not_fit_the_point_is_left_with_a_note(two_threads):
    calls = []
    choice = choose_threads(sleeper(0.0, 0.0, calls), "cpu", warm_call_s=10.0, budget_s=15.0)
    assert choice.threads == 2 and not choice.collapsed and calls == []
    assert choice.unchecked.startswith("threads not checked: a call on one thread could take 20 s")


def test_one_thread_processes_and_gpus_are_not_checked(two_threads):
    calls = []
    call = sleeper(0.0, 0.0, calls)
    assert choose_threads(call, "cuda", warm_call_s=0.001).threads == 2
    with one_thread():
        assert choose_threads(call, "cpu", warm_call_s=0.001).threads == 1
    assert calls == []


def test_measure_point_times_a_collapsed_point_on_one_thread_and_says_so(two_threads, monkeypatch):
    timed_on = []
    real = run_module.time_call

    def time_call(call, *args, **kwargs):
        timed_on.append(torch.get_num_threads())
        return real(call, *args, **kwargs)

    monkeypatch.setattr(run_module, "time_call", time_call)
    point = Point(backend="naive", heads=2, seq_len=64, head_dim=16)
    # first as where the barriers do not collapse (a shared machine's may: the choice itself is tested above)
    monkeypatch.setattr(run_module, "choose_threads",
                        lambda call, device, s, *budget_s: run_module.ThreadChoice(torch.get_num_threads(), 0.0, 0.0))
    quiet = measure_point(point, QUICK, [])
    assert quiet.status == "ok" and quiet.num_threads == 2 and "one thread" not in quiet.note
    monkeypatch.setattr(run_module, "choose_threads",
                        lambda call, device, s, *budget_s: run_module.ThreadChoice(1, 0.03, 0.001))
    busy = measure_point(point, QUICK, ["memory"])
    assert busy.status == "ok", busy.error
    assert busy.status == "ok" and busy.num_threads == 1 and "timed on one thread" in busy.note
    assert busy.peak_mem_bytes is not None
    assert timed_on == [2, 1] and torch.get_num_threads() == 2
