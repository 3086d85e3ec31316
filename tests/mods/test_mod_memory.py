"""The memory models of the mask-function paths (selfattn/mods/memory.py) against what a call allocates on the
CPU (torch's allocator, as tests/measure/test_variant_memory.py measures the variants); the kept mask is built
by the warm-up call, so it is not the call's (the guard counts it beside the inputs)."""

import pytest
import torch

from selfattn import Point, attention
from selfattn.inputs import make_qkv, point_masks
from tests.predicted import predicted_mem_bytes
from selfattn.measure.memory import alloc_peak_bytes

MASKS = {"prefix_lm": ("prefix_lm", {"prefix": 100}),
         "per-head plugin": ("tests.plugins_for_tests.gym_masks:head_striped", {})}


def _point(backend: str, mask: str, options: dict, mode: str) -> Point:
    return Point(backend=backend, device="cpu", mode=mode, batch=1, heads=2, seq_len=1024, head_dim=64,
                 mask=mask, mask_options=options)


def _measured(point: Point) -> int:
    grad = point.mode == "fwd_bwd"
    q, k, v = make_qkv(1, point.heads, point.q_len_resolved, point.seq_len, point.head_dim, dtype=torch.float32,
                       seed=0, requires_grad=grad)
    masks = point_masks(point)
    upstream = torch.randn(q.shape)

    def call():
        with torch.set_grad_enabled(grad):
            out = attention(q, k, v, backend=point.backend, mask_mod=masks.mask_mod)
            return torch.autograd.grad(out, (q, k, v), upstream) if grad else out

    call()  # warm-up: it builds the kept mask
    return alloc_peak_bytes(call)


@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("backend,mode", [("naive", "fwd"), ("naive", "fwd_bwd"), ("sdpa", "fwd")])
def test_the_dense_paths_memory_models_match_their_allocations(backend, mode, mask):
    point = _point(backend, *MASKS[mask], mode)
    measured, predicted = _measured(point), predicted_mem_bytes(point)
    assert predicted == pytest.approx(measured, rel=0.1), f"measured {measured} B, predicted {predicted} B"


def test_chunked_with_a_mask_function_is_bounded_by_its_model():
    point = _point("chunked", *MASKS["prefix_lm"], "fwd")
    measured, predicted = _measured(point), predicted_mem_bytes(point)
    assert measured <= predicted < 3 * measured, f"measured {measured} B, predicted {predicted} B"
    assert predicted < point.score_elements * 4  # no score-sized tensor: the point of a block map
