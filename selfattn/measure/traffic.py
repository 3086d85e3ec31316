"""How many bytes one call of a point must move at least: the `bytes_moved` behind `gbps`.

Like the FLOP count (selfattn/measure/flops.py) this is a convention, not what a kernel does:
every tensor the call must read or write, counted once. A kernel that spills its score matrix
to memory moves more, and its `gbps` (bytes_moved / time) then understates the bandwidth it
really used, the way `tflops` understates a kernel that computes masked scores. With `flops`,
bytes_moved gives each row its arithmetic intensity, its place on the roofline.

Each scope counts its own call (its declaration's `bytes_moved`, selfattn/scopes/): the core reads Q, K and V
(K and V once per K/V head) and writes O; a layer over X reads X and its weights and writes the output (`x_bytes_moved`).

Pure Python (no torch).
"""

from __future__ import annotations

from selfattn.point import Point
from selfattn.scopes import declared


def bytes_moved(point: Point) -> int:
    """The least bytes one timed call of `point` reads and writes (see the module docstring)."""
    return declared(point).bytes_moved(point)


def x_bytes_moved(point: Point, weights: int) -> int:
    """A layer over X with `weights` elements (each read once): X and the output as big; fwd_bwd also reads the
    upstream, writes dX and the weights' gradients."""
    s = point.element_bytes
    activations = point.batch * point.seq_len * point.d_model * s  # X, and the output as big
    total = 2 * activations + weights * s
    return total + (2 * activations + weights * s if point.mode == "fwd_bwd" else 0)
