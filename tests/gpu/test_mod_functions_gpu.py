"""Mask and score functions on CUDA: naive, sdpa, chunked and flex (its compiled kernel, forward and backward)
against the float64 reference that evaluates the functions themselves, fp16 and bf16 within the verdict's
kind of bound (not run on a CPU)."""

import pytest
import torch

import selfattn
from selfattn.mods import discovery
from selfattn.reference import attention_reference
from tests.plugins_for_tests import gym_masks

pytestmark = pytest.mark.gpu

MASKS = [("generate_prefix_lm_mask", {"prefix_length": 200}),
         ("generate_dilated_sliding_window", {"window_size": 256, "dilation": 4}),
         ("generate_global_sliding_window", {"window_size": 128, "global_tokens": 16})]


@pytest.fixture(scope="module", autouse=True)
def cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("factory,options", MASKS, ids=[m for m, _ in MASKS])
def test_every_back_end_runs_the_masks_on_cuda(factory, options, dtype):
    mod = discovery.bind("mask", f"tests.plugins_for_tests.gym_masks:{factory}", options)
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(2, 8, 1000, 64, device="cuda", dtype=dtype, generator=g)
    k, v = (torch.randn(2, 2, 1024, 64, device="cuda", dtype=dtype, generator=g) for _ in range(2))
    ref = attention_reference(q, k, v, mask_mod=mod)
    plain = attention_reference(q, k, v, mask_mod=mod, dtype=dtype).double()
    bound = 8 * float((plain - ref).abs().max()) + 1e-3
    for backend in ("naive", "sdpa", "chunked", "flex"):
        out = selfattn.attention(q, k, v, backend=backend, mask_mod=mod)
        assert float((out.double() - ref).abs().max()) <= bound, backend


def test_flex_backward_with_a_mask_and_a_score_function():
    mod = discovery.bind("mask", "prefix_lm", {"prefix": 100})
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn(1, 4, 512, 64, device="cuda", generator=g, requires_grad=True) for _ in range(3))
    out = selfattn.attention(q, k, v, backend="flex", mask_mod=mod, score_mod=gym_masks.relative_bias)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    ref = attention_reference(q64, k64, v64, mask_mod=mod, score_mod=gym_masks.relative_bias)
    refs = torch.autograd.grad(ref.sum(), (q64, k64, v64))
    assert float((out.double() - ref).abs().max()) < 1e-3
    for got, want in zip(grads, refs):
        assert float((got.double() - want).abs().max()) < 1e-2
