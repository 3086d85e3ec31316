"""Autoregressive generation through one attention layer, with and without a KV-cache.

The layer is selfattn.layer's MultiHeadSelfAttention (causal, with its kv_heads: grouped-query
attention shrinks the cache). A prompt of P tokens, then T new ones: each new token's input is
the layer's output at the last position (RMS-normalized, so the stream neither grows nor fades
over T steps). Two loops produce the same T tokens:

- with the cache: K and V of every token so far sit in a preallocated (B, kv_heads, P + T, D)
  cache; a step projects only the new token, appends its K and V, and runs one q_len = 1
  attention against the cache. Its cost grows linearly with the context.
- without it: a step projects every token of the prefix again and runs causal attention for
  every query of the prefix, as a model without a cache must (only the last output is used).
  Its cost grows with the square of the context.

The timed loop is the T steps; the prompt's own pass (prefill: the cache's first P entries and
the first new token's input) is done once before, the same for both, so the two loops differ
only in what the cache saves. What scope=generate measures (the workload, its FLOPs, bytes and
memory) sits beside the other scopes in selfattn/measure/.
"""

from __future__ import annotations

from typing import Callable

import torch

from selfattn.layer import MultiHeadSelfAttention

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]  # (q, k, v) -> out, causal
NORM_EPS = 1e-6


def next_input(layer: MultiHeadSelfAttention, out_BHD: torch.Tensor) -> torch.Tensor:
    """The next token's input (B, d_model) from the attention output at the last position: W_O, then RMS norm."""
    y = layer.w_o(out_BHD.flatten(1))  # the heads side by side, as merge_heads lays them out
    return y / torch.sqrt(y.pow(2).mean(-1, keepdim=True) + NORM_EPS)


class Generation:
    """The state of one generation: the prompt prefilled, a buffer for the T new tokens.

    `run()` produces the T new tokens, (B, T, d_model), and may be called again: it rewrites the
    same cache positions and token slots, so every call does the same work from the same state.
    `attend` replaces the layer's own attention core (the float64 reference run passes one);
    either way it must be causal, bottom-right aligned (q_len = 1 sees every key).
    """

    def __init__(self, layer: MultiHeadSelfAttention, prompt_BPD: torch.Tensor, new_tokens: int, *,
                 kv_cache: bool, attend: Attend | None = None) -> None:
        if new_tokens < 1:
            raise ValueError(f"new_tokens: expected an integer >= 1, got {new_tokens!r}")
        if attend is None and not layer.causal:
            raise ValueError("layer: generation is autoregressive, so the layer must be causal, got causal=False")
        self.layer, self.kv_cache, self.new_tokens = layer, kv_cache, new_tokens
        self.attend = layer.attend if attend is None else attend
        b, p, d_model = prompt_BPD.shape
        self.prompt_len = p
        self.tokens = prompt_BPD.new_empty(b, p + new_tokens + 1, d_model)
        self.tokens[:, :p] = prompt_BPD
        total = p + new_tokens
        shape = (b, layer.kv_heads, total, layer.head_dim)
        # the KV-cache; without one, empty tensors no step reads
        self.cache_k = prompt_BPD.new_zeros(shape if kv_cache else (0,))
        self.cache_v = prompt_BPD.new_zeros(shape if kv_cache else (0,))
        with torch.no_grad():  # prefill: the prompt's pass, untimed and the same for both loops
            q, k, v = layer.project_qkv(prompt_BPD)
            if kv_cache:
                self.cache_k[:, :, :p], self.cache_v[:, :, :p] = k, v
            # Only the last prompt position's output is needed: its query against every prompt key
            # (a bottom-right causal q_len = 1 call is exactly that row of the causal pass), so a
            # long prompt costs a decode step here, not seq_len^2 scores.
            self.tokens[:, p] = next_input(layer, self.attend(q[:, :, -1:], k, v)[:, :, -1])

    def run(self) -> torch.Tensor:
        with torch.no_grad():
            step = self._cached_step if self.kv_cache else self._full_step
            for position in range(self.prompt_len, self.prompt_len + self.new_tokens):
                self.tokens[:, position + 1] = step(position)
        return self.tokens[:, self.prompt_len + 1:]

    def _cached_step(self, position: int) -> torch.Tensor:
        """One new token: project it, append its K and V, attend with q_len = 1 to the cache."""
        q, k, v = self.layer.project_qkv(self.tokens[:, position:position + 1])
        self.cache_k[:, :, position:position + 1], self.cache_v[:, :, position:position + 1] = k, v
        end = position + 1
        out = self.attend(q, self.cache_k[:, :, :end], self.cache_v[:, :, :end])
        return next_input(self.layer, out[:, :, -1])

    def _full_step(self, position: int) -> torch.Tensor:
        """Without a cache: project the whole prefix again and attend for all of its queries."""
        q, k, v = self.layer.project_qkv(self.tokens[:, :position + 1])
        return next_input(self.layer, self.attend(q, k, v)[:, :, -1])


def generate(layer: MultiHeadSelfAttention, prompt_BPD: torch.Tensor, new_tokens: int, *, kv_cache: bool,
             attend: Attend | None = None) -> torch.Tensor:
    """The T = `new_tokens` tokens the layer generates after the prompt, (B, T, d_model)."""
    return Generation(layer, prompt_BPD, new_tokens, kv_cache=kv_cache, attend=attend).run().clone()
