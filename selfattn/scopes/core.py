"""scope=core: the attention call itself on given Q, K, V (selfattn.attention's contract).

Its FLOPs are the field's count over the pairs its masks let through (selfattn/measure/flops.py), its bytes Q, K, V and
O (and with fwd_bwd dO, dQ, dK, dV), its memory the back end's own model (each back end's module) plus RoPE's
rotated copies; score=additive is its own computation (selfattn/additive.py), whichever back end was named."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from selfattn.scopes.declaration import Scope

if TYPE_CHECKING:
    import torch

    from selfattn.backends.resolved import Resolved
    from selfattn.masks import Masks
    from selfattn.measure.workload import Workload
    from selfattn.point import Point


def input_bytes(point: Point) -> int:
    """Q, K, V (K and V per K/V head) and, with fwd_bwd, the upstream gradient."""
    from selfattn.measure.predict import stored_bytes

    q = point.batch * point.heads * point.q_len_resolved * point.head_dim * stored_bytes(point)
    return q + point.kv_bytes + (q if point.mode == "fwd_bwd" else 0)


def call_bytes(point: Point, resolved: Resolved, device: str) -> int:
    """The back end's memory model of the call, plus RoPE's rotated q and k; additive scores' own model."""
    if point.score == "additive":
        from selfattn.additive import predict_mem_bytes as additive_mem_bytes

        return int(additive_mem_bytes(point))
    from selfattn.measure.predict import rope_bytes

    return int(resolved.backend.mem_bytes(point, resolved.options, device) + rope_bytes(point))


def flops(point: Point) -> float:
    from selfattn.measure.flops import additive_flops, attention_flops

    return additive_flops(point) if point.score == "additive" else attention_flops(point)


def bytes_moved(point: Point) -> int:
    """Reads Q, K, V (K and V once per K/V head) and writes O; fwd_bwd also reads dO and writes dQ, dK, dV."""
    q = point.batch * point.heads * point.q_len_resolved * point.head_dim * point.element_bytes
    total = q + point.kv_bytes + point.out_bytes
    return total + (point.out_bytes + point.grad_bytes if point.mode == "fwd_bwd" else 0)


def drawn(point: Point, rows: int) -> list[int]:
    """q, k, v, the stability pass's upstream of the sampled rows and, with fwd_bwd, the dense upstream."""
    b, h, d, q_len = point.batch, point.heads, point.head_dim, point.q_len_resolved
    kv = b * point.kv_heads_resolved * point.seq_len * d
    upstream = [b * h * q_len * d] if point.mode == "fwd_bwd" else []
    return [b * h * q_len * d, kv, kv, b * h * min(rows, q_len) * d, *upstream]


def reference_bytes(point: Point, rows: int) -> int:
    from selfattn.measure.predict import attention_pass_bytes

    return attention_pass_bytes(point, rows, point.seq_len, stability=True)


