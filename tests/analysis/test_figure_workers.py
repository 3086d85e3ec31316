"""Figures drawn in worker processes (analysis.figures.draw): the same files as drawn one after the other, failures
said by the report's process, and a worker that dies or hangs costs no figure."""

import multiprocessing
import os
import sys
import threading
import time

import matplotlib.image
import numpy as np
import pytest

from analysis.figures import FIGURES, Made, Skipped
from analysis.report import write_report

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="figures are drawn in workers on Linux")
COST = [f for f in FIGURES if f.__name__ in ("time_vs_seq_len", "memory_vs_seq_len", "causal_saving")]


def pid_figure(rows, ctx):
    """A figure that says which process drew it."""
    return Made("pid", "pid", "which process", [], notes=[str(os.getpid())])


def broken_figure(rows, ctx):
    raise ValueError("no such column: spam")


def dies_in_a_worker(rows, ctx):
    if os.getpid() != PARENT:
        os._exit(3)  # as a worker killed for its memory would
    return Made("survivor", "survivor", "drawn here after its worker died", [], notes=[str(os.getpid())])


PARENT = os.getpid()


def test_workers_draw_the_same_pictures_as_one_process(tmp_path, fabricate):
    csv = fabricate().quadratic_cost(sizes=(256, 512, 1024)).write(tmp_path / "results.csv")
    # first in the queue, so a worker draws it (the report's process takes figures from the back)
    one = write_report([csv], tmp_path / "one", figures=[pid_figure, *COST], warn=False, workers=1)
    two = write_report([csv], tmp_path / "two", figures=[pid_figure, *COST], warn=False, workers=2)
    assert one.figures[0].notes == [str(os.getpid())]
    assert two.figures[0].notes != [str(os.getpid())]  # drawn in a worker: the comparison below compares something
    assert [f.name for f in one.figures] == [f.name for f in two.figures]
    pngs = sorted(p.name for p in (tmp_path / "one" / "figures").glob("*.png"))
    assert len(pngs) == 3 and pngs == sorted(p.name for p in (tmp_path / "two" / "figures").glob("*.png"))
    for name in pngs:
        a = matplotlib.image.imread(tmp_path / "one" / "figures" / name)
        b = matplotlib.image.imread(tmp_path / "two" / "figures" / name)
        assert a.shape == b.shape and np.array_equal(a, b), name
    text = [r.path.read_text().replace(str(r.path.parent), "OUT").replace(r.figures[0].notes[0], "PID")
            for r in (one, two)]
    assert text[0] == text[1]


def test_a_figure_failing_in_a_worker_is_said_once_and_costs_only_itself(tmp_path, fabricate, capsys):
    csv = fabricate().quadratic_cost(sizes=(256, 512, 1024)).write(tmp_path / "results.csv")
    report = write_report([csv], tmp_path / "out", figures=[broken_figure, pid_figure, *COST[:1]], workers=2)
    broken, pid, drawn = report.figures
    assert isinstance(broken, Skipped) and broken.reason == "failed: ValueError: no such column: spam"
    assert isinstance(drawn, Made) and pid.notes != [str(os.getpid())]
    err = capsys.readouterr().err
    assert err.count("analysis: broken_figure: failed (ValueError: no such column: spam)") == 1
    assert "Traceback" in err and "raise ValueError" in err  # warn=True: the worker's traceback, printed here


def test_a_worker_that_dies_costs_no_figure(tmp_path, fabricate):
    csv = fabricate().quadratic_cost(sizes=(256, 512, 1024)).write(tmp_path / "results.csv")
    report = write_report([csv], tmp_path / "out", figures=[dies_in_a_worker, pid_figure], warn=False, workers=2)
    survivor, _ = report.figures
    assert isinstance(survivor, Made) and survivor.notes == [str(os.getpid())]  # drawn again, in this process


