"""Real CPU peak memory: naive's O(n^2) matches the analytic model, chunked stays far below."""

import pytest
import torch

from selfattn import Point
from selfattn.measure import Budget, measure_point
from tests.predicted import predicted_mem_bytes
from selfattn.measure.accuracy import sample_rows
from selfattn.measure.memory import measure_peak, peak_rss_bytes, reset_peak_rss, rss_bytes
from selfattn.backends.resolved import resolve_point
from selfattn.measure.workload import build

pytestmark = pytest.mark.skipif(not reset_peak_rss(), reason="needs Linux /proc/self/clear_refs")

# H=8 fp32: the score matrix alone is 8 * n^2 * 4 bytes = 128 MiB at n=2048, large enough that
# allocator and interpreter noise (a few MiB) is negligible; larger n only costs memory and time.
HEADS = 8


@pytest.fixture(autouse=True)
def one_thread():
    # Memory does not depend on the thread count, but on a shared, busy machine OpenMP's
    # barriers make the chunked loop's many small ops slow; one thread keeps these tests quick.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _measured(point: Point) -> int:
    workload = build(point, torch.float32, torch.device("cpu"), sample_rows(point.seq_len, 8, 0), resolved=resolve_point(point, "cpu"))
    workload.call()  # warm-up: one-time allocations are not the point's
    return measure_peak(workload.call, "cpu")[0]


def test_peak_measures_what_is_allocated():
    n = 4 * 2**20  # 16 MiB of fp32, written
    measured, _ = measure_peak(lambda: torch.ones(n), "cpu")
    # RSS moves in pages, and a page or two of the new tensor may already be resident (heap reuse):
    # a few pages short is still the 16 MiB, while a wrong peak would miss by MiBs.
    assert 16 * 2**20 - 16 * 4096 <= measured < 24 * 2**20


def test_naive_peak_within_25_percent_of_prediction():
    n = 2048
    point = Point(backend="naive", heads=HEADS, seq_len=n, head_dim=64)
    measured = _measured(point)
    predicted = predicted_mem_bytes(point)
    assert predicted >= 2 * HEADS * n * n * 4  # scores and weights alive together
    assert abs(measured - predicted) <= 0.25 * predicted, (measured, predicted)


def test_chunked_peak_far_below_naive():
    # n=4096, not 2048: chunked's own working set is a few tens of MiB, the size of the heap's
    # reuse noise, so at 2048 the O(n) vs O(n^2) gap is not yet clear of that noise
    n = 4096
    naive = predicted_mem_bytes(Point(backend="naive", heads=HEADS, seq_len=n))
    chunked = _measured(Point(backend="chunked", heads=HEADS, seq_len=n))
    assert chunked < naive / 8, (chunked, naive)


def test_fwd_bwd_prediction_tracks_naive():
    # n=2048: 128 MiB per score matrix, so glibc's heap reuse (tens of MiB either way, depending
    # on what the process did before) stays well inside the tolerance.
    point = Point(backend="naive", heads=HEADS, seq_len=2048, mode="fwd_bwd")
    measured = _measured(point)
    assert abs(measured - predicted_mem_bytes(point)) <= 0.25 * predicted_mem_bytes(point)


def test_row_carries_measured_and_predicted_memory():
    row = measure_point(Point(backend="naive", heads=HEADS, seq_len=2048), Budget(timing_s=0.05, accuracy_rows=16, max_point_s=600.0))
    assert row.status == "ok", row.error
    assert abs(row.peak_mem_bytes - row.predicted_mem_bytes) <= 0.25 * row.predicted_mem_bytes


def test_budget_guard_skips_without_allocating():
    # naive at n=65536 predicts 2 * 8 * 65536^2 * 4 bytes = 256 GiB of scores: skipped at once.
    point = Point(backend="naive", heads=HEADS, seq_len=65536)
    budget = Budget()
    measure_point(Point(backend="naive", seq_len=16), budget)  # environment, GEMM peak: cached
    reset_peak_rss()
    before = rss_bytes()
    row = measure_point(point, budget)
    grown = peak_rss_bytes() - before
    assert row.status == "skipped_budget"
    assert "memory" in row.error and row.time_ms is None and row.peak_mem_bytes is None
    assert row.predicted_mem_bytes > 200 * 2**30
    assert grown < 16 * 2**20, grown  # not even Q, K, V (3 * 8 * 65536 * 64 * 4 = 384 MiB)


@pytest.mark.parametrize("backend, options, element_bytes", [("naive", {}, 2), ("sdpa", {"kernel": "math"}, 4)])
def test_cuda_backward_predicts_one_more_score_matrix_than_a_cpu(backend, options, element_bytes):
    """The softmax's backward keeps four score-sized matrices on CUDA (measured on an H200) and three on a CPU:
    the CUDA model of a materializing back end's fwd_bwd is exactly one (q_len x seq_len) matrix per head above
    the CPU's (bf16: naive's in bf16, the math kernel's upcast to fp32); the forward models are the same."""
    from selfattn.backends import get_backend

    entry = get_backend(backend)
    point = Point(backend=backend, backend_options=options, precision="bf16", batch=2, heads=8, seq_len=1024,
                  head_dim=64, causal=True, mode="fwd_bwd")
    resolved = {"kernel": "math"} if options else {}
    cuda, cpu = (entry.mem_bytes(point, resolved, device) for device in ("cuda", "cpu"))
    assert cuda - cpu == 2 * 8 * 1024 * 1024 * element_bytes
    point_fwd = Point(backend=backend, backend_options=options, precision="bf16", batch=2, heads=8, seq_len=1024,
                      head_dim=64, causal=True, mode="fwd")
    assert entry.mem_bytes(point_fwd, resolved, "cuda") == entry.mem_bytes(point_fwd, resolved, "cpu")
