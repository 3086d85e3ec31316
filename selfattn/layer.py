"""The multi-head self-attention layer around the core (the chapter's steps 1-2 and W_O).

X (B, L, d_model) -> Q = X W_Q, split into `heads` heads of d_k = d_model / heads; K = X W_K and
V = X W_V, split into `kv_heads` heads of d_k (grouped-query attention: fewer K/V heads, each
shared by heads / kv_heads query heads; kv_heads = heads is plain multi-head) -> any back end ->
concat heads -> W_O. scope=layer measures its forward pass, and the generation loop
(selfattn/decode.py) runs its projections and W_O one token at a time.

`pos_enc` (selfattn/positions.py): sinusoidal or learned tables of `max_len` positions added to X
before the projections, or rope rotating q and k per head after them; none by default. Tables
are buffers, recomputed in float64 and rounded once to the layer's dtype whenever the layer moves
or casts (`_apply`): a float64 copy of an fp16 layer has exact tables, not fp16 ones cast up.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from selfattn import positions
from selfattn.api import resolve_for_call
from selfattn.backends.registry import Backend, get_backend
from selfattn.backends.resolved import Resolved
from selfattn.fields import check_fields
from selfattn.validate import check_bool, check_masks, check_positive_int, check_seed, resolve_scale


class MultiHeadSelfAttention(nn.Module):
    def __init__(
        self,
        d_model: int,
        heads: int,
        *,
        kv_heads: int | None = None,
        backend: Any = "naive",
        causal: bool = False,
        scale: float | None = None,
        bias: bool = False,
        pos_enc: str = "none",
        max_len: int | None = None,
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
        # the back end, looked up once: a name or a registry.Backend (unknown ones and bad options fail now), or a
        # Resolved (a point's, from resolve_point: its options with it, resolved and asked once for the point)
        self.resolved = backend if isinstance(backend, Resolved) else None
        if self.resolved is not None and backend_options:
            raise ValueError("backend_options: a resolved back end carries its own options, "
                             f"got {sorted(backend_options)}")
        self.backend_entry: Backend = (self.resolved.backend if self.resolved is not None
                                       else get_backend(backend) if isinstance(backend, str) else backend)
        check_fields(self.backend_entry.options_type, backend_options, fill_defaults=False)
        self.backend, self.causal, self.scale = self.backend_entry.name, causal, scale
        self.backend_options = dict(backend_options)
        self._calls: dict[tuple, Resolved] = {}  # (device, dtype, backward) -> the back end resolved for those calls
        kv_dim = kv_heads * self.head_dim
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, kv_dim, bias=bias)
        self.w_v = nn.Linear(d_model, kv_dim, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.pos_enc, self.max_len = self._check_positions(pos_enc, max_len)
        self.table_rows = self.max_len or 0  # the positions the tables hold (0: pos_enc=none has none)
        self.pos_table: torch.Tensor  # learned: a Parameter; sinusoidal: a buffer (rope: rope_cos, rope_sin)
        self.rope_cos: torch.Tensor
        self.rope_sin: torch.Tensor
        if pos_enc == "learned":
            self.pos_table = nn.Parameter(torch.empty(self.table_rows, d_model))
        self.reset_parameters(seed=0)
        self.reset_positions()

    def _check_positions(self, pos_enc: str, max_len: int | None) -> tuple[str, int | None]:
        from selfattn.point import POS_ENCODINGS

        if pos_enc not in POS_ENCODINGS:
            raise ValueError(f"pos_enc: expected one of {', '.join(POS_ENCODINGS)}, got {pos_enc!r}")
        if pos_enc == "none":
            return pos_enc, max_len
        if max_len is None:
            raise ValueError(f"max_len: pos_enc={pos_enc} needs the number of positions its tables hold, got None")
        if pos_enc == "rope" and self.head_dim % 2:
            raise ValueError(f"pos_enc: rope rotates pairs of features, so head_dim must be even, got {self.head_dim}")
        return pos_enc, check_positive_int("max_len", max_len)

    def _apply(self, fn, *args, **kwargs):  # .to(), .double(), .cuda(): the tables follow, computed afresh
        out = super()._apply(fn, *args, **kwargs)
        if getattr(self, "pos_enc", "none") != "none":
            self.reset_positions()
        return out

    @torch.no_grad()
    def reset_positions(self) -> None:
        """The sinusoidal or RoPE tables of positions 0..max_len-1, computed in float64, in the layer's dtype."""
        like = self.w_q.weight
        if self.pos_enc == "sinusoidal":
            table = positions.sinusoidal_table(self.table_rows, self.d_model, dtype=like.dtype, device=like.device)
            self.register_buffer("pos_table", table, persistent=False)
        elif self.pos_enc == "rope":
            cos, sin = positions.rope_tables(torch.arange(self.table_rows), self.head_dim, dtype=like.dtype,
                                             device=like.device)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

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
        if self.pos_enc == "learned":  # drawn apart from the weights: W_Q..W_O are those of pos_enc=none
            self.pos_table.copy_(positions.learned_table(self.table_rows, self.d_model, seed=seed))

    def encode(self, x_BLD: torch.Tensor) -> torch.Tensor:
        """X with the sinusoidal or learned encoding of positions 0..L-1 added (X itself otherwise)."""
        if self.pos_enc not in positions.ADDED:
            return x_BLD
        length = x_BLD.shape[1]
        if length > self.table_rows:
            raise ValueError(f"x: pos_enc={self.pos_enc} holds max_len={self.max_len} positions, got {length} tokens")
        return x_BLD + self.pos_table[:length]

    def rotate(self, t_BHLD: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """q or k rotated at positions 0..L-1 (or at `rows`, the positions of sampled rows) with rope; else t."""
        if self.pos_enc != "rope":
            return t_BHLD
        cos, sin = (self.rope_cos, self.rope_sin) if rows is None else (self.rope_cos[rows], self.rope_sin[rows])
        length = t_BHLD.shape[2]
        return positions.rotate(t_BHLD, cos[:length], sin[:length])
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
        """The attention core of this layer: its back end, mask and scale on given q, k, v (selfattn.attention's
        call, its options resolved and its capability asked once per device, dtype and grad state; a layer made
        with a point's Resolved runs that one)."""
        masks = check_masks(self.causal, None, None, None, batch=q.shape[0], q_len=q.shape[2], seq_len=k.shape[2],
                            device=q.device)
        key = (q.device, q.dtype, torch.is_grad_enabled() and q.requires_grad)
        if key not in self._calls:
            self._calls[key] = resolve_for_call(self.resolved or self.backend_entry, q, k, masks, self.backend_options)
        return self._calls[key].run(q, k, v, masks=masks, scale=resolve_scale(self.scale, self.head_dim))

    def forward(self, x_BLD: torch.Tensor) -> torch.Tensor:
        # q, k, v stay referenced until W_O has run, as the memory model (measure/predict.py) counts them:
        # freeing them before W_O would lower a layer point's peak below what its rows have always recorded.
        q, k, v = self.project_qkv(self.encode(x_BLD))
        out_BHLD = self.attend(self.rotate(q), self.rotate(k), v)
        return self.w_o(self.merge_heads(out_BHLD))

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, heads={self.heads}, kv_heads={self.kv_heads}, backend={self.backend!r}, "
                f"causal={self.causal}" + (f", pos_enc={self.pos_enc!r}" if self.pos_enc != "none" else ""))
