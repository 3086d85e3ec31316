"""scope=layer: multi-head self-attention over X with Q/K/V/O projections (selfattn/layer.py).

Its FLOPs are the core's plus the four projections; its bytes X, the weights and the output (fwd_bwd: the upstream,
dX and the weights' gradients); its memory the back end's model plus the projections around it (`layer_bytes`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from selfattn.scopes.declaration import Scope

if TYPE_CHECKING:
    import torch

    from selfattn.backends.resolved import Resolved
    from selfattn.layer import MultiHeadSelfAttention
    from selfattn.measure.workload import Workload
    from selfattn.point import Point

ATTENTION_DRAWS = 16  # the path-length metric's draws: the ratio over 64 seeded points at n 64-1024, d_model 128-256: 0.45-2.4


def input_bytes(point: Point) -> int:
    from selfattn.measure.predict import x_input_bytes

    return x_input_bytes(point, point.projection_weights)


def layer_bytes(point: Point) -> int:
    """Projections around the core: q, k, v heads, the merged heads and the output projection
    (forward); fwd_bwd keeps them for backward and adds their gradients and the weights' grads.
    k and v (and their gradients) have kv_heads heads: GQA shrinks them."""
    from selfattn.measure.predict import stored_bytes

    s = stored_bytes(point)
    act = point.batch * point.seq_len * point.d_model * s
    act_kv = point.batch * point.seq_len * point.kv_heads_resolved * point.head_dim * s  # k or v
    if point.mode == "fwd":
        return 4 * act + 2 * act_kv
    return 8 * act + 4 * act_kv + point.projection_weights * s


def added_encoding_bytes(point: Point) -> int:
    """X + PE, the projections' input (kept for their backward), and with fwd_bwd its gradient."""
    if point.pos_enc not in ("sinusoidal", "learned"):
        return 0
    x = point.batch * point.seq_len * point.d_model * point.element_bytes
    return x * (2 if point.mode == "fwd_bwd" else 1)


def call_bytes(point: Point, resolved: Resolved, device: str) -> int:
    from selfattn.measure.predict import rope_bytes

    core = resolved.backend.mem_bytes(point, resolved.options, device) + rope_bytes(point)
    return int(core + layer_bytes(point) + added_encoding_bytes(point))


def flops(point: Point) -> float:
    from selfattn.measure.flops import LINEAR_FWD_BWD_FACTOR, attention_flops, projection_flops

    return attention_flops(point) + projection_flops(point) * (LINEAR_FWD_BWD_FACTOR if point.mode == "fwd_bwd" else 1)


def bytes_moved(point: Point) -> int:
    from selfattn.measure.traffic import x_bytes_moved

    return x_bytes_moved(point, point.projection_weights)


def drawn(point: Point, rows: int) -> list[int]:
    """X, and with fwd_bwd its upstream gradient (the weights are drawn on the host: `host_weights`)."""
    x = point.batch * point.seq_len * point.d_model
    return [x, x] if point.mode == "fwd_bwd" else [x]


def reference_bytes(point: Point, rows: int) -> int:
    from selfattn.measure.predict import attention_pass_bytes

    return attention_pass_bytes(point, rows, point.seq_len, stability=True)


def last_output(point: Point, x: torch.Tensor, device: torch.device | str, backend: Any) -> torch.Tensor:
    """The path-length pass: y_{n-1} of the layer in float64, (draws, d_model), its products reassociated
    (measure/path_length.py's last_query_output), so the back end's own call never runs."""
    import torch

    from selfattn.layer import MultiHeadSelfAttention
    from selfattn.measure.path_length import last_query_output
    from selfattn.point import parse_scale

    layer = MultiHeadSelfAttention(point.d_model, point.heads, kv_heads=point.kv_heads_resolved, backend=backend)
    if point.seed != 0:
        layer.reset_parameters(seed=point.seed)
    return last_query_output(layer.to(device=device, dtype=torch.float64), x, parse_scale(point.scale))


def path_bytes(point: Point, draws: int) -> int:
    """The last query's (heads x n) weights and their gradient, float64."""
    return 4 * draws * point.heads * point.seq_len * 8


