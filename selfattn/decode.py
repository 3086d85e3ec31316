"""Autoregressive generation through one attention layer, with and without a KV-cache.

A prompt of P tokens, then T new ones: each new token's input is the layer's output at the
last position (RMS-normalized, so the stream neither grows nor fades over T steps). Two loops
produce the same T tokens:

- with the cache: K and V of every token so far sit in a preallocated (B, kv_heads, P + T, D)
  cache; a step projects only the new token, appends its K and V, and runs one q_len = 1
  attention against the cache. Its cost grows linearly with the context.
- without it: a step projects every token of the prefix again and runs causal attention for
  every query of the prefix, as a model without a cache must (only the last output is used).
  Its cost grows with the square of the context.

The timed loop is the T steps; the prompt's own pass (prefill: the cache's first P entries and
the first new token's input) is done once before, the same for both, so the two loops differ
only in what the cache saves. `generate_flops` and `generate_bytes` count one loop the way
selfattn/measure/flops.py and traffic.py count a core call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from selfattn.api import attention
from selfattn.point import Point

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]  # (q, k, v) -> out, causal
NORM_EPS = 1e-6


@dataclass
class DecoderLayer:
    """The layer's projections: W_Q (d_model -> heads x D), W_K, W_V (-> kv_heads x D), W_O."""

    w_q: torch.Tensor
    w_k: torch.Tensor
    w_v: torch.Tensor
    w_o: torch.Tensor
    heads: int
    kv_heads: int
    head_dim: int

    def to(self, dtype: torch.dtype) -> DecoderLayer:
        return DecoderLayer(*(w.to(dtype) for w in (self.w_q, self.w_k, self.w_v, self.w_o)),
                            self.heads, self.kv_heads, self.head_dim)

    def project(self, x_BLD: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q (B, heads, L, D), k and v (B, kv_heads, L, D) of the tokens x."""
        def split(t: torch.Tensor, n: int) -> torch.Tensor:
            return t.unflatten(-1, (n, self.head_dim)).transpose(1, 2)

        return (split(x_BLD @ self.w_q, self.heads), split(x_BLD @ self.w_k, self.kv_heads),
                split(x_BLD @ self.w_v, self.kv_heads))

    def next_input(self, out_BHD: torch.Tensor) -> torch.Tensor:
        """The next token's input from the attention output at the last position: W_O, then RMS norm."""
        y = out_BHD.flatten(1) @ self.w_o
        return y / torch.sqrt(y.pow(2).mean(-1, keepdim=True) + NORM_EPS)


def make_layer(heads: int, kv_heads: int, head_dim: int, *, seed: int, dtype: torch.dtype,
               device: torch.device | str) -> DecoderLayer:
    """Seeded weights of variance 1/fan_in, so activations stay O(1)."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    d_model = heads * head_dim

    def weight(rows: int, cols: int) -> torch.Tensor:
        w = torch.randn(rows, cols, generator=generator, dtype=torch.float64) / math.sqrt(rows)
        return w.to(device=device, dtype=dtype)

    return DecoderLayer(weight(d_model, heads * head_dim), weight(d_model, kv_heads * head_dim),
                        weight(d_model, kv_heads * head_dim), weight(heads * head_dim, d_model),
                        heads, kv_heads, head_dim)


def backend_attend(backend: str, scale: float | None = None, **options: Any) -> Attend:
    """A causal attention call of one back end (bottom-right aligned: q_len = 1 sees every key)."""
    return lambda q, k, v: attention(q, k, v, backend=backend, causal=True, scale=scale, **options)


class Generation:
    """The state of one generation: the prompt prefilled, a buffer for the T new tokens.

    `run()` produces the T new tokens, (B, T, d_model), and may be called again: it rewrites the
    same cache positions and token slots, so every call does the same work from the same state.
    """

    def __init__(self, layer: DecoderLayer, prompt_BPD: torch.Tensor, new_tokens: int, *,
                 kv_cache: bool, attend: Attend) -> None:
        if new_tokens < 1:
            raise ValueError(f"new_tokens: expected an integer >= 1, got {new_tokens!r}")
        self.layer, self.attend, self.kv_cache, self.new_tokens = layer, attend, kv_cache, new_tokens
        b, p, d_model = prompt_BPD.shape
        self.prompt_len = p
        self.tokens = prompt_BPD.new_empty(b, p + new_tokens + 1, d_model)
        self.tokens[:, :p] = prompt_BPD
        total = p + new_tokens
        shape = (b, layer.kv_heads, total, layer.head_dim)
        self.cache_k = prompt_BPD.new_zeros(shape) if kv_cache else None
        self.cache_v = prompt_BPD.new_zeros(shape) if kv_cache else None
        with torch.no_grad():  # prefill: the prompt's pass, untimed and the same for both loops
            q, k, v = layer.project(prompt_BPD)
            if kv_cache:
                self.cache_k[:, :, :p], self.cache_v[:, :, :p] = k, v
            # Only the last prompt position's output is needed: its query against every prompt key
            # (a bottom-right causal q_len = 1 call is exactly that row of the causal pass), so a
            # long prompt costs a decode step here, not seq_len^2 scores.
            self.tokens[:, p] = layer.next_input(attend(q[:, :, -1:], k, v)[:, :, -1])

    def run(self) -> torch.Tensor:
        with torch.no_grad():
            step = self._cached_step if self.kv_cache else self._full_step
            for position in range(self.prompt_len, self.prompt_len + self.new_tokens):
                self.tokens[:, position + 1] = step(position)
        return self.tokens[:, self.prompt_len + 1:]

    def _cached_step(self, position: int) -> torch.Tensor:
        """One new token: project it, append its K and V, attend with q_len = 1 to the cache."""
        q, k, v = self.layer.project(self.tokens[:, position:position + 1])
        self.cache_k[:, :, position:position + 1], self.cache_v[:, :, position:position + 1] = k, v
        end = position + 1
        out = self.attend(q, self.cache_k[:, :, :end], self.cache_v[:, :, :end])
        return self.layer.next_input(out[:, :, -1])

    def _full_step(self, position: int) -> torch.Tensor:
        """Without a cache: project the whole prefix again and attend for all of its queries."""
        q, k, v = self.layer.project(self.tokens[:, :position + 1])
        return self.layer.next_input(self.attend(q, k, v)[:, :, -1])


def generate(layer: DecoderLayer, prompt_BPD: torch.Tensor, new_tokens: int, *, kv_cache: bool,
             attend: Attend) -> torch.Tensor:
    """The T = `new_tokens` tokens the layer generates after the prompt, (B, T, d_model)."""
    return Generation(layer, prompt_BPD, new_tokens, kv_cache=kv_cache, attend=attend).run().clone()


# --- counts (pure arithmetic on the point) ---

def _contexts(point: Point) -> range:
    """The context length of each step: the step at position p attends to p + 1 tokens."""
    return range(point.seq_len + 1, point.seq_len + point.new_tokens + 1)


def _projection_flops_per_token(point: Point) -> float:
    d_model, dim = point.d_model, point.head_dim
    return 2.0 * point.batch * d_model * (point.heads * dim + 2 * point.kv_heads_resolved * dim)


def generate_flops(point: Point) -> float:
    """FLOPs of the T steps: projections, attention (4 H D per seen pair) and W_O of the last token."""
    out_proj = 2.0 * point.batch * point.heads * point.head_dim * point.d_model
    total = 0.0
    for context in _contexts(point):
        if point.kv_cache:
            pairs, projected = context, 1
        else:  # every query of the prefix, causal: 1 + 2 + ... + context pairs
            pairs, projected = context * (context + 1) // 2, context
        total += 4.0 * point.batch * point.heads * point.head_dim * pairs
        total += _projection_flops_per_token(point) * projected + out_proj
    return total


def generate_bytes(point: Point) -> int:
    """The least bytes of the T steps: each reads the weights and its tokens' inputs (with the
    cache: one token and the K/V cache of its context, and writes one K/V entry; without: the
    whole prefix), and writes one new token."""
    s, b, dim, kv = point.element_bytes, point.batch, point.head_dim, point.kv_heads_resolved
    d_model = point.d_model
    weights = (d_model * (point.heads + 2 * kv) * dim + point.heads * dim * d_model) * s
    total = 0
    for context in _contexts(point):
        if point.kv_cache:
            total += weights + b * d_model * s + 2 * b * kv * context * dim * s + 2 * b * kv * dim * s
        else:
            total += weights + b * context * d_model * s
        total += b * d_model * s  # the new token
    return total


# --- the sweep's workload (scope=generate): the timed call is the loop of T steps ---

def build_workload(point: Point, dtype: torch.dtype, device: torch.device, rows: torch.Tensor):
    """selfattn.measure.workload.Workload of one generation: `call` runs the T steps; accuracy
    compares all T new tokens with a float64 run of the cached loop on the reference attention
    (tests/test_decode.py checks that the cached and uncached loops agree). Stability metrics
    are the core's business: `stability_inputs` is None and the runner skips them."""
    from selfattn.inputs import make_x
    from selfattn.measure.workload import Result, Workload
    from selfattn.masks import Masks
    from selfattn.point import parse_scale
    from selfattn.reference import attention_reference

    scale = parse_scale(point.scale)
    kv = point.kv_heads_resolved
    layer = make_layer(point.heads, kv, point.head_dim, seed=point.seed, dtype=dtype, device=device)
    prompt = make_x(point.batch, point.seq_len, point.d_model, dtype=dtype, device=device,
                    std=point.input_std, seed=point.seed)
    run = Generation(layer, prompt, point.new_tokens, kv_cache=point.kv_cache,
                     attend=backend_attend(point.backend, scale, **dict(point.backend_options)))

    def check_call() -> Result:
        return Result(run.run().clone(), None)

    def reference() -> Result:
        def attend64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return attention_reference(q, k, v, causal=True, scale=scale)

        out = generate(layer.to(torch.float64), prompt.to(torch.float64), point.new_tokens, kv_cache=True,
                       attend=attend64)
        return Result(out, None)

    upstream = torch.zeros(point.batch, point.heads, 1, point.head_dim, dtype=dtype, device=device)
    return Workload(run.run, check_call, reference, None, upstream, rows, Masks(causal=True))


def generate_step(point: Point) -> Point:
    """The loop's largest step as a core point: q_len = 1 against the full cache, or (no cache) a
    causal pass over the whole prefix. The memory guard sizes a generation by it."""
    from dataclasses import replace

    total = point.seq_len + point.new_tokens
    return replace(point, scope="core", seq_len=total, q_len=1 if point.kv_cache else None)


def generate_state_bytes(point: Point) -> int:
    """What a generation keeps between steps: the token buffer, the K/V cache (with it), and the
    step's projections of its tokens (one token with the cache, the whole prefix without)."""
    s, total = point.element_bytes, point.seq_len + point.new_tokens
    tokens = point.batch * (total + 1) * point.d_model * s
    cache = 2 * point.batch * point.kv_heads_resolved * total * point.head_dim * s if point.kv_cache else 0
    projected = point.batch * (1 if point.kv_cache else total) * (point.heads + 2 * point.kv_heads_resolved) * point.head_dim * s
    return tokens + cache + projected
