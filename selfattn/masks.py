"""Which keys each query sees: the one geometry every back end, the reference and FLOPs share.

Every mask the harness supports leaves each query row a contiguous range of keys:
positions are aligned bottom-right (query i sits at p = i + seq_len - q_len), and
    causal        keys j <= p
    window w      p - j < w, and (unless causal) j - p < w
    key_lengths   keys j < key_lengths[b] (the rest of sequence b is right padding)
    document_ids  keys of the query's own document (packed sequences; ids never decrease,
                  so a document is a contiguous range; needs q_len == seq_len)
combine by intersection, so query i of sequence b sees exactly the keys lo[b, i] <= j <= hi[b, i].
A row with lo > hi sees no key; every back end returns zeros there (as FlashAttention does).
Describing masks as intervals makes block skipping, exact FLOP counts and the boolean mask one
computation instead of one per back end.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Masks:
    """The mask arguments of one call, checked (selfattn.validate.check_masks)."""

    causal: bool = False
    window: int | None = None
    key_lengths: torch.Tensor | None = None  # (batch,) int64
    document_ids: torch.Tensor | None = None  # (batch, seq_len)

    @property
    def only_causal(self) -> bool:
        """Causal or nothing: the case fused kernels have a flag for (`is_causal`)."""
        return self.window is None and self.key_lengths is None and self.document_ids is None

    def intervals(self, q_len: int, seq_len: int, device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(lo, hi), each int64 (batch or 1, q_len): query i of sequence b sees keys lo..hi inclusive."""
        return key_intervals(q_len, seq_len, causal=self.causal, window=self.window,
                             key_lengths=self.key_lengths, document_ids=self.document_ids, device=device)

    def keep(self, q_len: int, seq_len: int, *, rows: torch.Tensor | None = None,
             keys: tuple[int, int] | None = None, device: torch.device | str | None = None) -> torch.Tensor:
        """Bool (batch or 1, rows, keys): True where query i may see key j (the mask itself)."""
        lo, hi = self.intervals(q_len, seq_len, device)
        return keep_from_intervals(lo, hi, seq_len, rows=rows, keys=keys)


def key_intervals(
    q_len: int,
    seq_len: int,
    *,
    causal: bool = False,
    window: int | None = None,
    key_lengths: torch.Tensor | None = None,
    document_ids: torch.Tensor | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(lo, hi): the first and last key each query row sees, int64 (batch or 1, q_len)."""
    if device is None:
        device = key_lengths.device if key_lengths is not None else (
            document_ids.device if document_ids is not None else "cpu")
    pos = torch.arange(q_len, device=device, dtype=torch.long) + (seq_len - q_len)  # p, bottom-right aligned
    lo = torch.zeros(1, q_len, dtype=torch.long, device=device)
    hi = torch.full((1, q_len), seq_len - 1, dtype=torch.long, device=device)
    if causal:
        hi = torch.minimum(hi, pos[None])
    if window is not None:
        lo = torch.maximum(lo, pos[None] - window + 1)
        if not causal:
            hi = torch.minimum(hi, pos[None] + window - 1)
    if key_lengths is not None:
        hi = torch.minimum(hi, key_lengths.to(device=device, dtype=torch.long)[:, None] - 1)
    if document_ids is not None:  # q_len == seq_len: query i is key i's position
        ids = document_ids.to(device=device)
        key_idx = torch.arange(seq_len, device=device)
        # First and last key of each query's document: ids never decrease, so searchsorted finds them.
        first = torch.searchsorted(ids.contiguous(), ids.contiguous(), right=False)
        last = torch.searchsorted(ids.contiguous(), ids.contiguous(), right=True) - 1
        lo = torch.maximum(lo, first[:, key_idx[:q_len]])
        hi = torch.minimum(hi, last[:, key_idx[:q_len]])
    lo, hi = torch.broadcast_tensors(lo, hi)  # padding may narrow hi per sequence while lo stays shared
    return lo.contiguous(), hi.contiguous()


def keep_from_intervals(lo: torch.Tensor, hi: torch.Tensor, seq_len: int, *, rows: torch.Tensor | None = None,
                        keys: tuple[int, int] | None = None) -> torch.Tensor:
    """Bool (batch, rows, keys) from (lo, hi): True where lo <= j <= hi."""
    if rows is not None:
        rows = rows.to(device=lo.device, dtype=torch.long)
        lo, hi = lo[:, rows], hi[:, rows]
    key_idx = torch.arange(*(keys or (0, seq_len)), device=lo.device)
    return (key_idx[None, None, :] >= lo[:, :, None]) & (key_idx[None, None, :] <= hi[:, :, None])


def seen_pairs(lo: torch.Tensor, hi: torch.Tensor, batch: int) -> int:
    """(query, key) pairs the masks allow over the whole batch (per head)."""
    per_row = (hi - lo + 1).clamp_min(0)
    return int(per_row.sum()) * (batch if per_row.shape[0] == 1 else 1)


def blocks(lo: torch.Tensor, hi: torch.Tensor, q_len: int, seq_len: int, q_chunk: int, kv_chunk: int):
    """Yield (m0, m1, [(n0, n1, needs_mask), ...]) for every query block: the key blocks to compute.

    A key block that no query of the block sees (in any sequence of `lo`/`hi`) is left out; one
    that every query sees whole needs no mask. One vectorized test per query block.
    """
    n0s = torch.arange(0, seq_len, kv_chunk, device=lo.device)
    n1s = (n0s + kv_chunk).clamp_max(seq_len)
    for m0 in range(0, q_len, q_chunk):
        m1 = min(m0 + q_chunk, q_len)
        blo, bhi = lo[:, m0:m1, None], hi[:, m0:m1, None]  # (B, rows, 1) against (key blocks,)
        sees = ((bhi >= n0s) & (blo < n1s) & (blo <= bhi)).flatten(0, 1).any(0)
        whole = ((blo <= n0s) & (bhi >= n1s - 1)).flatten(0, 1).all(0)
        kv = [(n0, n1, not full) for n0, n1, seen, full in zip(n0s.tolist(), n1s.tolist(), sees.tolist(), whole.tolist())
              if seen]
        yield m0, m1, kv


def no_empty_rows(keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(keep', sees): `keep` with every row that sees no key opened to all keys, and
    bool (..., rows, 1) saying which rows see a key.

    A softmax over a row of -inf is 0/0 = NaN, forward and backward. Opening such rows keeps the
    softmax finite; multiplying the output by `sees` then returns zeros there, and zero
    gradients, which is what FlashAttention returns for a row that sees nothing.
    """
    sees = keep.any(dim=-1, keepdim=True)
    return keep | ~sees, sees
