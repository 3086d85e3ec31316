"""What one point runs: its inputs, the timed call, and the float64 reference of its sampled rows.

Each scope's module builds its own (selfattn/scopes/: core on seeded Q, K, V, layer on a seeded X, generate's loop
of T steps as one timed call, lstm/gru's recurrence); this module holds what they share. mode=fwd runs under no_grad; mode=fwd_bwd runs forward, then
torch.autograd.grad with a fixed upstream gradient, so nothing accumulates in .grad between
calls. The upstream of the timed calls is dense random; the warm-up call uses one that is
random on the sampled rows and zero elsewhere (same kernels, same cost), so its gradients can
be checked against a float64 reference computed on those rows only.

For the correctness verdict (selfattn/measure/verdict.py) a workload also gives its plain same-dtype
reference (`plain`: the float64 reference's steps in the point's dtype, or its FP8 recipe), the inputs
the back end is handed (checked unchanged after the calls), how to read the sampled rows out of a timed
call's output, and `build(..., values_seed=...)` builds the same point on independently seeded values
(the same masks, weights and shapes: only Q, K, V, X or the prompt are drawn again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from selfattn.backends.resolved import Resolved
from selfattn.inputs import randn
from selfattn.masks import Masks
from selfattn.point import Point
from selfattn.scopes import declared

UPSTREAM_SEED_OFFSET = 1_000_003  # the upstream gradient's seed differs from the inputs'
STABILITY_SEED_OFFSET = 2_000_003  # and the stability loss's upstream from both


@dataclass
class Result:
    """What one call produced, reduced to what accuracy needs: sampled output rows, gradients."""

    out_rows: torch.Tensor
    grads: list[torch.Tensor] | None


@dataclass
class Workload:
    call: Callable[[], Any]  # one timed call (dense upstream for fwd_bwd)
    check_call: Callable[[], Result]  # the warm-up: same work, upstream on the sampled rows
    reference: Callable[[], Result]  # float64, sampled rows only
    # q's sampled rows, k, v and the rows: what the stability pass reads (None: no attention to look inside)
    stability_inputs: Callable[[], tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] | None
    upstream_rows: torch.Tensor  # (B, H, rows, D) in the point's dtype, for the stability loss
    rows: torch.Tensor
    masks: Masks  # the point's masks, padding and documents drawn from its seed
    kernel_ran: Callable[[], str | None] = lambda: None  # the kernel the call runs, where the back end can tell
    # one-time set-up the calls reuse, timed apart: {row column: seconds} (flex: block_mask_s)
    prepare: Callable[[], dict[str, float]] = lambda: {}
    # the verdict's plain same-dtype reference of the sampled rows (None: the scope is not judged)
    plain: Callable[[], Result] | None = None
    inputs: dict[str, torch.Tensor] | None = None  # what the back end is handed, checked unchanged after its calls
    timed_rows: Callable[[Any], torch.Tensor] | None = None  # a timed call's output -> its sampled output rows
    magnitude: Callable[[], float] | None = None  # the largest magnitude an output is made of (the atol's scale)
    # the tensors every call reads afresh, which selfattn/measure/fresh.py refreshes between timed calls (None: the
    # scope's calls keep their inputs), and what copies them into the back end's converted inputs (a BSHD plugin's)
    values: dict[str, torch.Tensor] | None = None
    sync_inputs: Callable[[], None] | None = None


def seeded_randn(shape: tuple[int, ...], seed: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    # drawn where the inputs are (selfattn/inputs.py): on the host for a CPU, on the device for a GPU
    return randn(shape, dtype=dtype, device=device, seed=seed)


def on_rows(upstream: torch.Tensor, rows: torch.Tensor, row_dim: int) -> torch.Tensor:
    """`upstream` kept on `rows` along `row_dim`, zero elsewhere."""
    sparse = torch.zeros_like(upstream)
    index: list[Any] = [slice(None)] * upstream.dim()
    index[row_dim] = rows
    sparse[tuple(index)] = upstream[tuple(index)]
    return sparse


def build(point: Point, dtype: torch.dtype, device: torch.device, rows: torch.Tensor, *, resolved: Resolved,
          values_seed: int | None = None) -> Workload:
    """The point's workload, as its scope's module builds it (selfattn/scopes/); `values_seed` draws its inputs'
    values from another seed (the verdict's second input). `resolved`: the point's back end as measure_point
    resolved it (resolve_point, once per point)."""
    scope = declared(point)
    if scope.build is None:
        raise ValueError(f"scope: {point.scope} runs no timed call (its own loop measures it), so it has no workload")
    return scope.build(point, dtype, device, rows, point.seed if values_seed is None else values_seed, resolved)


def plain_dtype(point: Point, dtype: torch.dtype) -> torch.dtype:
    """The dtype of the plain reference: the point's own, but fp32 for fp64 (verdict.py's fp64 rule)."""
    return torch.float32 if dtype == torch.float64 else dtype


def backend_hook(hook: str, resolved: Resolved, point: Point, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  masks: Masks) -> Any:
    """The back end's `kernel_ran` (which kernel these inputs run, sdpa's `auto`) or `prepare` (one-time set-up,
    flex's block mask, with its seconds) on these inputs."""
    if hook == "prepare":  # the masks' own decisions (rows that see no key), whichever back end asks them
        masks.prepare(q.shape[2], k.shape[2])
    with torch.no_grad():
        call = getattr(resolved.backend, hook)
        return call(q.detach(), k.detach(), v.detach(), masks=masks, scale=point.scale_value, **resolved.options)


def stability_upstream(point: Point, rows: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The fixed upstream of the stability loss: (B, H, rows, D), seeded, in the point's dtype."""
    shape = (point.batch, point.heads, rows, point.head_dim)
    return seeded_randn(shape, point.seed + STABILITY_SEED_OFFSET, dtype, device)
