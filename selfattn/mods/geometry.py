"""A mask function's geometry on tensors: its boolean mask (dense, or a block of it), its block map, its pairs.

Everything evaluates the mask_mod itself on integer index tensors that broadcast (b (B,1,1,1), h (1,H,1,1),
q_idx (1,1,R,1) holding the rows' bottom-right positions, kv_idx (1,1,1,N)), intersected with the interval
masks of the same call (causal, window, padding, documents: selfattn/masks.py). The result's shape says
what the function reads: a mask that ignores b and h comes back (1, 1, R, N), and every back end then shares
one mask across sequences and heads.

Nothing here holds an n x n tensor unless asked for one (`keep`): counts and block maps walk row blocks
of at most ROW_BLOCK_CELLS cells, so they run at any n (in O(n^2) evaluations, made once per mask and kept).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch

if TYPE_CHECKING:  # contract.py's BoundMod calls into this module: the name for annotations only
    from selfattn.mods.contract import BoundMod

ROW_BLOCK_CELLS = 1 << 22  # (rows x keys) cells evaluated at once by the counts and the block map


def _version(t: torch.Tensor | None) -> Any:
    from selfattn import torch_private

    return None if t is None else (id(t), torch_private.tensor_version(t))


KEPT_PER_FUNCTION = 8  # geometries a bound function keeps across calls (shapes, devices), oldest dropped first


def kept(masks: Any, key: tuple, make: Callable[[], Any]) -> Any:
    """`make()`, made once and kept: a mask function's dense mask or block map is built by the first (warm-up)
    call, never inside a timed one. Kept on the Masks when padding or documents (tensors: keyed on their
    versions) take part; otherwise on the bound function, so that calls of `selfattn.attention` (each checking
    its own Masks) reuse it too, for the same flags and shape."""
    if masks.key_lengths is None and masks.document_ids is None and masks.mask_mod is not None:
        store = masks.mask_mod.cache
        full_key = ("mods", masks.causal, masks.window, *key)
        if full_key in store:
            value = store.pop(full_key)  # most recently used last
        else:
            value = make()
        store[full_key] = value
        while len(store) > KEPT_PER_FUNCTION:
            store.pop(next(iter(store)))
        return value
    full_key = ("mods", *key, _version(masks.key_lengths), _version(masks.document_ids))
    store = masks._decisions
    if full_key not in store:
        store[full_key] = make()
    return store[full_key]


def index_grid(batch: int, heads: int, q_len: int, seq_len: int, device: Any, *,
               rows: torch.Tensor | None = None, keys: tuple[int, int] | None = None):
    """(b, h, q_idx, kv_idx): broadcasting int64 index tensors, q_idx the rows' positions (bottom-right)."""
    pos = torch.arange(q_len, device=device, dtype=torch.long) + (seq_len - q_len)
    if rows is not None:
        pos = pos[rows.to(device=device, dtype=torch.long)]
    b = torch.arange(batch, device=device).view(-1, 1, 1, 1)
    h = torch.arange(heads, device=device).view(1, -1, 1, 1)
    kv = torch.arange(*(keys or (0, seq_len)), device=device).view(1, 1, 1, -1)
    return b, h, pos.view(1, 1, -1, 1), kv


def mod_keep(mod: BoundMod, batch: int, heads: int, q_len: int, seq_len: int, device: Any, *,
             rows: torch.Tensor | None = None, keys: tuple[int, int] | None = None) -> torch.Tensor:
    """Bool (B or 1, H or 1, rows, keys): the mask_mod alone on these rows and keys."""
    b, h, q, kv = index_grid(batch, heads, q_len, seq_len, device, rows=rows, keys=keys)
    out = mod.fn(b, h, q, kv)
    out = torch.as_tensor(out, device=device)
    if out.dtype != torch.bool:
        raise ValueError(f"mask: {mod.label} returned {out.dtype} values, expected bool (True: the key is seen)")
    while out.dim() < 4:
        out = out[None]
    return out.expand(out.shape[0], out.shape[1], q.shape[2], kv.shape[3])


