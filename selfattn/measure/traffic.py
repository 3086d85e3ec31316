"""How many bytes one call of a point must move at least: the `bytes_moved` behind `gbps`.

Like the FLOP count (selfattn/measure/flops.py) this is a convention, not what a kernel does:
every tensor the call must read or write, counted once. A kernel that spills its score matrix
to memory moves more, and its `gbps` (bytes_moved / time) then understates the bandwidth it
really used, the way `tflops` understates a kernel that computes masked scores. With `flops`,
bytes_moved gives each row its arithmetic intensity, its place on the roofline.

scope=core reads Q, K and V (K and V once per K/V head, so GQA divides them) and writes O;
fwd_bwd also reads dO and writes dQ, dK, dV. scope=layer reads X and the four projections'
weights (W_K and W_V per K/V head) and writes the output; fwd_bwd also reads the upstream and
writes dX and the weights' gradients; scope=lstm/gru the same with its own weights (each read once:
a kernel that re-reads W_hh every step moves more). scope=generate sums its steps (`generate_bytes`).

Pure Python (no torch).
"""

from __future__ import annotations

from selfattn.point import RNN_GATES, Point


def bytes_moved(point: Point) -> int:
    """The least bytes one timed call of `point` reads and writes (see the module docstring)."""
    s = point.element_bytes
    if point.scope == "generate":
        return generate_bytes(point)
    if point.scope == "layer" or point.scope in RNN_GATES:
        activations = point.batch * point.seq_len * point.d_model * s  # X, and the output as big
        weights = (point.projection_weights if point.scope == "layer" else point.recurrent_weights) * s
        total = 2 * activations + weights
        if point.mode == "fwd_bwd":
            total += 2 * activations + weights  # read the upstream, write dX; write the weights' grads
        return total
    q = point.batch * point.heads * point.q_len_resolved * point.head_dim * s
    total = q + point.kv_bytes + point.out_bytes
    if point.mode == "fwd_bwd":
        total += point.out_bytes + point.grad_bytes  # read dO; write dQ, dK, dV
    return total


def generate_bytes(point: Point) -> int:
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
