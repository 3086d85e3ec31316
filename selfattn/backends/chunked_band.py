"""chunked's band runs: query blocks that all see one shifted pattern of keys, in three batched ops.

A sliding window (causal or not) gives every query block away from the sequence's ends the same
pattern of visible keys, shifted by the block's size: block [m0, m0 + B) sees keys n0 .. n0 + S - 1
with n0 = m0 - (w - 1), and inside that window the same B x S band. The block loop computes such a
block as two or three key blocks of about 15 small ops each (and on two threads hands the GIL back
and forth around every op): at n = 4096, w = 256 the window took 0.39x of the causal call while it
computes a sixth of its scores.

A run of R such blocks is one batched product instead. Block b + 1's window starts B keys after
block b's, so the R windows of K (and of V) are one strided, overlapping view of K itself: nothing
is copied. Per head and run:
    scores = baddbmm(bias, Q_blocks, K_windows^T)   the band's -inf bias added by the product
    P      = softmax(scores)                         every row's keys lie inside its window, so
                                                     one exact softmax replaces the online one
    out    = P @ V_windows                           written straight into the output's rows
and, only when a backward (or the sink) will need it, the rows' log-sum-exp (from the max of the scores and
of P: two reductions).
With a soft-cap or ALiBi (chunked_mods.py) the product is a plain bmm, the transforms follow in place and
the bias is added after them (a capped -inf would become a finite -cap); window pairs make runs like
one-width windows do (the runs follow the key intervals, not the window's spelling).

Where it applies (`forward_plan` decides, once per masks): runs of at least BAND_MIN_BLOCKS
consecutive plan entries of one size whose visible keys repeat one pattern shifted by that size,
which only a window's interior blocks do (a causal block's keys grow, a document's stay put). The
blocks at the ends (a window cut by the sequence's start or end) and every other mask keep the
block loop. chunked.py runs it for eager fp32/fp64 forwards on a CPU (`band_applies`), where it
was measured; FP8 (its P cast belongs to the block step), compiled blocks and GPUs keep the loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from selfattn.backends import chunked_mods
from selfattn.masks import keep_from_intervals

# Query rows per band block: the run's product shape. 32 measured fastest or within 5% of it for w = 64 to
# 512 (CPU fp32, d = 64, one thread; 128-row blocks were 10-60% slower): a smaller block wastes fewer
# of its window's S = B + w - 1 keys. A plan block that 32 does not divide is its own band block.
BAND_BLOCK = 32
# Query rows per run: 2 x rows x S scores (the scores and their softmax) are alive per worker, so the
# working set stays O(1) in n (2 x 512 x 287 fp32 = 1.2 MB at w = 256, within L2). 256 to 512 rows
# measured 10-25% faster than 1024 to 2048 at w = 256.
BAND_ROWS = 512
BAND_MIN_BLOCKS = 2  # one block gains nothing from batching


@dataclass(frozen=True)
class BandRun:
    """The key side of a plan entry (m0, m1, BandRun) that covers (m1 - m0) // block query blocks."""

    n0: int  # the first key of the run's first block's window
    block: int  # B: query rows per block, and the keys' shift from one block to the next
    span: int  # S: keys in every block's window
    pattern: int  # which visibility pattern (one bias per pattern and call)

    @property
    def columns(self) -> int:
        """Key columns each query row computes (chunked_pool.split_plan's work)."""
        return self.span


def band_block(plan_block: int) -> int:
    """The band block of a plan's query block of `plan_block` rows."""
    return BAND_BLOCK if plan_block % BAND_BLOCK == 0 else plan_block


