"""Why a kernel is `incorrect`, when its errors follow a known pattern: a hint appended to the row's reason.

The sampled rows' float64 reference is computed again with the masks changed the way kernels commonly get them
wrong; a kernel whose output matches one of those (within the same bound that judged it) gets that named:

- causal and q_len < seq_len: a top-left aligned causal mask (query i sees keys j <= i, where this harness's
  contract puts it at i + seq_len - q_len: docs/api.md, docs/plugins.md);
- a window: the window counted one key off (w + 1 or w - 1 keys; here window w keeps p - j < w);
- wrong only in rows that see no key (padding, a window, a mask function can leave a row none): the contract
  returns zeros there, as FlashAttention does; a model discards those rows, but the harness compares them.

Each test costs one float64 pass over the sampled rows, and runs only for a row already judged incorrect.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from selfattn.masks import Masks, no_empty_rows
from selfattn.score_mods import softmax_with_sink, transform_scores


def _reference_rows(q_rows: torch.Tensor, k: torch.Tensor, v: torch.Tensor, masks: Masks, scale: float,
                    q_len: int, seq_len: int, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, sees): attention_reference's steps in float64 on the sampled rows only, and which rows see a key."""
    q64, k64, v64 = (t.detach().double() for t in (q_rows, k, v))
    group = q64.shape[1] // k64.shape[1]
    k64, v64 = k64.repeat_interleave(group, dim=1), v64.repeat_interleave(group, dim=1)
    rows = rows.to(q64.device)
    scores = transform_scores((q64 @ k64.transpose(-1, -2)) * scale, masks, q_len, seq_len, rows=rows)
    keep, sees = no_empty_rows(masks.keep_heads(q_len, seq_len, batch=q64.shape[0], heads=q64.shape[1], rows=rows,
                                                device=q64.device))
    weights = softmax_with_sink(scores.masked_fill(~keep, float("-inf")), masks.sink)
    return (weights @ v64) * sees, sees


def _top_left(masks: Masks, q_len: int, seq_len: int) -> Masks:
    offset = seq_len - q_len

    def top_left_causal(b, h, q_idx, kv_idx):  # q_idx arrives bottom-right: row i is q_idx - offset
        return kv_idx <= q_idx - offset

    from selfattn.mods.contract import from_callable

    if masks.mask_mod is not None:
        return masks  # a mask function's own causality is its own
    return replace(masks, causal=False, mask_mod=from_callable(top_left_causal, "mask"))


def _windows(window: Any) -> list[tuple[str, Any]]:
    """The window one key wider and one key narrower, with how each reads."""
    if isinstance(window, tuple):
        left, right = window
        out = []
        for delta in (1, -1):
            changed = (left if left < 0 else max(0, left + delta), right if right < 0 else max(0, right + delta))
            if changed != window:
                out.append((f"window=[{changed[0]}, {changed[1]}]", changed))
        return out
    return [(f"window={w}", w) for w in (window + 1, window - 1) if w >= 1]


def hint(point: Any, workload: Any, result: Any, bound: float) -> str:
    """"; hint: ..." when `result` (the checked call's Result) matches a known mistake, else ""."""
    from selfattn.scopes import declared

    if not declared(point).gives_qkv or point.score != "dot" or workload.stability_inputs is None or result is None:
        return ""
    try:
        return _hint(point, workload, result, bound)
    except Exception:  # a hint must never turn a verdict into an error
        return ""


def _hint(point: Any, workload: Any, result: Any, bound: float) -> str:
    q_rows, k, v, rows = workload.stability_inputs()
    masks: Masks = workload.masks
    q_len, seq_len, scale = point.q_len_resolved, point.seq_len, point.scale_value
    out = result.out_rows.detach().double().to(q_rows.device)

    def matches(candidate: Masks) -> bool:
        ref, _ = _reference_rows(q_rows, k, v, candidate, scale, q_len, seq_len, rows)
        return bool(torch.isfinite(out).all()) and float((out - ref).abs().max()) <= bound

    if masks.causal and q_len < seq_len and masks.mask_mod is None and matches(_top_left(masks, q_len, seq_len)):
        return ("; hint: the output matches a top-left aligned causal mask (query i sees keys j <= i); here causal "
                f"is bottom-right aligned, query i sees j <= i + seq_len - q_len = i + {seq_len - q_len} (docs/plugins.md)")
    if masks.window is not None:
        for text, window in _windows(masks.window):
            if matches(replace(masks, window=window)):
                return (f"; hint: the output matches {text}, a window counted one key off (here window={point.window} "
                        "keeps p - j < w, its own position included; a pair [left, right] keeps p - left <= j <= p + right)")
    ref, sees = _reference_rows(q_rows, k, v, masks, scale, q_len, seq_len, rows)
    empty = ~sees[..., 0]  # (B or 1, H or 1, rows)
    if bool(empty.any()):
        wrong = ((out - ref).abs().amax(-1) > bound) | ~torch.isfinite(out).all(-1)  # (B, H, rows)
        if bool(wrong.any()) and not bool((wrong & ~empty.expand_as(wrong)).any()):
            count = int(empty.expand_as(wrong)[..., :].any(0).any(0).sum())
            return (f"; hint: wrong only in rows that see no key ({count} of the sampled rows): the contract returns "
                    "zeros there, as FlashAttention does (a model discards those rows, the harness compares them)")
    return ""
