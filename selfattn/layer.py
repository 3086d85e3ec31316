"""The multi-head self-attention layer around the core (the chapter's steps 1-2 and W_O).

X (B, L, d_model) -> Q = X W_Q, split into `heads` heads of d_k = d_model / heads; K = X W_K and
V = X W_V, split into `kv_heads` heads of d_k (grouped-query attention: fewer K/V heads, each
shared by heads / kv_heads query heads; kv_heads = heads is plain multi-head) -> any back end ->
concat heads -> W_O. scope=layer measures its forward pass, and the generation loop
(selfattn/decode.py) runs its projections and W_O one token at a time.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from selfattn.api import attention
from selfattn.backends import resolve_options
from selfattn.validate import check_bool, check_positive_int, check_seed, resolve_scale


class MultiHeadSelfAttention(nn.Module):
    def __init__(
        self,
        d_model: int,
        heads: int,
        *,
        kv_heads: int | None = None,
        backend: str = "naive",
        causal: bool = False,
        scale: float | None = None,
        bias: bool = False,
        **backend_options: Any,
    ) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("heads", heads)
        if d_model % heads:
            raise ValueError(f"heads: must divide d_model={d_model}, got heads={heads}")
        kv_heads = heads if kv_heads is None else check_positive_int("kv_heads", kv_heads)
        if heads % kv_heads:
            raise ValueError(f"kv_heads: must divide heads={heads}, got {kv_heads}")
        check_bool("causal", causal)
        check_bool("bias", bias)
        self.d_model, self.heads, self.kv_heads, self.head_dim = d_model, heads, kv_heads, d_model // heads
        resolve_scale(scale, self.head_dim)  # fail at construction, not at the first forward
        resolve_options(backend, backend_options)  # unknown back end or option: fail now too
        self.backend, self.causal, self.scale = backend, causal, scale
        self.backend_options = dict(backend_options)
        kv_dim = kv_heads * self.head_dim
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, kv_dim, bias=bias)
        self.w_v = nn.Linear(d_model, kv_dim, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.reset_parameters(seed=0)

    @torch.no_grad()
    def reset_parameters(self, seed: int = 0) -> None:
        """Deterministic init from `seed`: weights N(0, 1/d_model) so Q, K, V keep X's scale.

        Drawn in float64 on the CPU from a private generator, W_Q, W_K, W_V, W_O in that order,
        and copied into the current dtype and device, so a layer point is reproducible anywhere.
        Biases start at zero.
        """
        check_seed(seed)
        generator = torch.Generator(device="cpu").manual_seed(seed)
        std = 1.0 / math.sqrt(self.d_model)  # every projection's fan-in is d_model
        for linear in (self.w_q, self.w_k, self.w_v, self.w_o):
            w = torch.randn(linear.weight.shape, generator=generator, dtype=torch.float64) * std
            linear.weight.copy_(w)
            if linear.bias is not None:
                linear.bias.zero_()

    def project_qkv(self, x_BLD: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The core's inputs for X: q (B, heads, L, d_k), k and v (B, kv_heads, L, d_k)."""
        if not isinstance(x_BLD, torch.Tensor) or x_BLD.dim() != 3 or x_BLD.shape[-1] != self.d_model:
            shape = tuple(x_BLD.shape) if isinstance(x_BLD, torch.Tensor) else type(x_BLD).__name__
            raise ValueError(f"x: expected shape (batch, seq_len, {self.d_model}), got {shape}")
        return self.split_heads(self.w_q(x_BLD)), self.split_heads(self.w_k(x_BLD)), self.split_heads(self.w_v(x_BLD))

    def split_heads(self, t_BLE: torch.Tensor) -> torch.Tensor:
        """(B, L, n x d_k) -> (B, n, L, d_k): head h is columns h*d_k .. (h+1)*d_k of the projection
        (n = heads for Q, kv_heads for K and V)."""
        b, length, width = t_BLE.shape
        return t_BLE.reshape(b, length, width // self.head_dim, self.head_dim).transpose(1, 2)

    def merge_heads(self, out_BHLD: torch.Tensor) -> torch.Tensor:
        """(B, heads, L, d_k) -> (B, L, d_model): the heads side by side, W_O's input."""
        b, _, length, _ = out_BHLD.shape
        return out_BHLD.transpose(1, 2).reshape(b, length, self.d_model)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The attention core of this layer: its back end, mask and scale on given q, k, v."""
        return attention(q, k, v, backend=self.backend, causal=self.causal, scale=self.scale, **self.backend_options)

    def forward(self, x_BLD: torch.Tensor) -> torch.Tensor:
        # q, k, v stay referenced until W_O has run, as the memory model (measure/predict.py) counts them:
        # freeing them before W_O would lower a layer point's peak below what its rows have always recorded.
        q, k, v = self.project_qkv(x_BLD)
        out_BHLD = self.attend(q, k, v)
        return self.w_o(self.merge_heads(out_BHLD))

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, heads={self.heads}, kv_heads={self.kv_heads}, backend={self.backend!r}, "
                f"causal={self.causal}")