def seeded_layer(point: Point, dtype: torch.dtype, device: torch.device, resolved: Resolved) -> MultiHeadSelfAttention:
    """The point's layer (its heads, K/V heads, resolved back end, mask and scale), weights from its seed."""
    from selfattn.layer import MultiHeadSelfAttention
    from selfattn.point import parse_scale

    layer = MultiHeadSelfAttention(point.d_model, point.heads, kv_heads=point.kv_heads_resolved,
                                   backend=resolved, causal=point.causal, scale=parse_scale(point.scale),
                                   pos_enc=point.pos_enc, max_len=point.seq_len if point.pos_enc != "none" else None)
    if point.seed != 0:  # the constructor already initialized from seed 0
        layer.reset_parameters(seed=point.seed)
    return layer.to(device=device, dtype=dtype)


def build(point: Point, dtype: torch.dtype, device: torch.device, rows: torch.Tensor, seed: int,
          resolved: Resolved) -> Workload:
    """Seeded X and layer weights; the float64 reference is a float64 copy of the layer, Q projected for the
    sampled rows only."""
    import copy

    import torch

    from selfattn.inputs import make_x
    from selfattn.masks import Masks
    from selfattn.measure.workload import (UPSTREAM_SEED_OFFSET, Result, Workload, backend_hook, on_rows, plain_dtype,
                                           seeded_randn, stability_upstream)
    from selfattn.point import parse_scale
    from selfattn.reference import attention_reference

    b, seq_len, d_model = point.batch, point.seq_len, point.d_model
    scale = parse_scale(point.scale)
    grad = point.mode == "fwd_bwd"
    layer = seeded_layer(point, dtype, device, resolved)
    layer.requires_grad_(grad)
    x = make_x(b, seq_len, d_model, dtype=dtype, device=device, std=point.input_std, seed=seed, requires_grad=grad)
    upstream = seeded_randn((b, seq_len, d_model), point.seed + UPSTREAM_SEED_OFFSET, dtype, device) if grad else None
    rows_dev = rows.to(device)
    params = list(layer.parameters())

    if upstream is not None:  # fwd_bwd
        sparse_upstream = on_rows(upstream, rows_dev, 1)

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
            q64_rows, k64, v64 = project_rows(layer64, x64, rows_dev)
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
            q_rows, k, v = project_rows(layer, x.detach(), rows_dev)
        return q_rows, k, v, rows

    def kernel_ran() -> str | None:
        with torch.no_grad():
            q, k, v = layer.project_qkv(x.detach())
        return backend_hook("kernel_ran", resolved, point, q, k, v, Masks(causal=point.causal))

    def prepare() -> dict[str, float]:
        with torch.no_grad():
            q, k, v = layer.project_qkv(x.detach())
        return backend_hook("prepare", resolved, point, q, k, v, Masks(causal=point.causal))

    judged = "fp8" not in point.call_options  # an FP8 layer's plain reference is not built: scope=core judges FP8
    return Workload(call, check_call, reference, stability_inputs, stability_upstream(point, len(rows), dtype, device),
                    rows, Masks(causal=point.causal), kernel_ran, prepare,
                    plain=(lambda: reference(plain_dtype(point, dtype))) if judged else None, inputs={"x": x},
                    timed_rows=timed_rows, values={"x": x})


def project_rows(layer: MultiHeadSelfAttention, x_BLD: torch.Tensor, rows: torch.Tensor):
    """The layer's q for the sampled rows only, (B, H, rows, d_k), and its full k, v (B, kv_heads, L, d_k),
    positions encoded as the layer's forward does (added to X, or q and k rotated)."""
    split, x_BLD = layer.split_heads, layer.encode(x_BLD)
    q_rows, k = layer.rotate(split(layer.w_q(x_BLD[:, rows])), rows), layer.rotate(split(layer.w_k(x_BLD)))
    return q_rows, k, split(layer.w_v(x_BLD))


SCOPE = Scope("layer", "X with Q/K/V/O projections", over_x=True, block_rows=True,
              pos_encodings=("none", "sinusoidal", "learned", "rope"), path_length=True, path_draws=ATTENTION_DRAWS,
              flops=flops, bytes_moved=bytes_moved, input_bytes=input_bytes, call_bytes=call_bytes, drawn=drawn,
              reference_bytes=reference_bytes, host_weights=lambda point: point.projection_weights, build=build,
              last_output=last_output, path_bytes=path_bytes)
