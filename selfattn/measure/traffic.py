"""How many bytes one call of a point must move at least: the `bytes_moved` behind `gbps`.

Like the FLOP count (selfattn/measure/flops.py) this is a convention, not what a kernel does:
every tensor the call must read or write, counted once. A kernel that spills its score matrix
to memory moves more, and its `gbps` (bytes_moved / time) then understates the bandwidth it
really used, the way `tflops` understates a kernel that computes masked scores. With `flops`,
bytes_moved gives each row its arithmetic intensity, its place on the roofline.

scope=core reads Q, K and V (K and V once per K/V head, so GQA divides them) and writes O;
fwd_bwd also reads dO and writes dQ, dK, dV. scope=layer reads X and the four projections'
weights and writes the output; fwd_bwd also reads the upstream and writes dX and the weights'
gradients. scope=generate sums its steps (selfattn/decode.py owns that count).

Pure Python (no torch).
"""

from __future__ import annotations

from selfattn.point import Point


def bytes_moved(point: Point) -> int:
    """The least bytes one timed call of `point` reads and writes (see the module docstring)."""
    s = point.element_bytes
    if point.scope == "generate":
        from selfattn.decode import generate_bytes

        return generate_bytes(point)
    if point.scope == "layer":
        activations = point.batch * point.seq_len * point.d_model * s  # X, and the output as big
        weights = 4 * point.d_model * point.d_model * s
        total = 2 * activations + weights
        if point.mode == "fwd_bwd":
            total += 2 * activations + weights  # read the upstream, write dX; write the weights' grads
        return total
    q = point.batch * point.heads * point.q_len_resolved * point.head_dim * s
    total = q + point.kv_bytes + point.out_bytes
    if point.mode == "fwd_bwd":
        total += point.out_bytes + point.grad_bytes  # read dO; write dQ, dK, dV
    return total
