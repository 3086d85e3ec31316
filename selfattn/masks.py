"""Which keys each query sees: the one geometry every back end, the reference and FLOPs share.

Every mask the harness supports leaves each query row a contiguous range of keys:
positions are aligned bottom-right (query i sits at p = i + seq_len - q_len), and
    causal        keys j <= p
    window w      p - j < w, and (unless causal) j - p < w
    window (l, r) p - l <= j <= p + r, -1 unbounded on its side, causal capping r at 0
                  (FlashAttention's window_size; selfattn/variants.py)
    key_lengths   keys j < key_lengths[b] (the rest of sequence b is right padding)
    document_ids  keys of the query's own document (packed sequences; ids never decrease,
                  so a document is a contiguous range; needs q_len == seq_len)
combine by intersection, so query i of sequence b sees exactly the keys lo[b, i] <= j <= hi[b, i].
A row with lo > hi sees no key; every back end returns zeros there (as FlashAttention does).
Describing masks as intervals makes block skipping, exact FLOP counts and the boolean mask one
computation instead of one per back end.

The score transforms (softcap, alibi, sink: selfattn/variants.py) ride on the same object, since they are
arguments of the same call, but hide no key: the geometry below ignores them.

Decisions made in Python from the masks' values (whether some row sees no key, chunked's block
plan, flex's cache key) read tensor values on the host: on a GPU each such read waits for every
queued kernel, so inside a timed call it would time the queue's drain too. `Masks.decision` makes
each of them once and keeps it: on the Masks (key_lengths and document_ids are values of one
workload) or, for masks of flags alone (causal, window), in a small cache shared by every Masks
with the same flags, decided on the CPU so that even the first decision waits for no GPU. The
tensors themselves (intervals, boolean masks) are still computed inside each call, so a call
allocates what it did.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import torch

from selfattn import torch_private
from selfattn.variants import variants_used, window_extents

T = TypeVar("T")
# Decisions of masks without tensors, keyed on (causal, window, what, *args): small Python values,
# enough of them for one generation loop's distinct (q_len, seq_len) steps, oldest dropped first.
SHARED_DECISIONS = 4096
_shared: OrderedDict[tuple, Any] = OrderedDict()
_shared_lock = threading.Lock()


@dataclass(frozen=True)
class Masks:
    """The mask arguments of one call, checked (selfattn.validate.check_masks)."""

    causal: bool = False
    window: int | tuple[int, int] | None = None  # one width, or (left, right) with -1 unbounded
    key_lengths: torch.Tensor | None = None  # (batch,) int64
    document_ids: torch.Tensor | None = None  # (batch, seq_len)
    # score transforms (selfattn/variants.py): they change the logits of the keys a row sees, not which
    softcap: float | None = None
    alibi: bool = False
    sink: float | None = None
    # a mask function and a score function in the field's convention (selfattn/mods/): the mask_mod hides keys
    # beyond the intervals above (intersected), the score_mod changes the scaled logits before the mask
    mask_mod: Any = None  # selfattn.mods.BoundMod | None
    score_mod: Any = None  # selfattn.mods.BoundMod | None
    # decisions kept for these tensors' values (see `decision`); not a mask argument
    _decisions: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def only_causal(self) -> bool:
        """Causal or nothing: the case fused kernels have a flag for (`is_causal`)."""
        return (self.window is None and self.key_lengths is None and self.document_ids is None
                and self.mask_mod is None)

    @property
    def plain_scores(self) -> bool:
        """No score transform: softmax(scale * q.k) over the keys a row sees."""
        return self.softcap is None and not self.alibi and self.sink is None and self.score_mod is None

    @property
    def functions(self) -> tuple[str, ...]:
        """The mask functions these arguments use ("mask_mod", "score_mod"), for a back end's declaration."""
        return tuple(name for name in ("mask_mod", "score_mod") if getattr(self, name) is not None)

    @property
    def variants(self) -> tuple[str, ...]:
        """The variants these arguments use (selfattn.variants.VARIANT_NAMES), for a back end's declaration."""
        return variants_used(self.window, self.softcap, self.alibi, self.sink)

    @property
    def extents(self) -> tuple[int | None, int | None]:
        """(left, right): how far before and after its position a query sees (None: unbounded), causal included."""
        return window_extents(self.window, self.causal)

    def intervals(self, q_len: int, seq_len: int, device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(lo, hi), each int64 (batch or 1, q_len): query i of sequence b sees keys lo..hi inclusive."""
        return key_intervals(q_len, seq_len, causal=self.causal, window=self.window,
                             key_lengths=self.key_lengths, document_ids=self.document_ids, device=device)

    def keep(self, q_len: int, seq_len: int, *, rows: torch.Tensor | None = None,
             keys: tuple[int, int] | None = None, device: torch.device | str | None = None) -> torch.Tensor:
        """Bool (batch or 1, rows, keys): True where query i may see key j (the mask itself)."""
        if self.mask_mod is not None:
            raise ValueError("masks: a mask function may read the head: its mask comes from keep_heads")
        lo, hi = self.intervals(q_len, seq_len, device)
        return keep_from_intervals(lo, hi, seq_len, rows=rows, keys=keys)

    def keep_heads(self, q_len: int, seq_len: int, *, batch: int, heads: int, rows: torch.Tensor | None = None,
                   keys: tuple[int, int] | None = None, device: torch.device | str | None = None) -> torch.Tensor:
        """Bool (batch or 1, heads or 1, rows, keys): the mask with the mask function's, if any (selfattn/mods/)."""
        if self.mask_mod is None:
            return self.keep(q_len, seq_len, rows=rows, keys=keys, device=device)[:, None]
        return self.mask_mod.keep(self, batch, heads, q_len, seq_len, device, rows=rows, keys=keys)

    def decision(self, key: tuple, decide: Callable[[torch.device | str], T]) -> T:
        """`decide(device)`, made once for these masks' values and kept: a Python value that a call
        branches or loops on (a bool, a block plan, a digest), which reading tensors on the host
        would otherwise make inside every call.

        `key` names the decision and its arguments (shapes, chunk sizes). Masks with padding or
        documents keep it on themselves, keyed also on their tensors' version counters (an in-place
        change makes a fresh decision), and `decide` gets their device; masks of flags alone share
        one cache across Masks objects and `decide` gets "cpu" (the flags decide it, wherever the
        call runs). Callers must not mutate a decision they get back.
        """
        tensors = [t for t in (self.key_lengths, self.document_ids) if t is not None]
        if not tensors:
            shared_key = (self.causal, self.window, *(m.key if m is not None else None
                                                      for m in (self.mask_mod, self.score_mod)), *key)
            with _shared_lock:
                if shared_key in _shared:
                    _shared.move_to_end(shared_key)
                    return _shared[shared_key]
            value = decide("cpu")
            with _shared_lock:
                _shared[shared_key] = value
                while len(_shared) > SHARED_DECISIONS:
                    _shared.popitem(last=False)
            return value
        own_key = (*key, *(_version(t) for t in tensors))
        if own_key not in self._decisions:
            self._decisions[own_key] = decide(tensors[0].device)
        return self._decisions[own_key]

    def empty_rows(self, q_len: int, seq_len: int, *, batch: int = 1, heads: int = 1) -> bool:
        """Whether some query row sees no key (lo > hi somewhere), decided once (`decision`); with a mask
        function, of some sequence of `batch` and head of `heads` (selfattn/mods/geometry.py)."""
        if self.mask_mod is not None:
            return self.mask_mod.empty_rows(self, batch, heads, q_len, seq_len)

        def decide(device: torch.device | str) -> bool:
            lo, hi = self.intervals(q_len, seq_len, device)
            return bool((lo > hi).any())

        return self.decision(("empty_rows", q_len, seq_len), decide)

    def prepare(self, q_len: int, seq_len: int) -> None:
        """Make the decisions every back end may ask of these masks, before any timed call."""
        self.empty_rows(q_len, seq_len)


def _version(t: torch.Tensor) -> int | None:
    """The tensor's version counter (bumped by every in-place change); inference tensors have none, nor does a
    torch whose private counter moved (selfattn/torch_private.py)."""
    return torch_private.tensor_version(t)


def key_intervals(
    q_len: int,
    seq_len: int,
    *,
    causal: bool = False,
    window: int | tuple[int, int] | None = None,
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
    left, right = window_extents(window, causal)  # causal is right = 0
    if left is not None:
        lo = torch.maximum(lo, pos[None] - left)
    if right is not None:
        hi = torch.minimum(hi, pos[None] + right)
    if key_lengths is not None:
        hi = torch.minimum(hi, key_lengths.to(device=device, dtype=torch.long)[:, None] - 1)
    if document_ids is not None:  # q_len == seq_len: query i is key i's position
        ids = document_ids.to(device=device)
        # First and last key of each query's document: ids never decrease, so a document starts where
        # the id changes; a running max of the start positions (and a running min of the end positions
        # from the right) gives each token its document's. (Not torch.searchsorted: this runs inside every
        # chunked call, and a few elementwise ops cost far less there than a search per token.)
        key_idx = torch.arange(seq_len, device=device).expand_as(ids)
        change = ids[:, 1:] != ids[:, :-1]  # (B, seq_len - 1): token j + 1 starts a document
        edge = torch.ones_like(ids[:, :1], dtype=torch.bool)
        starts = torch.cat([edge, change], dim=1)
        ends = torch.cat([change, edge], dim=1)
        first = torch.where(starts, key_idx, 0).cummax(dim=1).values
        last = torch.where(ends, key_idx, seq_len).flip(1).cummin(dim=1).values.flip(1)
        lo = torch.maximum(lo, first[:, :q_len])
        hi = torch.minimum(hi, last[:, :q_len])
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


def bounds(length: int, chunk: int, cuts: list[int] | tuple[int, ...] = ()) -> list[int]:
    """Block boundaries 0 = b0 < b1 < ... = length: blocks of at most `chunk`, each ending at the first
    cut it would straddle (a document start, a head's first virtual row), so that blocks stay inside
    one document. A cut closer than chunk // 8 to its block's start is straddled instead: tiny
    documents share a (masked) block rather than each costing a block of a few rows."""
    min_len = max(1, chunk // 8)
    pending = sorted(c for c in set(cuts) if 0 < c < length)
    out, start, i = [0], 0, 0
    while start < length:
        end = min(start + chunk, length)
        while i < len(pending) and pending[i] < start + min_len:
            i += 1
        if i < len(pending) and pending[i] < end:
            end = pending[i]
        out.append(end)
        start = end
    return out


def blocks(lo: torch.Tensor, hi: torch.Tensor, q_len: int, seq_len: int, q_chunk: int, kv_chunk: int, *,
           q_bounds: list[int] | None = None, kv_bounds: list[int] | None = None):
    """Yield (m0, m1, [(n0, n1, needs_mask), ...]) for every query block: the key blocks to compute.

    Blocks follow `q_bounds` and `kv_bounds` (`bounds(...)`; a plain grid of q_chunk x kv_chunk
    when None). A key block that no query of the block sees (in any sequence of `lo`/`hi`) is left
    out; the others are trimmed to the keys the block's queries see at all (a causal block stops at
    its last query, a window's block starts at its first query's first key), and one that every
    query sees whole after trimming needs no mask. One vectorized test per query block.
    """
    q_bounds = q_bounds or bounds(q_len, q_chunk)
    kv_bounds = kv_bounds or bounds(seq_len, kv_chunk)
    n0s = torch.tensor(kv_bounds[:-1], device=lo.device)
    n1s = torch.tensor(kv_bounds[1:], device=lo.device)
    for m0, m1 in zip(q_bounds[:-1], q_bounds[1:]):
        blo, bhi = lo[:, m0:m1].flatten(), hi[:, m0:m1].flatten()
        seen = blo <= bhi
        if not bool(seen.any()):
            yield m0, m1, []
            continue
        first, last = int(blo[seen].min()), int(bhi[seen].max())  # the keys any row of the block sees
        t0s, t1s = n0s.clamp_min(first), n1s.clamp_max(last + 1)  # each key block trimmed to them
        blo, bhi = blo[:, None], bhi[:, None]  # (rows, 1) against (key blocks,)
        sees = ((bhi >= t0s) & (blo < t1s) & (blo <= bhi) & (t0s < t1s)).any(0)
        whole = ((blo <= t0s) & (bhi >= t1s - 1)).all(0)  # a row that sees no key needs the mask too
        kv = [(n0, n1, not full) for n0, n1, ok, full in zip(t0s.tolist(), t1s.tolist(), sees.tolist(), whole.tolist())
              if ok]
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