def keep(masks: Any, batch: int, heads: int, q_len: int, seq_len: int, device: Any, *,
         rows: torch.Tensor | None = None, keys: tuple[int, int] | None = None) -> torch.Tensor:
    """Bool (B or 1, H or 1, rows, keys): the call's whole mask, interval masks and mask function together."""
    from selfattn.masks import keep_from_intervals

    lo, hi = masks.intervals(q_len, seq_len, device)
    intervals = keep_from_intervals(lo, hi, seq_len, rows=rows, keys=keys)[:, None]
    if masks.mask_mod is None:
        return intervals
    return intervals & mod_keep(masks.mask_mod, batch, heads, q_len, seq_len, device, rows=rows, keys=keys)


def apply_score_mod(mod: BoundMod, scores_BHMN: torch.Tensor, q_len: int, seq_len: int, *,
                    rows: torch.Tensor | None = None, keys: tuple[int, int] | None = None) -> torch.Tensor:
    """score_mod on scaled scores (batch, heads, rows, keys): a new tensor of the scores' shape and dtype."""
    batch, heads = scores_BHMN.shape[:2]
    b, h, q, kv = index_grid(batch, heads, q_len, seq_len, scores_BHMN.device, rows=rows, keys=keys)
    out = mod.fn(scores_BHMN, b, h, q, kv)
    out = torch.as_tensor(out, device=scores_BHMN.device)
    return out.to(scores_BHMN.dtype).expand_as(scores_BHMN)


def _row_blocks(q_len: int, seq_len: int) -> list[tuple[int, int]]:
    step = max(1, ROW_BLOCK_CELLS // max(1, seq_len))
    return [(r0, min(r0 + step, q_len)) for r0 in range(0, q_len, step)]


def pairs(masks: Any, batch: int, heads: int, q_len: int, seq_len: int) -> int:
    """(query, key) pairs the masks let through, summed over every sequence and head (B x H x pairs of one when
    they are shared), counted row block by row block on the CPU."""
    def count() -> int:
        total = 0
        for r0, r1 in _row_blocks(q_len, seq_len):
            rows = torch.arange(r0, r1)
            block = keep(masks, batch, heads, q_len, seq_len, "cpu", rows=rows)
            total += int(block.sum()) * (batch // block.shape[0]) * (heads // block.shape[1])
        return total

    return kept(masks, ("pairs", batch, heads, q_len, seq_len), count)


def empty_rows(masks: Any, batch: int, heads: int, q_len: int, seq_len: int) -> bool:
    """Whether some row (of some sequence and head) sees no key."""
    def decide() -> bool:
        for r0, r1 in _row_blocks(q_len, seq_len):
            block = keep(masks, batch, heads, q_len, seq_len, "cpu", rows=torch.arange(r0, r1))
            if not bool(block.any(-1).all()):
                return True
        return False

    return kept(masks, ("empty_rows", batch, heads, q_len, seq_len), decide)


def block_map(masks: Any, batch: int, heads: int, q_len: int, seq_len: int, q_block: int, kv_block: int
              ) -> list[tuple[int, int, list[tuple[int, int, bool]]]]:
    """[(m0, m1, [(n0, n1, partial), ...]), ...]: for every block of q_block queries, the key blocks any
    (sequence, head, row) of it sees, and whether the block is partial (some pair hidden: it needs its mask)
    or whole. Blocks no pair of which is seen are left out: the work a block-sparse kernel skips."""
    def make():
        plan = []
        for m0 in range(0, q_len, q_block):
            m1 = min(m0 + q_block, q_len)
            block = keep(masks, batch, heads, q_len, seq_len, "cpu", rows=torch.arange(m0, m1))
            kv = []
            for n0 in range(0, seq_len, kv_block):
                n1 = min(n0 + kv_block, seq_len)
                tile = block[..., n0:n1]
                seen = int(tile.sum())
                if seen:
                    kv.append((n0, n1, seen != tile.numel()))
            plan.append((m0, m1, kv))
        return plan

    return kept(masks, ("block_map", batch, heads, q_len, seq_len, q_block, kv_block), make)
