"""chunked's head-parallel driver: run a block computation over groups of heads in worker threads.

On a CPU, torch parallelizes each op with OpenMP, so every op ends in a barrier; with hundreds
of small ops per call, a core shared with another process stalls each barrier for a scheduler
slice (measured: 6x slower than SDPA under load, 1.2x quiet). Instead, split the flattened heads
into one contiguous group per intra-op thread and run the groups in Python threads with
single-threaded ops (torch releases the GIL inside ops): no barrier until the end, like SDPA's
own kernel. Each (batch, head) still has one block alive.

Worker threads do not inherit the caller's thread-local torch state: a TorchDispatchMode (FLOP
counter, live-tensor tracker) entered around the call sees none of the workers' ops. torch has
no public way to ask whether such a mode is active, so this is a setting: HEAD_THREADS.

The driver knows nothing of the online softmax: it calls the function it is given on slices of
the flattened heads (or on runs of query blocks) and combines the results
(selfattn/backends/chunked.py holds the algorithm).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

HEAD_THREADS: int | None = None
"""Threads the head groups run on. None: torch.get_num_threads(). 1: every op on the calling
thread, which a TorchDispatchMode needs to see all of them; set it (or torch.set_num_threads(1))
around such a mode. Tensor subclasses (FakeTensor), torch.compile tracing and non-CPU tensors
always stay on the calling thread."""

_pool: ThreadPoolExecutor | None = None
_pool_workers = 0  # the threads _pool was made with; a larger request replaces it
_pool_lock = threading.Lock()
_in_worker = threading.local()


def _forget_pool_after_fork() -> None:
    """A forked child inherits the pool object but not its threads: start a fresh one there."""
    global _pool, _pool_workers, _pool_lock
    _pool, _pool_workers, _pool_lock = None, 0, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_after_fork)


def _worker_threads(tensors_X, single: bool = False) -> int:
    """How many threads to run on; 1 keeps everything on the calling thread (and `single` asks for that)."""
    first = tensors_X[0]
    if (
        single
        or first.device.type != "cpu"
        or getattr(_in_worker, "active", False)
        # a subclass may route ops through per-thread state (FakeTensor's mode); so may tracing
        or any(type(t) is not torch.Tensor for t in tensors_X)
        or torch.compiler.is_compiling()
    ):
        return 1
    return max(1, torch.get_num_threads() if HEAD_THREADS is None else HEAD_THREADS)


def over_heads(fn, kind: str, tensors_X, lo, hi, kv_plan, extra: tuple, *, single: bool = False, mods=None):
    """fn(*tensors_X, lo, hi, kv_plan, *extra) spread over the worker threads (all on the calling
    thread when `single`: compiled blocks, see chunked.py's docstring). `mods`, when given, is passed
    on as fn's keyword `mods`, cut to each group of heads with its `heads(slice)` (per-head data
    such as ALiBi's slopes, selfattn/backends/chunked_mods.py).

    Split the flattened heads X into one group per thread; with fewer heads than threads (few
    K/V heads and a small batch: GQA's one big matrix per K/V head) split the query blocks
    instead, each thread taking a contiguous run of them over every head. Either way every op
    is single-threaded inside its worker (no OpenMP barrier per op). `kind`: "forward" results
    are (out, lse), "backward" ones (dq, dk, dv); they are combined accordingly.
    """
    threads = _worker_threads(tensors_X, single)
    x = tensors_X[0].shape[0]
    every_head = {} if mods is None else {"mods": mods}
    if threads == 1 or (x == 1 and len(kv_plan) == 1):
        return fn(*tensors_X, lo, hi, kv_plan, *extra, **every_head)
    if x >= threads or len(kv_plan) == 1:
        workers = min(threads, x)
        bounds = [round(i * x / workers) for i in range(workers + 1)]
        groups = [slice(bounds[i], bounds[i + 1]) for i in range(workers)]
        results = _parallel([lambda g=g: fn(*(t[g] for t in tensors_X), lo, hi, kv_plan, *extra,
                                            **({} if mods is None else {"mods": mods.heads(g)}))
                             for g in groups])
        return tuple(torch.cat(parts, dim=0) for parts in zip(*results))
    pieces = split_plan(kv_plan, threads)
    results = _parallel([lambda piece=piece: fn(*tensors_X, lo, hi, piece, *extra, **every_head) for piece in pieces])
    if kind == "forward":  # each worker filled the rows of its query blocks
        out_XRD, lse_XR = results[0]
        for piece, (out_part, lse_part) in zip(pieces[1:], results[1:]):
            rows = slice(piece[0][0], piece[-1][1])
            out_XRD[:, rows], lse_XR[:, rows] = out_part[:, rows], lse_part[:, rows]
        return out_XRD, lse_XR
    # backward: dq rows follow the pieces in order; dk and dv are partial sums over query blocks
    dq_XRD = torch.cat([r[0] for r in results], dim=1)
    dk_XND, dv_XND = results[0][1], results[0][2]
    for _, dk_part, dv_part in results[1:]:
        dk_XND.add_(dk_part)
        dv_XND.add_(dv_part)
    return dq_XRD, dk_XND, dv_XND


def split_plan(kv_plan: list, parts: int) -> list[list]:
    """The query blocks of a plan in `parts` contiguous runs of about equal work (key columns computed)."""
    # an entry's key side: a list of key blocks, or one object with `columns` per row (a band run)
    work = [(m1 - m0) * (kv.columns if hasattr(kv, "columns") else sum(n1 - n0 for n0, n1, _ in kv))
            for m0, m1, kv in kv_plan]
    pieces: list[list] = []
    total, current, done = sum(work) or 1, [], 0
    for block, cost in zip(kv_plan, work):
        current.append(block)
        done += cost
        if done >= total * (len(pieces) + 1) / parts and len(pieces) < parts - 1:
            pieces.append(current)
            current = []
    if current:
        pieces.append(current)
    return pieces


def _parallel(calls: list):
    """Run each call in a worker thread with single-threaded ops; their results, in order."""

    def run(call):
        torch.set_num_threads(1)  # this worker's ops stay single-threaded
        _in_worker.active = True
        try:
            with torch.no_grad():  # grad mode is per thread; these blocks never need autograd
                return call()
        finally:
            _in_worker.active = False

    global _pool, _pool_workers
    workers = len(calls)
    threads_before = torch.get_num_threads()
    with _pool_lock:
        if _pool is None or _pool_workers < workers:
            # no shutdown() of the old pool: another caller may be about to map on it; its
            # threads exit once it is unreferenced
            _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="selfattn-chunked")
            _pool_workers = workers
        pool = _pool
    torch.set_num_threads(1)
    try:
        return list(pool.map(run, calls))
    finally:
        torch.set_num_threads(threads_before)
