"""Whether a CPU point's timed calls run on every thread or on one: one, only where every thread collapsed.

On a shared machine, a call on every intra-op thread ends each of its parallel ops in a barrier, and a
barrier waits until each thread has had its scheduler slice. Beside one busy process per core, a short
call on every thread then takes about one slice per parallel op, every sample alike, many times its quiet
time, while on one thread it keeps near its quiet time. Back ends with fewer parallel ops (sdpa's
one fused kernel) were spared, so a comparison of back ends turned on how many ops each has, not on
their work: "dot-product attention beats additive" did not hold in such a run.

So after the warm-up, the call is also run once on one thread; where every thread was COLLAPSE_FACTOR times
slower or more (confirmed by a second call on every thread), the point's memory call and timed calls run on one
thread, and its row says so (num_threads 1 and a note). A quiet machine never comes near the factor: two threads
of the same work are not 3x slower than one, whose calls then keep every thread, as before.

Calls of any length are checked: a long call is no safer (naive at n=256 took 54.7 ms on 2 collapsed threads and
0.70 ms on one, a 55x gap in the end table). The check's one-thread call takes at most `threads` times the
warm-up (collapse only slows the threads down), so it runs when that fits the seconds the point has left
(`budget_s`, from budget.max_point_s; the confirming call then fits too); otherwise the row's note says the
threads were not checked.
The row's `num_threads` is the count its timed calls ran on.

A barrier waits for a slice only where other processes hold the cores. So a warm-up call of at least QUIET_MIN_CALL_S
during which other processes took at most QUIET_OTHERS of the machine's CPU time (/proc/stat, noise.py; long enough
for its 10 ms ticks to say so) needs no one-thread call: nothing could make its threads wait, and the check's call
(about `threads` times the call on a quiet machine) was a fifth of a long point's time. Load that arrives after the
warm-up is in the timer's own reading of others' CPU share, which flags the row noisy.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from selfattn.measure.timing import wall_call

COLLAPSE_FACTOR = 3.0  # every thread at least this many times slower than one: collapsed
QUIET_OTHERS = 0.1  # others' CPU share during the warm-up at or below which no thread can have waited
QUIET_MIN_CALL_S = 0.05  # a warm-up this long spans enough /proc/stat ticks (10 ms, each core) to tell


@dataclass(frozen=True)
class ThreadChoice:
    threads: int  # the threads the timed calls run on
    every_thread_s: float  # the faster of the calls on every thread (0: not checked)
    one_thread_s: float  # the call on one thread (0: not checked)
    unchecked: str = ""  # why the threads were not checked (the call too long for the point's time left), or ""

    @property
    def collapsed(self) -> bool:
        return self.threads == 1 and self.every_thread_s > 0

    def note(self) -> str:
        return (f"timed on one thread: on every thread a call took {self.every_thread_s * 1e3:.3g} ms against "
                f"{self.one_thread_s * 1e3:.3g} ms on one (a busy machine's barrier waits; measure/threads.py)")


def choose_threads(call: Callable[[], object], device: str, warm_call_s: float,
                   budget_s: float = math.inf, others_frac: float | None = None) -> ThreadChoice:
    """Every thread, unless the call on every thread is COLLAPSE_FACTOR times slower than on one.

    `warm_call_s`: the warm-up call's seconds (on every thread); `budget_s`: the seconds the check may take;
    `others_frac`: other processes' CPU share during the warm-up call (None: unknown; see QUIET_OTHERS).
    Costs one call on one thread where the process has more than one thread, and one more on every thread
    where that looks collapsed (a warm-up can carry one-time costs)."""
    threads = torch.get_num_threads()
    if device != "cpu" or threads <= 1:
        return ThreadChoice(threads, 0.0, 0.0)
    if others_frac is not None and others_frac <= QUIET_OTHERS and warm_call_s >= QUIET_MIN_CALL_S:
        return ThreadChoice(threads, warm_call_s, 0.0)  # a quiet machine: nothing to wait for (see the docstring)
    if threads * warm_call_s > budget_s:
        return ThreadChoice(threads, 0.0, 0.0, unchecked=(
            f"threads not checked: a call on one thread could take {threads * warm_call_s:.3g} s, more than the "
            f"{max(budget_s, 0.0):.3g} s the point has left (budget.max_point_s)"))
    with one_thread():
        _, one_s = wall_call(call, device)
    if warm_call_s < COLLAPSE_FACTOR * one_s:
        return ThreadChoice(threads, warm_call_s, one_s)
    _, again_s = wall_call(call, device)  # fits: one_s + warm_call_s <= 2 warm_call_s <= threads * warm_call_s
    every_s = min(warm_call_s, again_s)
    return ThreadChoice(1 if every_s >= COLLAPSE_FACTOR * one_s else threads, every_s, one_s)


@contextmanager
def one_thread() -> Iterator[None]:
    """torch's intra-op threads set to one inside, restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@contextmanager
def on_threads(choice: ThreadChoice) -> Iterator[None]:
    """The timed calls' threads: one where `choice` says the threads collapsed, else as they are."""
    if choice.collapsed:
        with one_thread():
            yield
    else:
        yield
