"""What a call of chunked and naive dispatches under their CUDA plans, counted on a CPU.

On a GPU these back ends pay per kernel launch (a dozen small ones per block made chunked wait on Python:
docs/results' first H200 run). Each aten operation that is not a view launches (at most) one kernel, so a
TorchDispatchMode counting them per call is the launch count, here on meta tensors (shapes only, no data)
with chunked's automatic sizes chosen by its CUDA rule (cuda_chunk_sizes, with an H100's 80 GiB free) and
fp32 inputs (one bmm per product; bf16's fp32-accumulating bmm is one operation on CUDA too). The bounds
are the ones stated beside the rule in selfattn/backends/chunked.py, and naive's mask is made once per point
(selfattn/backends/naive.py: additive_mask), so a causal call dispatches one operation more than a plain one.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from selfattn.backends import chunked, naive
from selfattn.masks import Masks

FREE_BYTES = 80 * 2**30  # an idle H100
B, H, D = 1, 8, 64


class Launches(TorchDispatchMode):
    """Counts the dispatched operations that are not views (each launches at most one kernel)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:
            self.count += 1
        return func(*args, **(kwargs or {}))


def launches(fn, n: int, causal: bool, mode: str, **options) -> int:
    """Operations one call (and its backward for fwd_bwd) dispatches, after a first call made its plan or mask."""
    grad = mode == "fwd_bwd"
    q, k, v = (torch.empty(B, H, n, D, device="meta", requires_grad=grad) for _ in range(3))
    masks = Masks(causal=causal)
    fn(q, k, v, masks=masks, scale=D ** -0.5, **options)  # the point's one-time work: plan, mask
    with Launches() as counted:
        out = fn(q, k, v, masks=masks, scale=D ** -0.5, **options)
        if grad:
            out.backward(torch.ones_like(out))
    return counted.count


@pytest.fixture
def cuda_plan(monkeypatch):
    """chunked's automatic sizes from its CUDA rule, whatever the tensors' device."""
    monkeypatch.setattr(chunked, "auto_sizes",
                        lambda masks, device, x_heads: chunked.cuda_chunk_sizes(masks.causal, x_heads, FREE_BYTES))


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n", [4096, 16384])
def test_chunked_launches_under_its_cuda_plan_stay_within_the_stated_bound(cuda_plan, n, causal, mode):
    q_chunk, kv_chunk = chunked.cuda_chunk_sizes(causal, B * H, FREE_BYTES)
    assert (q_chunk, kv_chunk) == ((chunked.CUDA_CAUSAL_Q_CHUNK_MAX if causal else chunked.CUDA_Q_CHUNK_MAX),
                                   chunked.CUDA_KV_CHUNK)  # 80 GiB leave the cap binding at 8 heads
    plan = chunked._plan(Masks(causal=causal), B, H, 1, n, n, None, None, torch.device("meta"))
    blocks = sum(len(kv) for piece in plan.blocks for _, _, kv in piece)
    assert blocks <= math.ceil(n / q_chunk) * math.ceil(n / kv_chunk)
    counted = launches(chunked.attention, n, causal, mode)
    bound = chunked.CUDA_OPS_PER_BLOCK[mode] * blocks + chunked.CUDA_OPS_FIXED[mode]
    assert counted <= bound, f"{counted} operations for {blocks} blocks (bound {bound})"
    # against the CPU's measured sizes on the same code path: the GPU plan launches far fewer
    cpu_sizes = chunked.CAUSAL_CHUNKS if causal else chunked.DEFAULT_CHUNKS
    on_cpu_sizes = launches(chunked.attention, n, causal, mode, q_chunk=cpu_sizes[0], kv_chunk=cpu_sizes[1])
    assert counted * (8 if n >= 16384 else 2) <= on_cpu_sizes, (counted, on_cpu_sizes)


def test_cuda_sizes_follow_the_budget_and_not_n():
    # 8 heads, 80 GiB: capped; 1024 flattened heads on 8 GiB free: 8 GiB / 8 / (1024 * 1024 * 16) = 64 -> the floor
    assert chunked.cuda_chunk_sizes(False, 8, FREE_BYTES) == (4096, 1024)
    assert chunked.cuda_chunk_sizes(True, 8, FREE_BYTES) == (2048, 1024)
    assert chunked.cuda_chunk_sizes(False, 256, 16 * 2**30) == (512, 1024)  # 2 GiB / (256 * 1024 * 16) = 512
    assert chunked.cuda_chunk_sizes(False, 1024, 8 * 2**30) == (chunked.CUDA_Q_CHUNK_MIN, 1024)
    assert chunked.auto_sizes(Masks(causal=True), "cpu", 8) is None  # a CPU keeps its measured sizes
    assert chunked.chunk_sizes(Masks(causal=True), None, None) == chunked.CAUSAL_CHUNKS


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
@pytest.mark.parametrize("n", [4096, 16384])
def test_naive_makes_its_mask_once_and_applies_it_with_one_operation(n, mode):
    plain, causal = (launches(naive.attention, n, c, mode) for c in (False, True))
    assert causal == plain + 1, (plain, causal)  # step 3: one in-place add of the point's mask
    assert plain <= (6 if mode == "fwd" else 16)  # the five steps (and their backward), nothing per n


def test_naive_mask_is_kept_per_masks_and_shape_and_drops_old_ones():
    masks = Masks(causal=True)
    first = naive.additive_mask(masks, 64, 64, torch.float32, "cpu")
    assert naive.additive_mask(Masks(causal=True), 64, 64, torch.float32, "cpu")[0] is first[0]  # flags share one
    for n in range(65, 65 + naive.MASKS_KEPT):
        naive.additive_mask(masks, n, n, torch.float32, "cpu")
    assert naive.additive_mask(masks, 64, 64, torch.float32, "cpu")[0] is not first[0]  # dropped, made again
    mask, sees = naive.additive_mask(Masks(causal=True), 3, 2, torch.float32, "cpu")  # q_len > seq_len: a row sees none
    assert mask.shape == (1, 3, 2) and sees.tolist() == [[[0.0], [1.0], [1.0]]] and torch.isfinite(mask[0, 0]).all()


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_chunked_memory_model_under_its_cuda_plan_grows_linearly(cuda_plan, causal, mode):
    """The sizes do not depend on n, so from n = 4096 on (a query block no taller than the rows) the predicted peak
    at most doubles when n doubles; and it is far below naive's n x n."""
    from tests.predicted import predicted_mem_bytes
    from selfattn.point import Point

    peaks = {n: predicted_mem_bytes(Point(backend="chunked", device="cuda", precision="bf16", seq_len=n, heads=H,
                                        causal=causal, mode=mode)) for n in (4096, 8192, 16384, 32768)}
    for small, large in zip(list(peaks), list(peaks)[1:]):
        assert peaks[large] <= 2 * peaks[small], peaks
    naive = predicted_mem_bytes(Point(backend="naive", device="cuda", precision="bf16", seq_len=16384, heads=H,
                                    causal=causal, mode=mode))
    assert peaks[16384] < naive / 4, (peaks[16384], naive)
