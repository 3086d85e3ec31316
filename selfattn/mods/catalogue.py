"""The built-in masks and score mods: the field's catalogue, as factories in the one convention.

Each is a factory of keyword parameters returning a mask_mod(b, h, q_idx, kv_idx) or a
score_mod(score, b, h, q_idx, kv_idx) (selfattn/mods/contract.py: q_idx is the query's position, bottom-right
aligned). Those that today's axes already say (causal, sliding_window, window_pair, padding, documents,
alibi, softcap) declare that `fast_path`: a sweep that names them measures the axes' point (the same id,
the per-row key intervals of selfattn/masks.py and each back end's fast path), and their function here is
the same mask for any other use (`selfattn.attention(mask_mod=...)`, a figure, a test). The others
(prefix_lm, dilated_sliding_window, global_sliding_window) run through the function on every back end that
takes one.

Written with tensor operators and methods only, so this module needs no torch to import (the listing and
the point's checks read it) and every function evaluates on whole blocks of indices at once.
"""

from __future__ import annotations

from typing import Any, Callable

from selfattn.mods.contract import Param, declare_mod


def _all(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
    return kv_idx >= 0


@declare_mod(help="no mask: every query sees every key", params=(), per_head=False, per_sequence=False,
             fast_path=lambda p: {})
def none() -> Callable:
    return _all


@declare_mod(help="causal: query p sees keys j <= p (bottom-right aligned)", params=(), per_head=False,
             per_sequence=False, fast_path=lambda p: {"causal": True})
def causal() -> Callable:
    def causal_mask(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    return causal_mask


@declare_mod(help="sliding window of width w: |p - j| < w (with causal=true: p - j < w and j <= p)",
             params=(Param("window", 256, "the width w", ge=1),), per_head=False, per_sequence=False,
             fast_path=lambda p: {"window": p["window"]})
def sliding_window(window: int = 256) -> Callable:
    def sliding_window_mask(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx).abs() < window

    return sliding_window_mask


@declare_mod(help="a window pair: p - left <= j <= p + right, -1 unbounded (FlashAttention's window_size)",
             params=(Param("left", -1, "keys before p (-1: all)", ge=-1), Param("right", 0, "keys after p (-1: all)", ge=-1)),
             per_head=False, per_sequence=False, fast_path=lambda p: {"window": [p["left"], p["right"]]})
def window_pair(left: int = -1, right: int = 0) -> Callable:
    def window_pair_mask(b, h, q_idx, kv_idx):
        seen = kv_idx >= 0
        if left >= 0:
            seen = seen & (q_idx - kv_idx <= left)
        if right >= 0:
            seen = seen & (kv_idx - q_idx <= right)
        return seen

    return window_pair_mask


def _seeded(axis: str, function: str) -> Callable:
    def refuse(**_: Any) -> Callable:
        raise ValueError(f"mask: {axis}'s lengths are drawn from the point's seed, so a sweep says it with the axis "
                         f"{axis}=...; as a function: selfattn.mods.catalogue.{function}")

    return refuse


padding = declare_mod(_seeded("pad_frac", "padding_mask(key_lengths)"),
                      help="right padding: keys j < key_lengths[b] (lengths seeded; a sweep's pad_frac)",
                      params=(Param("pad_frac", 0.25, "mean fraction of keys that are padding", ge=0.0),),
                      per_head=False, fast_path=lambda p: {"pad_frac": p["pad_frac"]})
documents = declare_mod(_seeded("documents", "document_mask(document_ids)"),
                        help="packed documents: keys of the query's own document (lengths seeded; a sweep's documents)",
                        params=(Param("documents", 4, "documents per sequence", ge=1),),
                        per_head=False, fast_path=lambda p: {"documents": p["documents"]})


def padding_mask(key_lengths: Any) -> Callable:
    """mask_mod of right padding: key j of sequence b is seen when j < key_lengths[b] (a (batch,) tensor)."""
    def padding_mask_mod(b, h, q_idx, kv_idx):
        return kv_idx < key_lengths[b]

    return padding_mask_mod


def document_mask(document_ids: Any) -> Callable:
    """mask_mod of packed documents: query and key in the same document ((batch, seq_len) ids; q_len == seq_len)."""
    def document_mask_mod(b, h, q_idx, kv_idx):
        return document_ids[b, q_idx] == document_ids[b, kv_idx]

    return document_mask_mod


@declare_mod(help="prefix-LM: every key of the prefix (j < prefix) is seen, causal after it",
             params=(Param("prefix", 256, "keys every query sees (the bidirectional prefix)", ge=0),),
             per_head=False, per_sequence=False)
def prefix_lm(prefix: int = 256) -> Callable:
    def prefix_lm_mask(b, h, q_idx, kv_idx):
        return (kv_idx < prefix) | (q_idx >= kv_idx)

    return prefix_lm_mask


@declare_mod(help="dilated sliding window: causal, p - j < window, and p - j a multiple of dilation",
             params=(Param("window", 256, "the look-back width", ge=1), Param("dilation", 2, "the stride", ge=1)),
             per_head=False, per_sequence=False)
def dilated_sliding_window(window: int = 256, dilation: int = 2) -> Callable:
    def dilated_sliding_window_mask(b, h, q_idx, kv_idx):
        distance = q_idx - kv_idx
        return (distance >= 0) & (distance < window) & (distance % dilation == 0)

    return dilated_sliding_window_mask


@declare_mod(help="sliding window with global tokens: the window, plus the first global_tokens keys for every "
                  "query (and, not causal, every key for those tokens' queries)",
             params=(Param("window", 256, "the window's width", ge=1),
                     Param("global_tokens", 16, "leading tokens seen by every query", ge=0),
                     Param("causal", True, "causal window and global keys (a decoder's StreamingLLM pattern)")),
             per_head=False, per_sequence=False)
def global_sliding_window(window: int = 256, global_tokens: int = 16, causal: bool = True) -> Callable:
    def global_sliding_window_mask(b, h, q_idx, kv_idx):
        distance = q_idx - kv_idx
        if causal:
            return (distance >= 0) & ((distance < window) | (kv_idx < global_tokens))
        return (distance.abs() < window) | (kv_idx < global_tokens) | (q_idx < global_tokens)

    return global_sliding_window_mask


# --- score mods ---

@declare_mod(help="ALiBi: head h adds -slope_h * |p - j| (slopes 2^(-8(h+1)/H)); a sweep's alibi=true",
             params=(), per_sequence=False, fast_path=lambda p: {"alibi": True})
def alibi() -> Callable:
    raise ValueError("score_mod: alibi's slopes follow the point's heads, so a sweep says alibi=true; as a "
                     "function: selfattn.mods.catalogue.alibi_score_mod(heads)")


def alibi_score_mod(heads: int) -> Callable:
    """score_mod of ALiBi for `heads` query heads (selfattn.variants.alibi_slopes)."""
    from selfattn.variants import alibi_slopes

    slopes = alibi_slopes(heads)

    def alibi_mod(score, b, h, q_idx, kv_idx):
        slope = score.new_tensor(slopes)[h]  # on the scores' device, in their dtype
        return score - slope * (q_idx - kv_idx).abs()

    return alibi_mod


@declare_mod(help="logit soft-capping: s -> cap * tanh(s / cap) (Gemma 2); a sweep's softcap=cap",
             params=(Param("cap", 30.0, "the cap", ge=0.0),), per_head=False, per_sequence=False,
             fast_path=lambda p: {"softcap": p["cap"]})
def softcap(cap: float = 30.0) -> Callable:
    def softcap_mod(score, b, h, q_idx, kv_idx):
        return (score / cap).tanh() * cap

    return softcap_mod


# name -> factory, in the listing's order
MASKS: dict[str, Callable] = {
    "none": none, "causal": causal, "sliding_window": sliding_window, "window_pair": window_pair,
    "padding": padding, "documents": documents, "prefix_lm": prefix_lm,
    "dilated_sliding_window": dilated_sliding_window, "global_sliding_window": global_sliding_window,
}
SCORE_MODS: dict[str, Callable] = {"none": none, "alibi": alibi, "softcap": softcap}
BUILTINS = {"mask": MASKS, "score_mod": SCORE_MODS}
