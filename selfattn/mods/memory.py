"""What a mask or score function adds to a call's peak memory, per back end path (pure Python, on a Point).

Counted from the code of selfattn/mods/dense.py and blocks.py. The kept geometry (the dense mask, the block
map's tiles: at most the dense mask) is built by the warm-up call and stays alive through the timed ones: the
guard counts it beside the inputs (`dense_mask_bytes`, selfattn/measure/predict.py's mask_bytes), not in a call. A function
that declares it reads neither the sequence nor the head (`declare_mod(per_sequence=False, per_head=False)`,
every built-in) has one mask for all of them; a plugin that does not say is counted per sequence and head.
"""

from __future__ import annotations

from typing import Any


ACCUMULATOR_BYTES = 4  # blocks.py accumulates in float32 at least (point: a selfattn.Point, not imported: point.py imports this package)


def _declared(point: Any) -> tuple[bool, bool]:
    """(per_sequence, per_head) of the point's mask function, as declared (a plugin that fails to load: both)."""
    if point.mask == "none":
        return False, False
    try:
        from selfattn.mods.discovery import resolve

        declaration = resolve("mask", point.mask).declaration
        return declaration.per_sequence, declaration.per_head
    except ValueError:
        return True, True


def dense_mask_bytes(point: Any) -> int:
    """The kept boolean mask (sequences or 1) x (heads or 1) x q_len x seq_len, and its rows' flags."""
    if point.mask == "none":
        return 0
    per_sequence, per_head = _declared(point)
    cells = ((point.batch if per_sequence or point.masks_per_sequence else 1) * (point.heads if per_head else 1)
             * point.q_len_resolved)
    return cells * point.seq_len + cells


def dense_call_bytes(point: Any) -> int:
    """naive's path with a function (mods/dense.py): two score-sized matrices alive at once (each step's input and
    its result: the transformed, masked scores, then the weights), the inverted mask masked_fill reads, the
    output; a backward keeps three score-sized matrices and the gradients. (CPU, torch 2.13, B1 H2 n1024 d64
    fp32, through the allocator: 17.3 MB forward, 27.3 MB forward and backward, tests/mods/test_mod_memory.py.)"""
    s = point.element_bytes
    scores = point.score_elements * s
    total = (3 if point.mode == "fwd_bwd" else 2) * scores + point.out_bytes + dense_mask_bytes(point)
    if point.mode == "fwd_bwd":
        total += point.grad_bytes
    return total


def block_call_bytes(point: Any, q_chunk: int, kv_chunk: int) -> int:
    """chunked's path with a function (mods/blocks.py): Q, K, V in the accumulator dtype, the output's blocks and
    their concatenation, a few score blocks, and the kept partial tiles (at most the dense mask)."""
    a = max(point.element_bytes, ACCUMULATOR_BYTES)
    bh, d = point.batch * point.heads, point.head_dim
    q_len, seq_len = point.q_len_resolved, point.seq_len
    copies = (bh * q_len + 2 * point.batch * point.kv_heads_resolved * seq_len) * d * a
    outs = 2 * bh * q_len * d * a
    blocks = 4 * bh * min(q_chunk, q_len) * min(kv_chunk, seq_len) * a
    total = copies + outs + blocks
    if point.mode == "fwd_bwd":  # autograd keeps every block's scores and weights
        total += 2 * point.score_elements * a + point.grad_bytes
    return total


def sdpa_call_bytes(point: Any) -> int:
    """sdpa with the function's boolean attn_mask: torch converts it to a float mask in q's dtype (with a boolean
    intermediate: about element_bytes + 1 bytes per cell of the mask), and the output; a fused kernel keeps no
    scores (CPU, torch 2.13, B1 H2 n1024 d64 fp32: 4.6-5.1 bytes per cell measured). A backward adds the
    gradients and the converted mask again."""
    converted = dense_mask_bytes(point) * (point.element_bytes + 1)
    total = point.out_bytes + converted
    if point.mode == "fwd_bwd":
        total += point.grad_bytes + converted
    return total
