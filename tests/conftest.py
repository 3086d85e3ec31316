"""Shared test set-up: CUDA-only tests carry @pytest.mark.gpu and skip without a GPU; the whole
matrix of compiled back ends (@pytest.mark.compile_matrix, many minutes of compiling) runs only
with `--compile-matrix`.

The whole suite (`python -m pytest` with no path, any -m or -k) runs in worker processes, one per
usable CPU and at most MAX_WORKERS, where pytest-xdist is installed (the `test` extra) and no GPU is
(the CUDA tests time and measure one device), each test file on one worker so that a module's shared
runs happen once. A path named on the command line runs in this process; `-n N` sets the workers for
any run, `-n 0` runs everything here. Tests marked
`exclusive` (their assertions read timings) run alone: a file lock lets every other test run
beside any but them (`_exclusive`)."""

import atexit
import contextlib
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

# Tests never talk to wandb's servers, whatever the developer's environment says.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
# The device probes' cache (selfattn/measure/probes.py) goes to a folder of this test session, never the
# developer's: a test neither reads a stale value nor leaves one behind; subprocess tests inherit it.
os.environ["SELFATTN_CACHE_DIR"] = _CACHE_DIR = tempfile.mkdtemp(prefix="selfattn-test-cache-")
atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)  # gone with the session (a pytest run inside a
# test, such as the GPU check's collection, makes and removes its own)


def pytest_addoption(parser):
    parser.addoption("--compile-matrix", action="store_true",
                     help="also run every case of the compiled back ends (slow: minutes of torch.compile)")


def _longest_first(item: pytest.Item) -> int:
    """Where a test file goes in the workers' queue: the SLURM tests first (a minute and more of waiting for the
    scheduler, which the other workers fill), the end-to-end files next, the rest in their order. A long file
    left to the end would run alone while the other workers idle."""
    return 0 if item.get_closest_marker("slurm") else 1 if item.get_closest_marker("slow") else 2


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each file whole, its files in the order of their first test
        rank = {}
        for item in items:
            rank[item.path] = min(rank.get(item.path, 2), _longest_first(item))
        items.sort(key=lambda item: rank[item.path])  # stable: a file's own tests keep their order
    skip_matrix = pytest.mark.skip(reason="the compiled back ends' whole matrix: run with --compile-matrix")
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "compile_matrix" in item.keywords and not config.getoption("--compile-matrix"):
            item.add_marker(skip_matrix)
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)


MAX_WORKERS = 4  # each worker imports torch (~0.3 GB) and the end-to-end tests start processes of their own


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which turns -n into workers
def pytest_cmdline_main(config: pytest.Config) -> None:
    """The whole suite in workers (see the module's docstring); everything else as asked."""
    option = config.option
    if (getattr(option, "numprocesses", "absent") is not None  # -n given, or xdist not installed or blocked
            or config.args_source != pytest.Config.ArgsSource.TESTPATHS  # a path was named
            or option.collectonly or config.getoption("usepdb", False) or hasattr(config, "workerinput")
            or torch.cuda.is_available()):  # the CUDA tests time and measure one GPU: one process
        return
    workers = min(_usable_cpus(), MAX_WORKERS)
    if workers > 1:
        option.numprocesses = workers
        if option.dist == "no":
            option.dist = "loadfile"
        # pytest-xdist would queue the files by their number of tests, most first (its loadscope-reorder,
        # on by default), undoing `_longest_first`: the SLURM file (5 tests) and the end-to-end files (1-2
        # tests, a minute each) went last and ran side by side at the end, while the other worker idled.
        option.loadscopereorder = False


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker per usable CPU, at most MAX_WORKERS."""
    return min(_usable_cpus(), MAX_WORKERS)


# Tests marked `exclusive` time something and compare the times: another worker's test beside them would decide
# their verdict. Each test holds a lock on LOCK_DIR/run while it runs, shared, or exclusive for those; a test first
# passes LOCK_DIR/gate, which an exclusive test holds while it waits, so a stream of shared tests cannot starve it.
def _lock_dir() -> Path | None:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # the same in every worker of one run; unset without workers
    return Path(tempfile.gettempdir()) / f"selfattn-tests-{run}" if run else None


@contextlib.contextmanager
def _exclusive(alone: bool):
    folder = _lock_dir()
    if folder is None:
        yield
        return
    folder.mkdir(exist_ok=True)
    with open(folder / "gate", "a") as gate, open(folder / "run", "a") as run:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(run, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(run, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(gate, fcntl.LOCK_UN)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    with _exclusive(item.get_closest_marker("exclusive") is not None):
        yield