def build(point: Point, dtype: torch.dtype, device: torch.device, rows: torch.Tensor, seed: int,
          resolved: Resolved) -> Workload:
    """Seeded Q, K, V; the timed call is the resolved back end's (or additive scores' own computation); the float64
    reference computes the sampled rows (`rows`) only."""
    import torch

    from selfattn.inputs import make_qkv, point_masks
    from selfattn.measure.workload import (UPSTREAM_SEED_OFFSET, Result, Workload, backend_hook, on_rows, plain_dtype,
                                           seeded_randn, stability_upstream)
    from selfattn.point import parse_scale
    from selfattn.positions import query_positions, rope, rope_qk
    from selfattn.reference import attention_reference

    b, h, q_len, seq_len, d = point.batch, point.heads, point.q_len_resolved, point.seq_len, point.head_dim
    scale = parse_scale(point.scale)
    grad = point.mode == "fwd_bwd"
    q, k, v = make_qkv(b, h, q_len, seq_len, d, dtype=dtype, device=device, std=point.input_std, seed=seed,
                       requires_grad=grad, kv_heads=point.kv_heads_resolved,
                       outliers=point.input_outliers, outlier_std=point.outlier_std)
    masks = point_masks(point, device)
    mask_args: dict[str, Any] = dict(
        causal=masks.causal, window=masks.window, key_lengths=masks.key_lengths,
        document_ids=masks.document_ids, softcap=masks.softcap, alibi=masks.alibi, sink=masks.sink,
        mask_mod=masks.mask_mod, score_mod=masks.score_mod)  # functions: selfattn/mods/
    # The dense upstream exists only where a backward runs (drawing it costs as much as Q).
    upstream = seeded_randn((b, h, q_len, d), point.seed + UPSTREAM_SEED_OFFSET, dtype, device) if grad else None
    rows_dev = rows.to(device)

    rotate_qk = None
    if point.score == "additive":  # its own computation (selfattn/additive.py), outside the back ends' contract
        from selfattn.additive import additive_call

        forward, reference_rows = additive_call(point, q, k, v, masks)
    else:
        # pos_enc=rope: q and k rotated inside the timed call (its cost), before the back end sees them
        rotate_qk = rope_qk(q_len, seq_len, d, dtype=dtype, device=device) if point.pos_enc == "rope" else None
        forward, masks = _checked_attention(resolved, q, k, v, scale=scale, rotate_qk=rotate_qk, **mask_args)

        def reference_rows(q64: torch.Tensor, k64: torch.Tensor, v64: torch.Tensor, rows_: torch.Tensor,
                           fp8_options: dict[str, Any] | None = None):
            if rotate_qk:
                q64, k64 = rope(q64, query_positions(q_len, seq_len)), rope(k64, torch.arange(seq_len))
            cast = None
            if fp8_options is not None:  # the point's FP8 recipe on the (rotated) inputs, P cast before P V
                from selfattn import fp8

                q64, k64, v64 = fp8.inputs(q64, k64, v64, fp8_options)
                cast = fp8.p_cast(fp8_options)
            return attention_reference(q64, k64, v64, scale=scale, rows=rows_, dtype=q64.dtype, cast_weights=cast,
                                       **mask_args)

    if upstream is not None:  # fwd_bwd
        sparse_upstream = on_rows(upstream, rows_dev, 2)

        def call() -> Any:
            out = forward()
            return out, torch.autograd.grad(out, (q, k, v), upstream)

        def check_call() -> Result:
            out = forward()
            dq, dk, dv = torch.autograd.grad(out, (q, k, v), sparse_upstream)
            return Result(out.detach()[:, :, rows_dev], [dq[:, :, rows_dev], dk, dv])
    else:

        def call() -> Any:
            with torch.no_grad():
                return forward()

        def check_call() -> Result:
            return Result(call()[:, :, rows_dev], None)

    def reference(ref_dtype: torch.dtype = torch.float64) -> Result:
        q64, k64, v64 = (t.detach().to(ref_dtype).requires_grad_(grad) for t in (q, k, v))
        with torch.enable_grad() if grad else torch.no_grad():
            fp8_options = None
            if ref_dtype != torch.float64 and point.score == "dot" and "fp8" in point.call_options:
                fp8_options = resolved.options  # the point's FP8 recipe, as its call runs it
            ref = (reference_rows(q64, k64, v64, rows_dev, fp8_options) if fp8_options is not None
                   else reference_rows(q64, k64, v64, rows_dev))
            if upstream is None:  # fwd
                return Result(ref, None)
            loss = (ref * upstream[:, :, rows_dev].to(ref_dtype)).sum()
            dq, dk, dv = torch.autograd.grad(loss, (q64, k64, v64))
        return Result(ref.detach(), [dq[:, :, rows_dev], dk, dv])

    def timed_rows(output: Any) -> torch.Tensor:
        return (output[0] if grad else output).detach()[:, :, rows_dev]

    def stability_inputs():  # what the back end multiplies: q and k rotated with rope
        q_, k_ = rotate_qk(q.detach(), k.detach()) if rotate_qk else (q.detach(), k.detach())
        return q_[:, :, rows_dev], k_, v.detach(), rows

    def kernel_ran() -> str | None:
        return backend_hook("kernel_ran", resolved, point, q, k, v, masks)

    def prepare() -> dict[str, float]:
        return backend_hook("prepare", resolved, point, q, k, v, masks)

    handed: dict[str, torch.Tensor] = getattr(forward, "handed", None) or {"q": q, "k": k, "v": v}  # a BSHD plugin's converted copies
    values = {"q": q, "k": k, "v": v}
    sync_inputs = None if handed is not getattr(forward, "handed", None) else _sync_bshd(values, handed)
    # additive scores: no stability metrics (they read the dot product's logits)
    return Workload(call, check_call, reference, stability_inputs if point.score == "dot" else None,
                    stability_upstream(point, len(rows), dtype, device), rows, masks, kernel_ran, prepare,
                    plain=lambda: reference(plain_dtype(point, dtype)), inputs=handed, timed_rows=timed_rows,
                    magnitude=lambda: float(v.detach().abs().max()) if v.numel() else 0.0,
                    values=values, sync_inputs=sync_inputs)


