"""The attention variants models use now, as plain data: asymmetric windows, soft-capping, ALiBi, sinks.

    window   w (one width: p - j < w, and j - p < w unless causal) or a pair [left, right] with
             FlashAttention's meaning: query p sees keys p - left <= j <= p + right, -1 unbounded on
             that side; causal caps right at 0. So w is [w - 1, w - 1], or [w - 1, 0] with causal.
    softcap  null or a cap c > 0: each logit s (after the scale) becomes c * tanh(s / c) (Gemma 2)
    alibi    false or true: head h of H adds -slope_h * |p - j| (ALiBi, Press et al. 2022)
    sink     null or a finite number: each row's softmax gets one more logit of that value in its
             denominator, with no value vector (GPT-OSS; FlashAttention 4's learnable sink)

Order, as FlashAttention's reference applies them: scale, soft-cap, then the ALiBi bias, then the mask;
the sink logit is neither capped nor biased. A row that sees no key is zeros (with a sink too: its
numerator is empty). Positions are bottom-right aligned (selfattn/masks.py), so p - j is the same
distance in a decode step as in the full sequence.

Pure Python: `Point` (no torch) validates the axes with these parsers; selfattn/score_mods.py applies
them to tensors.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

# The names a back end declares it supports (a module's VARIANTS, a plugin's Declaration.variants); a
# point that uses one its back end does not declare is an `unsupported` row naming it.
VARIANT_NAMES: tuple[str, ...] = ("asymmetric_window", "softcap", "alibi", "sink")
UNBOUNDED = -1  # a window side that reaches the sequence's end
WINDOW_ALLOWED = "None, an integer >= 1, or a pair [left, right] of integers >= -1 (-1: unbounded)"


def parse_window(value: Any) -> int | tuple[int, int] | None:
    """The canonical window: None, an int >= 1, or a tuple (left, right) of ints >= -1.

    Accepts any two-element sequence (a Hydra list, a JSON list, a tuple); raises ValueError
    "window: expected ..., got ..." otherwise.
    """
    def bad() -> ValueError:
        return ValueError(f"window: expected {WINDOW_ALLOWED}, got {value!r}")

    if value is None:
        return None
    if isinstance(value, bool):
        raise bad()
    if isinstance(value, int):
        if value < 1:
            raise bad()
        return value
    if isinstance(value, str):  # "[63, 0]": the spelling results.csv stores a pair in
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            parts = [part.strip() for part in text[1:-1].split(",")]
            try:
                value = [int(part) for part in parts]
            except ValueError:
                raise bad() from None
        else:
            raise bad()
    if not isinstance(value, (str, bytes)) and hasattr(value, "__len__") and hasattr(value, "__iter__"):
        pair = list(value)
        if len(pair) != 2 or any(isinstance(x, bool) or not isinstance(x, int) or x < UNBOUNDED for x in pair):
            raise bad()
        return (int(pair[0]), int(pair[1]))
    raise bad()


def window_text(window: int | tuple[int, int] | None) -> str:
    """The spelling of a window in results.csv and labels: "" (none), "256", "[255, 0]"."""
    if window is None:
        return ""
    if isinstance(window, tuple):
        return f"[{window[0]}, {window[1]}]"
    return str(window)


def window_extents(window: int | tuple[int, int] | None, causal: bool) -> tuple[int | None, int | None]:
    """(left, right): how far before and after its own position a query sees, None for unbounded.

    causal caps right at 0; one width w is (w - 1, w - 1), or (w - 1, 0) with causal.
    """
    if window is None:
        left, right = None, None
    elif isinstance(window, tuple):
        left, right = (None if side == UNBOUNDED else side for side in window)
    else:
        left, right = window - 1, window - 1
    if causal:
        right = 0 if right is None else min(right, 0)
    return left, right


def parse_softcap(value: Any) -> float | None:
    """None, or a finite cap > 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"softcap: expected None or a positive finite number, got {value!r}")
    return float(value)


def parse_sink(value: Any) -> float | None:
    """None, or a finite logit."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"sink: expected None or a finite number, got {value!r}")
    return float(value)


def parse_alibi(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"alibi: expected true or false, got {value!r}")
    return value


def alibi_slopes(heads: int) -> list[float]:
    """The ALiBi slope of each of `heads` heads.

    H a power of two: 2^(-8 (h + 1) / H), h = 0..H-1. Otherwise the ALiBi paper's interpolation (its
    reference code, also FlashAttention's tests): the slopes of the largest power of two n < H, then the
    first H - n of the odd-indexed slopes of 2n heads (those that fall between the first n).
    """
    if heads < 1:
        raise ValueError(f"heads: expected an integer >= 1, got {heads!r}")

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    if heads & (heads - 1) == 0:
        return power_of_two(heads)
    n = 2 ** math.floor(math.log2(heads))
    return power_of_two(n) + power_of_two(2 * n)[0::2][: heads - n]


def variants_used(window: Any, softcap: Any, alibi: Any, sink: Any) -> tuple[str, ...]:
    """The VARIANT_NAMES a call with these arguments uses (a one-width window is the classic mask, not one)."""
    used = {"asymmetric_window": isinstance(window, (tuple, list)), "softcap": softcap is not None,
            "alibi": bool(alibi), "sink": sink is not None}
    return tuple(name for name in VARIANT_NAMES if used[name])


def unsupported_variants(used: Sequence[str], supported: Sequence[str]) -> list[str]:
    """The variants of `used` a back end that declares `supported` cannot run."""
    return [name for name in used if name not in supported]
