"""What one point runs: its inputs, the timed call, and the float64 reference of its sampled rows.

scope=core calls the back end on seeded Q, K, V; scope=layer calls the multi-head layer on a
seeded X; scope=generate runs the layer's generation loop (selfattn/decode.py) after a seeded
prompt, the T steps being one timed call. mode=fwd runs under no_grad; mode=fwd_bwd runs forward, then
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

import copy
from dataclasses import dataclass
from typing import Any, Callable

import torch

from selfattn.backends.resolved import Resolved
from selfattn.decode import Generation, generate
from selfattn.inputs import make_qkv, make_x, point_masks, randn
from selfattn.layer import MultiHeadSelfAttention
from selfattn.masks import Masks
from selfattn.point import RNN_GATES, Point, parse_scale
from selfattn.positions import query_positions, rope, rope_qk
from selfattn.recurrent import Recurrent
from selfattn.reference import attention_reference
from selfattn.validate import check_masks, check_qkv, resolve_scale

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


def _randn(shape: tuple[int, ...], seed: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    # drawn where the inputs are (selfattn/inputs.py): on the host for a CPU, on the device for a GPU
    return randn(shape, dtype=dtype, device=device, seed=seed)


def _on_rows(upstream: torch.Tensor, rows: torch.Tensor, row_dim: int) -> torch.Tensor:
    """`upstream` kept on `rows` along `row_dim`, zero elsewhere."""
    sparse = torch.zeros_like(upstream)
    index: list[Any] = [slice(None)] * upstream.dim()
    index[row_dim] = rows
    sparse[tuple(index)] = upstream[tuple(index)]
    return sparse


def build(point: Point, dtype: torch.dtype, device: torch.device, rows: torch.Tensor, *, resolved: Resolved,
          values_seed: int | None = None) -> Workload:
    """The point's workload; `values_seed` draws its inputs' values from another seed (the verdict's second input).
    `resolved`: the point's back end as measure_point resolved it (resolve_point, once per point)."""
    seed = point.seed if values_seed is None else values_seed
    if point.scope in RNN_GATES:
        return _build_recurrent(point, dtype, device, rows)
    if point.scope == "layer":
        return _build_layer(point, dtype, device, rows, seed, resolved)
    if point.scope == "generate":
        return _build_generate(point, dtype, device, rows, seed, resolved)
    return _build_core(point, dtype, device, rows, seed, resolved)


def _plain_dtype(point: Point, dtype: torch.dtype) -> torch.dtype:
    """The dtype of the plain reference: the point's own, but fp32 for fp64 (verdict.py's fp64 rule)."""
    return torch.float32 if dtype == torch.float64 else dtype


def _build_core(point: Point, dtype: torch.dtype, device: torch.device, rows: torch.Tensor, seed: int,
                resolved: Resolved) -> Workload:
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
    upstream = _randn((b, h, q_len, d), point.seed + UPSTREAM_SEED_OFFSET, dtype, device) if grad else None
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
        sparse_upstream = _on_rows(upstream, rows_dev, 2)

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
        return _backend_hook("kernel_ran", resolved, point, q, k, v, masks)

    def prepare() -> dict[str, float]:
        return _backend_hook("prepare", resolved, point, q, k, v, masks)

    handed: dict[str, torch.Tensor] = getattr(forward, "handed", None) or {"q": q, "k": k, "v": v}  # a BSHD plugin's converted copies
    values = {"q": q, "k": k, "v": v}
    sync_inputs = None if handed is not getattr(forward, "handed", None) else _sync_bshd(values, handed)
    # additive scores: no stability metrics (they read the dot product's logits)
    return Workload(call, check_call, reference, stability_inputs if point.score == "dot" else None,
                    _stability_upstream(point, len(rows), dtype, device), rows, masks, kernel_ran, prepare,
                    plain=lambda: reference(_plain_dtype(point, dtype)), inputs=handed, timed_rows=timed_rows,
                    magnitude=lambda: float(v.detach().abs().max()) if v.numel() else 0.0,
                    values=values, sync_inputs=sync_inputs)


def _sync_bshd(values: dict[str, torch.Tensor], handed: dict[str, torch.Tensor]) -> Callable[[], None]:
    """Copies q, k, v (B, H, S, D) into a BSHD back end's converted inputs (B, S, H, D), as Entry.bind made them."""

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


def _backend_hook(hook: str, resolved: Resolved, point: Point, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  masks: Masks) -> Any:
    """The back end's `kernel_ran` (which kernel these inputs run, sdpa's `auto`) or `prepare` (one-time set-up,
    flex's block mask, with its seconds) on these inputs."""
    if hook == "prepare":  # the masks' own decisions (rows that see no key), whichever back end asks them
        masks.prepare(q.shape[2], k.shape[2])
    with torch.no_grad():
        call = getattr(resolved.backend, hook)
        return call(q.detach(), k.detach(), v.detach(), masks=masks, scale=point.scale_value, **resolved.options)


def _stability_upstream(point: Point, rows: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The fixed upstream of the stability loss: (B, H, rows, D), seeded, in the point's dtype."""
    shape = (point.batch, point.heads, rows, point.head_dim)
    return _randn(shape, point.seed + STABILITY_SEED_OFFSET, dtype, device)


def _seeded_layer(point: Point, dtype: torch.dtype, device: torch.device, resolved: Resolved) -> MultiHeadSelfAttention:
    """The point's layer (its heads, K/V heads, resolved back end, mask and scale), weights from its seed."""
    layer = MultiHeadSelfAttention(point.d_model, point.heads, kv_heads=point.kv_heads_resolved,
                                   backend=resolved, causal=point.causal, scale=parse_scale(point.scale),
                                   pos_enc=point.pos_enc, max_len=point.seq_len if point.pos_enc != "none" else None)
    if point.seed != 0:  # the constructor already initialized from seed 0
        layer.reset_parameters(seed=point.seed)
    return layer.to(device=device, dtype=dtype)


def _build_layer(point: Point, dtype: torch.dtype, device: torch.device, rows: torch.Tensor, seed: int,
                 resolved: Resolved) -> Workload:
    b, seq_len, d_model = point.batch, point.seq_len, point.d_model
    scale = parse_scale(point.scale)
    grad = point.mode == "fwd_bwd"
    layer = _seeded_layer(point, dtype, device, resolved)
    layer.requires_grad_(grad)
    x = make_x(b, seq_len, d_model, dtype=dtype, device=device, std=point.input_std, seed=seed, requires_grad=grad)
    upstream = _randn((b, seq_len, d_model), point.seed + UPSTREAM_SEED_OFFSET, dtype, device) if grad else None
    rows_dev = rows.to(device)
    params = list(layer.parameters())

    if upstream is not None:  # fwd_bwd
        sparse_upstream = _on_rows(upstream, rows_dev, 1)

        def call() -> Any:
            out = layer(x)
            return out, torch.autograd.grad(out, [x, *params], upstream)

        def check_call() -> Result:
            out = layer(x)
            grads = torch.autograd.grad(out, [x, *params], sparse_upstream)
            return Result(out.detach()[:, rows_dev], list(grads))
    else:

        def call() -> Any:
            with torch.no_grad():
                return layer(x)

        def check_call() -> Result:
            return Result(call()[:, rows_dev], None)

    def reference(ref_dtype: torch.dtype = torch.float64) -> Result:
        # A float64 copy (or the plain reference's dtype) of the same layer and X; Q projected for the sampled rows only.
        layer64 = copy.deepcopy(layer).to(ref_dtype).requires_grad_(grad)
        x64 = x.detach().to(ref_dtype).requires_grad_(grad)
        with torch.enable_grad() if grad else torch.no_grad():
            q64_rows, k64, v64 = _project_rows(layer64, x64, rows_dev)
            # The reference reads only the sampled rows of Q; the rest is a zero placeholder that
            # keeps the full q_len, which the bottom-right causal mask is aligned to.
            q64 = q64_rows.new_zeros(b, point.heads, seq_len, point.head_dim).index_copy(2, rows_dev, q64_rows)
            core_BHrD = attention_reference(q64, k64, v64, causal=point.causal, scale=scale, rows=rows_dev,
                                            dtype=ref_dtype)
            out = layer64.w_o(layer64.merge_heads(core_BHrD))
            if upstream is None:  # fwd
                return Result(out, None)
            loss = (out * upstream[:, rows_dev].to(ref_dtype)).sum()
            grads = torch.autograd.grad(loss, [x64, *layer64.parameters()])
        return Result(out.detach(), list(grads))

    def timed_rows(output: Any) -> torch.Tensor:
        return (output[0] if grad else output).detach()[:, rows_dev]

    def stability_inputs():
        with torch.no_grad():
            q_rows, k, v = _project_rows(layer, x.detach(), rows_dev)
        return q_rows, k, v, rows

    def kernel_ran() -> str | None:
        with torch.no_grad():
            q, k, v = layer.project_qkv(x.detach())
        return _backend_hook("kernel_ran", resolved, point, q, k, v, Masks(causal=point.causal))

    def prepare() -> dict[str, float]:
        with torch.no_grad():
            q, k, v = layer.project_qkv(x.detach())
        return _backend_hook("prepare", resolved, point, q, k, v, Masks(causal=point.causal))

    judged = "fp8" not in point.call_options  # an FP8 layer's plain reference is not built: scope=core judges FP8
    return Workload(call, check_call, reference, stability_inputs, _stability_upstream(point, len(rows), dtype, device),
                    rows, Masks(causal=point.causal), kernel_ran, prepare,
                    plain=(lambda: reference(_plain_dtype(point, dtype))) if judged else None, inputs={"x": x},
                    timed_rows=timed_rows, values={"x": x})


def _project_rows(layer: MultiHeadSelfAttention, x_BLD: torch.Tensor, rows: torch.Tensor):
    """The layer's q for the sampled rows only, (B, H, rows, d_k), and its full k, v (B, kv_heads, L, d_k),
    positions encoded as the layer's forward does (added to X, or q and k rotated)."""
    split, x_BLD = layer.split_heads, layer.encode(x_BLD)
    q_rows, k = layer.rotate(split(layer.w_q(x_BLD[:, rows])), rows), layer.rotate(split(layer.w_k(x_BLD)))
    return q_rows, k, split(layer.w_v(x_BLD))


def _build_generate(point: Point, dtype: torch.dtype, device: torch.device, rows: torch.Tensor, seed: int,
                    resolved: Resolved) -> Workload:
    """One generation: `call` runs the T steps; accuracy compares all T new tokens with a float64
    run of the cached loop on the reference attention (tests/test_decode.py checks that the cached
    and uncached loops agree). Stability metrics are the core's business: `stability_inputs` is
    None and the runner skips them."""
    scale = parse_scale(point.scale)
    layer = _seeded_layer(point, dtype, device, resolved).requires_grad_(False)
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
                    plain=(lambda: reference(_plain_dtype(point, dtype))) if judged else None,
                    inputs={"prompt": prompt}, timed_rows=lambda output: output.detach())


def _build_recurrent(point: Point, dtype: torch.dtype, device: torch.device, rows: torch.Tensor) -> Workload:
    """scope=lstm/gru (selfattn/recurrent.py) on the layer's X, with the layer's fwd_bwd and its float64
    reference: a float64 copy of the same module on the same X, every step (a recurrence has no row
    to compute alone). No attention inside: no stability metrics (`stability_inputs` None)."""
    b, seq_len, d_model = point.batch, point.seq_len, point.d_model
    grad = point.mode == "fwd_bwd"
    rnn = Recurrent(point.scope, d_model, seed=point.seed).to(device=device, dtype=dtype).requires_grad_(grad)
    x = make_x(b, seq_len, d_model, dtype=dtype, device=device, std=point.input_std, seed=point.seed, requires_grad=grad)
    upstream = _randn((b, seq_len, d_model), point.seed + UPSTREAM_SEED_OFFSET, dtype, device) if grad else None
    rows_dev = rows.to(device)
    params = list(rnn.parameters())

    def call() -> Any:
        if upstream is None:  # fwd
            with torch.no_grad():
                return rnn(x)
        out = rnn(x)
        return out, torch.autograd.grad(out, [x, *params], upstream)

    def check_call() -> Result:
        if upstream is None:  # fwd
            return Result(call()[:, rows_dev], None)
        out = rnn(x)
        grads = torch.autograd.grad(out, [x, *params], _on_rows(upstream, rows_dev, 1))
        return Result(out.detach()[:, rows_dev], list(grads))

    def reference() -> Result:
        rnn64 = copy.deepcopy(rnn).to(torch.float64).requires_grad_(grad)
        x64 = x.detach().to(torch.float64).requires_grad_(grad)
        with torch.enable_grad() if grad else torch.no_grad():
            out = rnn64(x64)[:, rows_dev]
            if upstream is None:  # fwd
                return Result(out, None)
            loss = (out * upstream[:, rows_dev].to(torch.float64)).sum()
            grads = torch.autograd.grad(loss, [x64, *rnn64.parameters()])
        return Result(out.detach(), list(grads))

    upstream_rows = torch.zeros(b, 1, 1, 1, dtype=dtype, device=device)  # no stability pass reads it
    return Workload(call, check_call, reference, None, upstream_rows, rows, Masks())