def forward_plan(plan: list, lo_1R: torch.Tensor, hi_1R: torch.Tensor) -> list:
    """The plan with its band runs: each run of consecutive entries whose band blocks (band_block) all
    see one pattern of keys shifted by their size becomes (m0, m1, BandRun) entries of at most
    BAND_ROWS rows; the other entries are kept. Read on the host: decided once per masks
    (chunked._block_plans)."""
    lo, hi = lo_1R[0].cpu().tolist(), hi_1R[0].cpu().tolist()
    subs = [_sub_keys(entry, lo, hi) for entry in plan]
    patterns: dict[tuple, int] = {}
    out: list = []
    i = 0
    while i < len(plan):
        j = i + 1
        while j < len(plan) and _joins(plan[j - 1], subs[j - 1], plan[j], subs[j]):
            j += 1
        first_row, last_row = plan[i][0], plan[j - 1][1]
        sub = subs[i]
        if sub is None or (last_row - first_row) // sub[0] < BAND_MIN_BLOCKS:
            out.extend(plan[i:j])
            i = j
            continue
        block, keys = sub
        n0, span, pattern = keys[0]
        pattern_id = patterns.setdefault(pattern, len(patterns))
        rows_per_run = max(1, BAND_ROWS // block) * block
        for m0 in range(first_row, last_row, rows_per_run):
            m1 = min(last_row, m0 + rows_per_run)
            out.append((m0, m1, BandRun(n0 + (m0 - first_row), block, span, pattern_id)))
        i = j
    return out


def _sub_keys(entry: tuple, lo: list[int], hi: list[int]) -> tuple[int, list[tuple]] | None:
    """(band block, (n0, S, pattern) of each of the entry's band blocks) when they continue one another
    and the band computes no more scores than the block loop would; None otherwise."""
    m0, m1, kv_blocks = entry
    if not kv_blocks:
        return None
    block = band_block(m1 - m0)
    found = [_band_key(r0, r0 + block, lo, hi) for r0 in range(m0, m1, block)]
    keys = [key for key in found if key is not None]
    if len(keys) < len(found) or not all(_continues(a, b, block) for a, b in zip(keys, keys[1:])):
        return None
    if keys[0][1] > sum(n1 - n0 for n0, n1, _ in kv_blocks):  # the loop's trimmed blocks compute fewer
        return None
    return block, keys


def _band_key(m0: int, m1: int, lo: list[int], hi: list[int]) -> tuple | None:
    """(n0, S, pattern) of the rows m0 .. m1 - 1 when every one of them sees some key; None otherwise."""
    rows_lo, rows_hi = lo[m0:m1], hi[m0:m1]
    if any(a > b for a, b in zip(rows_lo, rows_hi)):
        return None
    n0, span = min(rows_lo), max(rows_hi) - min(rows_lo) + 1
    return n0, span, (m1 - m0, span, tuple(a - n0 for a in rows_lo), tuple(b - n0 for b in rows_hi))


def _continues(previous: tuple, key: tuple, block: int) -> bool:
    """Whether band block `key` follows `previous`: the same pattern, its keys shifted by the block's
    size (so that one strided view holds both windows)."""
    return key[2] == previous[2] and key[0] == previous[0] + block


def _joins(previous_entry: tuple, previous: tuple | None, entry: tuple, subs: tuple | None) -> bool:
    """Whether plan entry `entry` extends a run that ends with `previous_entry`."""
    return (previous is not None and subs is not None and previous[0] == subs[0]
            and entry[0] == previous_entry[1] and _continues(previous[1][-1], subs[1][0], subs[0]))


def bias(lo: torch.Tensor, hi: torch.Tensor, seq_len: int, m0: int, run: BandRun, dtype: torch.dtype) -> torch.Tensor:
    """(1, B, S): 0 where the block's query sees the window's key, -inf where it does not."""
    keep = keep_from_intervals(lo, hi, seq_len, rows=torch.arange(m0, m0 + run.block, device=lo.device),
                               keys=(run.n0, run.n0 + run.span))
    return torch.zeros(keep.shape, dtype=dtype, device=lo.device).masked_fill_(~keep, float("-inf"))


def _windows(t_ND: torch.Tensor, run: BandRun, blocks: int) -> torch.Tensor:
    """(blocks, S, D): block b's window of t is rows n0 + b B .. n0 + b B + S - 1, a view (they overlap)."""
    row, col = t_ND.stride()
    return t_ND.as_strided((blocks, run.span, t_ND.shape[1]), (run.block * row, row, col),
                           t_ND.storage_offset() + run.n0 * row)


def forward_run(q_XRD: torch.Tensor, k_XND: torch.Tensor, v_XND: torch.Tensor, out_XRD: torch.Tensor,
                lse_XR: torch.Tensor, m0: int, m1: int, run: BandRun, bias_1BS: torch.Tensor, need_lse: bool,
                workspace: torch.Tensor, q_scale: float = 1.0, mods=None) -> None:
    """Rows m0 .. m1 - 1 of out (and of lse when `need_lse`) for every flattened head of q times q_scale.
    `workspace`: at least 2 x BAND_ROWS x S elements (scores and probabilities), reused by every run
    of a call, so that a run's big buffers are not fresh pages each time. `mods`: soft-cap and ALiBi
    (chunked_mods.BlockMods), applied to the scaled scores before the mask's bias (a capped -inf would
    be a finite -cap); the run's distances |p - j| are built once for every head."""
    blocks, d = (m1 - m0) // run.block, q_XRD.shape[2]
    size = (m1 - m0) * run.span
    scores = workspace[:size].view(blocks, run.block, run.span)
    probs = workspace[size:2 * size].view(blocks, run.block, run.span)
    distance_bBS = None if mods is None else mods.band_distances(m0, m1, run.n0, run.block, run.span)
    for x in range(q_XRD.shape[0]):
        q_BbD = q_XRD[x, m0:m1].reshape(blocks, run.block, d)
        kT_bDS = _windows(k_XND[x], run, blocks).transpose(1, 2)
        if mods is None:
            torch.baddbmm(bias_1BS, q_BbD, kT_bDS, alpha=q_scale, out=scores)
        else:
            torch.bmm(q_BbD, kT_bDS, out=scores)
            if q_scale != 1.0:
                scores.mul_(q_scale)
            neg_slopes_bB1 = None if distance_bBS is None else mods.neg_slopes_XR1[x, m0:m1].view(blocks, run.block, 1)
            chunked_mods.transform_(scores, mods.softcap, neg_slopes_bB1, distance_bBS)
            scores.add_(bias_1BS)
        row_max_bB = torch.amax(scores, dim=-1) if need_lse else None
        torch.softmax(scores, dim=-1, out=probs)
        if row_max_bB is not None:  # need_lse: log-sum-exp = max - log(P at the max): the largest P is the max score's, exp(max - lse).
            # Two quick reductions instead of torch.logsumexp, which measured 4x a softmax's time on a CPU
            # (fp32 (16, 32, 287) with hidden keys, one thread: 0.30 against 0.077 ms; the pair: 0.07 ms)
            torch.sub(row_max_bB, probs.amax(dim=-1).log_(), out=lse_XR[x, m0:m1].view(blocks, run.block))
        torch.bmm(probs, _windows(v_XND[x], run, blocks), out=out_XRD[x, m0:m1].view(blocks, run.block, d))
