"""Permutation equivariance, measured: attention has no notion of position, so permuting the
tokens permutes the outputs, attn(PQ, PK, PV) = P attn(Q, K, V), up to rounding. A causal mask
ties each query's visible keys to its position, so there the identity breaks.

The check runs the point's back end, options, precision, heads, head_dim and causal flag (the
other masks tie keys to positions too, so they are left out) on unit-std inputs, so an fp16
point that overflows by design still checks the structure rather than its overflow. Its size:

- Eager back ends: a short self-attention sequence, at most PERM_TOKENS tokens of one sequence
  (the property does not depend on n, and so the check adds next to nothing to a large point).
- Compiled back ends (`at_point_shape`): the point's own call, every dimension, memory layout
  (scope=layer's heads are a transposed view of the projection) and grad mode as in the timed
  calls, so the two calls run the code the point compiled. Dynamo specializes on all of these
  (static shapes), so a 128-token check was a second compilation outside compile_s and the
  guard, on CUDA another 10-40 s per shape. The point's mask arguments are replaced by ones
  of the same kind that hide nothing (a window wider than the sequence, full key lengths, one
  document), which keeps the compiled code's inputs of the same shapes while the check means
  what it means for the eager back ends: causal or no mask. Two forward calls of the point's
  size are a fraction of what the point runs anyway (warm-up, memory call, at least
  timing.MIN_SAMPLES timed calls); the guard counts their time and memory (measure/guard.py).

A positional encoding is applied as the point applies it, after the tokens are permuted (a
position is a slot, not a property of the token): rope rotates the permuted q and k at their
slots; sinusoidal and learned (scope=layer) add their table to the permuted X before the seeded
layer's projections. Each breaks the identity: that is what gives the model a notion of order.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from typing import Callable

from selfattn.api import attention
from selfattn.backends.resolved import Resolved
from selfattn.inputs import make_qkv, make_x, point_masks
from selfattn.masks import Masks
from selfattn.point import Point, parse_scale
from selfattn.scopes import SCOPES
from selfattn.positions import ADDED, rope_qk

PERM_TOKENS = 128
PERM_SEED_OFFSET = 3_000_017  # its own stream: the point's inputs and upstreams stay as they are
POINT_SHAPE_CALLS = 2  # forward calls of the point's size the check makes at_point_shape (the guard counts them)


def permutation_max_abs_diff(point: Point, dtype: torch.dtype, device: torch.device | str, resolved: Resolved, *,
                             at_point_shape: bool = False) -> float:
    """max |attn(PQ, PK, PV) - P attn(Q, K, V)| for one seeded random permutation P of the tokens.

    at_point_shape: check at the point's own call shape, layout and grad mode (compiled back
    ends: no second compilation), rather than on at most PERM_TOKENS tokens of one sequence. `resolved`: the
    point's back end as measure_point resolved it (resolve_point), run with its options as they are."""
    if at_point_shape:
        return _at_point_shape(point, dtype, device, resolved)
    n = min(point.seq_len, PERM_TOKENS)
    seed = point.seed + PERM_SEED_OFFSET
    inputs = _token_inputs(point, 1, n, n, point.heads, dtype, device, seed, resolved)
    perm = torch.randperm(n, generator=torch.Generator(device="cpu").manual_seed(seed)).to(device)
    scale = parse_scale(point.scale)

    def run(q_: torch.Tensor, k_: torch.Tensor, v_: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return attention(q_, k_, v_, backend=resolved, causal=point.causal, scale=scale)

    permuted = run(*inputs(perm, perm))
    expected = run(*inputs(None, None))[:, :, perm]
    return float((permuted.double() - expected.double()).abs().max())


def _token_inputs(point: Point, b: int, q_len: int, seq_len: int, kv_heads: int, dtype: torch.dtype,
                  device: torch.device | str, seed: int, resolved: Resolved) -> Callable:
    """(perm_q, perm_k) -> q, k, v as the attention gets them: the seeded tokens permuted (None: not),
    then the point's positional encoding applied at their slots."""
    if point.pos_enc in ADDED:  # X + PE through the seeded layer's projections
        from selfattn.layer import MultiHeadSelfAttention

        layer = MultiHeadSelfAttention(point.d_model, point.heads, kv_heads=kv_heads, pos_enc=point.pos_enc,
                                       max_len=seq_len, backend=resolved)
        layer.reset_parameters(seed=point.seed)
        layer = layer.to(device=device, dtype=dtype)
        x = make_x(b, seq_len, point.d_model, dtype=dtype, device=device, seed=seed)

        def from_x(perm_q: torch.Tensor | None, perm_k: torch.Tensor | None):
            with torch.no_grad():
                return layer.project_qkv(layer.encode(x if perm_q is None else x[:, perm_q]))
        return from_x
    q, k, v = make_qkv(b, point.heads, q_len, seq_len, point.head_dim, dtype=dtype, device=device, seed=seed,
                       kv_heads=kv_heads)
    rotate_qk = rope_qk(q_len, seq_len, point.head_dim, dtype=dtype, device=device) if point.pos_enc == "rope" else None

    def permuted(perm_q: torch.Tensor | None, perm_k: torch.Tensor | None):
        q_, k_, v_ = (q, k, v) if perm_q is None else (q[:, :, perm_q], k[:, :, perm_k], v[:, :, perm_k])
        return (*rotate_qk(q_, k_), v_) if rotate_qk else (q_, k_, v_)
    return permuted


def point_shape_bytes(point: Point) -> int:
    """Bytes the check holds at_point_shape beside the back end's own peak: Q, K, V and their
    permuted copies, and the two outputs (a layer's q, k, v have the core's shapes)."""
    return 2 * (point.out_bytes + point.kv_bytes) + 2 * point.out_bytes


def _at_point_shape(point: Point, dtype: torch.dtype, device: torch.device | str, resolved: Resolved) -> float:
    """The check on the point's own call: its shapes, layout, grad mode and mask kinds (see the module doc)."""
    layer = SCOPES[point.scope].over_x
    b, h, kv_heads, d = point.batch, point.heads, point.kv_heads_resolved, point.head_dim
    q_len, seq_len = (point.seq_len if layer else point.q_len_resolved), point.seq_len
    seed = point.seed + PERM_SEED_OFFSET
    grad = point.mode == "fwd_bwd"
    inputs = _token_inputs(point, b, q_len, seq_len, kv_heads, dtype, device, seed, resolved)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    perm_q = torch.randperm(q_len, generator=generator).to(device)
    # self-attention permutes queries and keys alike; with q_len != seq_len (no mask) each side has its own P
    perm_k = perm_q if q_len == seq_len else torch.randperm(seq_len, generator=generator).to(device)
    masks = None if layer else _neutral(point_masks(point, device), q_len, seq_len)  # a layer: causal only
    mask_args = dict(causal=point.causal) if masks is None else dict(
        causal=masks.causal, window=masks.window, key_lengths=masks.key_lengths, document_ids=masks.document_ids)
    if masks is not None and masks.mask_mod is not None:  # a mask function's path, hiding nothing (selfattn/mods/)
        from selfattn.mods.catalogue import none as see_all

        mask_args["mask_mod"] = see_all()
    scale = parse_scale(point.scale)

    def as_called(t_BHLD: torch.Tensor) -> torch.Tensor:
        """`t` laid out as the timed call gets it, requiring grad when that call does."""
        if layer:  # split_heads: a (B, L, heads, d_k) projection seen as (B, heads, L, d_k)
            t_BHLD = t_BHLD.transpose(1, 2).contiguous().transpose(1, 2)
        return t_BHLD.detach().requires_grad_(grad)

    def run(q_: torch.Tensor, k_: torch.Tensor, v_: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad() if grad else torch.no_grad():  # grad mode is part of what was compiled
            out = attention(as_called(q_), as_called(k_), as_called(v_), backend=resolved, scale=scale, **mask_args)
        return out.detach()

    expected = run(*inputs(None, None))[:, :, perm_q]
    permuted = run(*inputs(perm_q, perm_k))
    return float((permuted.double() - expected.double()).abs().max())


def _neutral(masks: Masks, q_len: int, seq_len: int) -> Masks:
    """Mask arguments of the same kinds and shapes as `masks` that hide nothing beyond causal."""
    return replace(
        masks,
        window=None if masks.window is None else q_len + seq_len,  # wider than the sequence: hides no key
        key_lengths=None if masks.key_lengths is None else torch.full_like(masks.key_lengths, seq_len),
        document_ids=None if masks.document_ids is None else torch.zeros_like(masks.document_ids),  # one document
    )