def _sync_bshd(values: dict[str, torch.Tensor], handed: dict[str, torch.Tensor]) -> Callable[[], None]:
    """Copies q, k, v (B, H, S, D) into a BSHD back end's converted inputs (B, S, H, D), as Entry.bind made them."""

    import torch

    def sync() -> None:
        with torch.no_grad():
            for name, tensor in handed.items():
                tensor.copy_(values[name].detach().transpose(1, 2))

    sync.handed = handed  # type: ignore[attr-defined]  # what fresh.py compares after the timed calls
    return sync


def _checked_attention(resolved: Resolved, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None,
                       rotate_qk: Callable | None = None, **mask_args: Any) -> tuple[Callable[[], torch.Tensor], Masks]:
    """The resolved back end's call on q, k, v (what selfattn.attention runs, its capability already decided) as a
    call whose checks are done here, once, and the checked Masks it passes. The timed calls run the back end
    alone: checking padding and document ids reads their values on the host (on a GPU, a wait for the queue in
    every call), and the back ends keep their Python-side decisions on the Masks they are given
    (Masks.decision), so every call and `prepare` must share one. `rotate_qk` (RoPE) runs inside each call."""
    from selfattn.validate import check_masks, check_qkv, resolve_scale

    check_qkv(q, k, v)  # what selfattn.attention does before it calls the back end
    masks = check_masks(mask_args["causal"], mask_args["window"], mask_args["key_lengths"], mask_args["document_ids"],
                        batch=q.shape[0], q_len=q.shape[2], seq_len=k.shape[2], device=q.device,
                        softcap=mask_args.get("softcap"), alibi=mask_args.get("alibi", False),
                        sink=mask_args.get("sink"), mask_mod=mask_args.get("mask_mod"),
                        score_mod=mask_args.get("score_mod"))
    scale_value, entry, options = resolve_scale(scale, q.shape[3]), resolved.backend, resolved.options
    if rotate_qk is None:  # the back end's one-time work (a plugin's layout conversion) done here, once
        return entry.bind(q, k, v, masks=masks, scale=scale_value, **options), masks

    def forward() -> torch.Tensor:
        q_, k_ = rotate_qk(q, k)
        return entry.attention(q_, k_, v, masks=masks, scale=scale_value, **options)

    return forward, masks


SCOPE = Scope("core", "Q, K, V given", gives_qkv=True, pos_encodings=("none", "rope"), block_rows=True, flops=flops,
              bytes_moved=bytes_moved, input_bytes=input_bytes, call_bytes=call_bytes, drawn=drawn,
              reference_bytes=reference_bytes, build=build)
