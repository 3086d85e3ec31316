"""The allocator's peak on a CPU: exact for known allocations, the same on every call, and what
the analytic memory model of naive predicts (RSS, beside it, moves by MiBs with the OS)."""

import torch

from selfattn import Point
from tests.predicted import predicted_mem_bytes
from selfattn.measure.accuracy import sample_rows
from selfattn.measure.memory import alloc_peak_bytes
from selfattn.backends.resolved import resolve_point
from selfattn.measure.workload import build

MIB = 2**20
SCALARS = 64  # ops wrap Python numbers in tiny tensors (a few bytes each)


def test_peak_counts_a_temporary_freed_before_the_end():
    def fn():
        a = torch.ones(MIB // 4)  # 1 MiB of float32
        b = a * 2  # a second MiB while `a` is alive
        del a
        return b

    assert 2 * MIB <= alloc_peak_bytes(fn) <= 2 * MIB + SCALARS


def test_what_was_live_before_the_call_does_not_count():
    kept = torch.ones(8 * MIB // 4)
    assert alloc_peak_bytes(lambda: kept.add_(1)) <= SCALARS  # in place: nothing but the scalar 1


def _workload(point: Point):
    return build(point, torch.float32, torch.device("cpu"), sample_rows(point.seq_len, 8, 0), resolved=resolve_point(point, "cpu"))


def test_the_same_point_measured_twice_agrees_within_one_percent():
    for backend in ("naive", "sdpa", "chunked"):
        call = _workload(Point(backend=backend, seq_len=512, heads=4, head_dim=64, device="cpu")).call
        first, second = alloc_peak_bytes(call), alloc_peak_bytes(call)
        assert first > 0 and abs(first - second) <= 0.01 * first, backend


def test_naive_peak_is_its_memory_model():
    point = Point(backend="naive", seq_len=1024, heads=4, head_dim=64, device="cpu")
    predicted = predicted_mem_bytes(point)
    # scores and their scaled copy (2 x 4 x 1024² x 4 bytes = 32 MiB) plus the output; a few bytes of scalars
    assert abs(alloc_peak_bytes(_workload(point).call) - predicted) <= 0.01 * predicted
