"""The generation loop: the KV-cache is an optimisation, not a change (same tokens, to float tolerance)."""

import pytest
import torch

from selfattn.decode import NORM_EPS, Generation, generate
from selfattn.layer import MultiHeadSelfAttention
from selfattn.scopes.generate import bytes_moved as generate_bytes, flops as generate_flops
from selfattn.point import Point


def _prompt(batch: int, length: int, d_model: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(batch, length, d_model, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(dtype)


def _layer(heads: int, kv_heads: int, head_dim: int, *, seed: int = 0, dtype: torch.dtype = torch.float32,
           backend: str = "naive") -> MultiHeadSelfAttention:
    layer = MultiHeadSelfAttention(heads * head_dim, heads, kv_heads=kv_heads, backend=backend, causal=True)
    layer.reset_parameters(seed=seed)
    return layer.to(dtype).requires_grad_(False)


@pytest.mark.parametrize("backend", ["naive", "sdpa", "chunked"])
@pytest.mark.parametrize("kv_heads", [4, 1])
def test_the_cache_gives_the_same_tokens_as_recomputing_the_prefix(backend, kv_heads):
    layer = _layer(4, kv_heads, 16, backend=backend)
    prompt = _prompt(2, 37, 64, torch.float32)
    cached = generate(layer, prompt, 12, kv_cache=True)
    recomputed = generate(layer, prompt, 12, kv_cache=False)
    assert cached.shape == (2, 12, 64)
    torch.testing.assert_close(cached, recomputed, rtol=1e-4, atol=1e-4)
    # the tokens really depend on the steps: not a constant the two loops could agree on trivially
    assert (cached[:, 1:] - cached[:, :-1]).abs().max() > 0.1


def test_float64_loops_agree_to_rounding():
    layer = _layer(2, 2, 8, seed=3, dtype=torch.float64)
    prompt = _prompt(1, 20, 16, torch.float64)
    torch.testing.assert_close(generate(layer, prompt, 30, kv_cache=True),
                               generate(layer, prompt, 30, kv_cache=False), rtol=1e-10, atol=1e-10)


def test_a_generation_runs_again_from_the_same_state():
    layer = _layer(2, 1, 8, backend="sdpa")
    run = Generation(layer, _prompt(1, 9, 16, torch.float32), 5, kv_cache=True)
    first = run.run().clone()
    torch.testing.assert_close(run.run(), first, rtol=0, atol=0)


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_generation_runs_the_layer_itself(kv_heads):
    """One layer: each step's token is the layer's own forward pass (W_O included) over the tokens
    so far, at the last position, RMS-normalized; the prompt's pass gives the first step's input."""
    layer = _layer(4, kv_heads, 8, seed=5, dtype=torch.float64)
    prompt = _prompt(2, 11, 32, torch.float64)
    tokens = generate(layer, prompt, 3, kv_cache=True)

    def next_token(sequence: torch.Tensor) -> torch.Tensor:
        y = layer(sequence)[:, -1]
        return y / torch.sqrt(y.pow(2).mean(-1, keepdim=True) + NORM_EPS)

    sequence = torch.cat([prompt, next_token(prompt)[:, None]], dim=1)  # the prefill's token
    for t in range(3):
        torch.testing.assert_close(tokens[:, t], next_token(sequence), rtol=1e-10, atol=1e-10)
        sequence = torch.cat([sequence, tokens[:, t:t + 1]], dim=1)


def test_generation_needs_a_causal_layer():
    layer = MultiHeadSelfAttention(16, 2)
    with pytest.raises(ValueError, match="^layer: generation is autoregressive"):
        Generation(layer, _prompt(1, 4, 16, torch.float32), 2, kv_cache=True)


def test_counts_grow_linearly_with_the_cache_and_quadratically_without():
    def per_token(prompt: int, cache: bool) -> float:
        point = Point(scope="generate", causal=True, seq_len=prompt, new_tokens=1, kv_cache=cache, heads=4, head_dim=16)
        return generate_flops(point)

    # attention dominates at long contexts: doubling the context doubles the cached step's work
    # and about quadruples the uncached one's
    assert 1.9 < per_token(16384, True) / per_token(8192, True) < 2.1
    assert 3.8 < per_token(16384, False) / per_token(8192, False) < 4.1
    small = Point(scope="generate", causal=True, seq_len=8, new_tokens=2, heads=2, kv_heads=1, head_dim=4, precision="fp16")
    weights = (8 * (2 + 2) * 4 + 8 * 8) * 2
    cache_reads = sum(2 * 1 * 4 * context * 2 for context in (9, 10))
    assert generate_bytes(small) == 2 * (weights + 8 * 2 + 2 * 4 * 2 + 8 * 2) + cache_reads


def test_generate_points_must_be_causal_without_other_masks():
    with pytest.raises(ValueError, match="^causal: scope=generate"):
        Point(scope="generate").validate()
    with pytest.raises(ValueError, match="^q_len: scope=generate"):
        Point(scope="generate", causal=True, q_len=1).validate()
    Point(scope="generate", causal=True, kv_cache=False, new_tokens=4).validate()


def test_generation_axes_belong_to_scope_generate():
    with pytest.raises(ValueError, match="^new_tokens: only scope=generate"):
        Point(new_tokens=32).validate()
    with pytest.raises(ValueError, match="^kv_cache: only scope=generate"):
        Point(kv_cache=False).validate()
