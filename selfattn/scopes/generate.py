"""scope=generate: a generation loop of new_tokens steps through the layer, with or without a KV-cache
(selfattn/decode.py).

One call is the whole loop: its FLOPs and bytes sum the T steps; its memory is the largest step (q_len = 1 against
the full cache, or without one a causal pass over the whole prefix) plus what the loop keeps between steps."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from selfattn.scopes import core
from selfattn.scopes.declaration import Scope

if TYPE_CHECKING:
    import torch

    from selfattn.backends.resolved import Resolved
    from selfattn.measure.workload import Workload
    from selfattn.point import Point


def step_point(point: Point) -> Point:
    """The generation's largest step as a core point: q_len = 1 against the full cache, or (no
    cache) a causal pass over the whole prefix. The memory guard sizes a generation by it."""
    total = point.seq_len + point.new_tokens
    return replace(point, scope="core", seq_len=total, q_len=1 if point.kv_cache else None)


def state_bytes(point: Point) -> int:
    """What a generation keeps between steps: the token buffer, the K/V cache (with it), and the
    step's projections of its tokens (one token with the cache, the whole prefix without)."""
    from selfattn.measure.predict import stored_bytes

    s, total = stored_bytes(point), point.seq_len + point.new_tokens
    kv = point.kv_heads_resolved
    tokens = point.batch * (total + 1) * point.d_model * s
    cache = 2 * point.batch * kv * total * point.head_dim * s if point.kv_cache else 0
    projected = point.batch * (1 if point.kv_cache else total) * (point.heads + 2 * kv) * point.head_dim * s
    return tokens + cache + projected


def call_bytes(point: Point, resolved: Resolved, device: str) -> int:
    """A loop: its largest step, plus the cache and tokens it keeps."""
    return int(resolved.backend.mem_bytes(step_point(point), resolved.options, device) + state_bytes(point))


def flops(point: Point) -> float:
    """FLOPs of the T steps: projections, attention (4 H D per seen pair) and W_O of the last token."""
    d_model, dim = point.d_model, point.head_dim
    qkv_per_token = 2.0 * point.batch * d_model * (point.heads * dim + 2 * point.kv_heads_resolved * dim)
    out_proj = 2.0 * point.batch * point.heads * dim * d_model
    total = 0.0
    for context in point.step_contexts:
        if point.kv_cache:
            pairs, projected = context, 1
        else:  # every query of the prefix, causal: 1 + 2 + ... + context pairs
            pairs, projected = context * (context + 1) // 2, context
        total += 4.0 * point.batch * point.heads * dim * pairs
        total += qkv_per_token * projected + out_proj
    return total


def bytes_moved(point: Point) -> int:
    """The least bytes of the T steps: each reads the weights and its tokens' inputs (with the
    cache: one token and the K/V cache of its context, and writes one K/V entry; without: the
    whole prefix), and writes one new token."""
    s, b, dim, kv = point.element_bytes, point.batch, point.head_dim, point.kv_heads_resolved
    d_model = point.d_model
    weights = point.projection_weights * s
    total = 0
    for context in point.step_contexts:
        if point.kv_cache:
            total += weights + b * d_model * s + 2 * b * kv * context * dim * s + 2 * b * kv * dim * s
        else:
            total += weights + b * context * d_model * s
        total += b * d_model * s  # the new token
    return total


def reference_bytes(point: Point, rows: int) -> int:
    """The float64 loop's keys run to the last new token; no stability pass."""
    from selfattn.measure.predict import attention_pass_bytes

    return attention_pass_bytes(point, rows, point.seq_len + point.new_tokens, stability=False)


def build(point: Point, dtype: torch.dtype, device: torch.device, rows: torch.Tensor, seed: int,
          resolved: Resolved) -> Workload:
    """One generation: `call` runs the T steps; accuracy compares all T new tokens with a float64
    run of the cached loop on the reference attention (tests/test_decode.py checks that the cached
    and uncached loops agree). Stability metrics are the core's business: `stability_inputs` is
    None and the runner skips them."""
    import copy

    import torch

    from selfattn.decode import Generation, generate
    from selfattn.inputs import make_x
    from selfattn.masks import Masks
    from selfattn.measure.workload import Result, Workload, plain_dtype
    from selfattn.point import parse_scale
    from selfattn.reference import attention_reference
    from selfattn.scopes.layer import seeded_layer

    scale = parse_scale(point.scale)
    layer = seeded_layer(point, dtype, device, resolved).requires_grad_(False)
    prompt = make_x(point.batch, point.seq_len, point.d_model, dtype=dtype, device=device,
                    std=point.input_std, seed=seed)
    run = Generation(layer, prompt, point.new_tokens, kv_cache=point.kv_cache)

    def check_call() -> Result:
        return Result(run.run().clone(), None)

    def reference(ref_dtype: torch.dtype = torch.float64) -> Result:
        def attend64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return attention_reference(q, k, v, causal=True, scale=scale, dtype=ref_dtype)

        layer64 = copy.deepcopy(layer).to(ref_dtype)
        with torch.no_grad():
            out = generate(layer64, prompt.to(ref_dtype), point.new_tokens, kv_cache=True, attend=attend64)
        return Result(out, None)

    upstream = torch.zeros(point.batch, point.heads, 1, point.head_dim, dtype=dtype, device=device)
    judged = "fp8" not in point.call_options
    return Workload(run.run, check_call, reference, None, upstream, rows, Masks(causal=True),
                    plain=(lambda: reference(plain_dtype(point, dtype))) if judged else None,
                    inputs={"prompt": prompt}, timed_rows=lambda output: output.detach())


# autoregressive: a new token sees the tokens before it (causal by default). The guard counts its inputs as the
# core's of its shape (input_bytes); it draws only the prompt X.
SCOPE = Scope("generate", "a generation loop", autoregressive=True, own_axes=("new_tokens", "kv_cache"),
              defaults={"causal": True}, flops=flops, bytes_moved=bytes_moved, input_bytes=core.input_bytes,
              call_bytes=call_bytes, drawn=lambda point, rows: [point.batch * point.seq_len * point.d_model],
              reference_bytes=reference_bytes, host_weights=lambda point: point.projection_weights, build=build)