def test_workers_is_checked_on_the_command_line(tmp_path, capsys):
    from analysis.report import main

    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path), "--out", str(tmp_path / "out"), "--workers", "0"])
    assert exc.value.code == 2 and "--workers: expected a whole number of processes >= 1, got 0" in capsys.readouterr().err


def test_no_worker_started_means_every_figure_drawn_here(tmp_path, fabricate, monkeypatch):
    import analysis.figures.draw as draw

    def refuse(*args, **kwargs):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(draw, "ProcessPoolExecutor", refuse)
    csv = fabricate().quadratic_cost(sizes=(256, 512, 1024)).write(tmp_path / "results.csv")
    report = write_report([csv], tmp_path / "out", figures=[pid_figure, *COST[:1]], warn=False, workers=2)
    assert report.figures[0].notes == [str(os.getpid())] and isinstance(report.figures[1], Made)


def waits_for_the_report_process(rows, ctx):
    """In a worker: waits until the report's process has drawn one of these (so it reached the figures' queue)."""
    flag = FLAG["path"]
    if os.getpid() == PARENT:
        flag.touch()
    else:
        import time

        deadline = time.monotonic() + 60
        while not flag.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    return Made("waits", "waits", "which process", [], notes=[str(os.getpid())])


FLAG = {"path": None}  # the file waits_for_the_report_process waits for: set before the workers are forked


def test_the_report_process_draws_from_the_back_what_no_worker_started(tmp_path, fabricate, monkeypatch):
    csv = fabricate().quadratic_cost(sizes=(256, 512)).write(tmp_path / "results.csv")
    monkeypatch.setitem(FLAG, "path", tmp_path / "drawn-here")
    report = write_report([csv], tmp_path / "out", figures=[waits_for_the_report_process] * 12, warn=False,
                          workers=2)
    here = [f.notes == [str(os.getpid())] for f in report.figures]
    assert len(report.figures) == 12 and all(isinstance(f, Made) for f in report.figures)
    # the workers hold their first figures until this process has drawn one, so it took every figure they had
    # not started, from the back; they drew only those handed to them before it came: one each, plus at most
    # what the pool had already moved to its call queue (workers + 1 items: concurrent.futures' EXTRA_QUEUED_CALLS)
    assert here == sorted(here) and here[-1] and not here[0]
    assert 2 <= here.count(False) <= 2 + (2 + 1)


INHERITED = threading.Lock()  # held by the test's thread while the workers fork: locked in them forever


def stuck_in_a_worker(rows, ctx):
    """A worker blocks on the lock it inherited locked (as one would on a lock some thread of the report's
    process held at the fork); in the report's process the lock is free again by the time it draws."""
    with INHERITED:
        return Made("stuck", "stuck", "drawn after its worker hung", [], notes=[str(os.getpid())])


def test_a_worker_stuck_on_an_inherited_lock_is_killed_and_its_figure_drawn_here(tmp_path, fabricate, monkeypatch,
                                                                                 capsys):
    import analysis.figures.draw as draw

    monkeypatch.setattr(draw, "WORKER_IDLE_S", 2.0)
    csv = fabricate().quadratic_cost(sizes=(256, 512)).write(tmp_path / "results.csv")
    real_start = draw.start

    def start_then_free_the_lock(*args, **kwargs):  # the fork happens inside start, with the lock held
        try:
            return real_start(*args, **kwargs)
        finally:
            INHERITED.release()

    monkeypatch.setattr(draw, "start", start_then_free_the_lock)
    INHERITED.acquire()
    began = time.monotonic()
    report = write_report([csv], tmp_path / "out", figures=[stuck_in_a_worker, pid_figure], warn=False, workers=2)
    took_s = time.monotonic() - began
    stuck, _ = report.figures
    assert isinstance(stuck, Made) and stuck.notes == [str(os.getpid())]  # drawn again, in this process
    assert took_s < 30
    assert "analysis: no figure came back from the figure workers for 2 s; they were stopped" in capsys.readouterr().err
    assert not [p for p in multiprocessing.active_children() if p.is_alive()]  # no worker outlives the report
