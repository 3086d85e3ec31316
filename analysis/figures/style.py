"""Every colour (and precision line style) the figures use, defined once: a back end, precision or scale reads the same in every figure.

A back end's colour is a function of its name alone, never of which figure or line came first:
the registry's back ends take the first colours in registry order, a compiled variant
('naive+compile') a darker shade of its back end's colour, and any other name (a back end the
registry does not know yet, or a variant such as 'chunked (q_chunk=256)') takes one of the
remaining colours chosen by a digest of the name, so it is stable across figures and runs.
"""

from __future__ import annotations

import zlib
from typing import Iterable

from matplotlib.colors import to_hex, to_rgb

import selfattn.backends as registry  # BACKEND_NAMES is a plain tuple: importing it does not import torch
from analysis.cost import COMPILED_SUFFIX

# Colour-blind-safe (Okabe-Ito), in the order the registry's back ends take them.
_COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#8C564B")
COMPILED_SHADE = 0.55  # a compiled variant's colour: its back end's, times this (darker, same hue)

# Widest to narrowest, so panels and legends read fp64, fp32, tf32, bf16, fp16.
PRECISION_ORDER = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8_e5m2", "fp8_e4m3")
PRECISION_COLORS = {"fp64": "#000000", "fp32": "#0072B2", "tf32": "#56B4E9", "bf16": "#009E73", "fp16": "#D55E00",
                    "fp8_e5m2": "#CC79A7", "fp8_e4m3": "#E69F00"}
SCALE_COLORS = {"auto": "#0072B2", "none": "#D55E00"}  # with the 1/sqrt(d_k) scale, without it
# A precision drawn as a line style (where colour already says something else), as seaborn dashes.
PRECISION_DASHES = {"fp64": (1, 1), "fp32": "", "tf32": (5, 1, 1, 1), "bf16": (4, 1.5, 1, 1.5), "fp16": (4, 2)}
DEVICE_COLORS = _COLORS  # devices are compared in one figure only: sorted by name, they take these in turn
OTHER = "#666666"  # a precision or scale outside the tables above


def _known() -> dict[str, str]:
    """{registry back end or its compiled variant: colour}, read from the registry as it is now."""
    names = registry.BACKEND_NAMES
    known = {name: _COLORS[i % len(_COLORS)] for i, name in enumerate(names)}
    known.update({name + COMPILED_SUFFIX: to_hex(tuple(c * COMPILED_SHADE for c in to_rgb(known[name]))).upper()
                  for name in names})
    return known


def _spare() -> tuple[str, ...]:
    used = set(_known().values())
    return tuple(c for c in _COLORS if c not in used) or _COLORS


def backend_color(name: str) -> str:
    """The colour of back end (or variant label) `name` in every figure."""
    known = _known()
    if name in known:
        return known[name]
    # crc32, not hash(): Python salts str hashes per process, and the colour must survive a rerun.
    spare = _spare()
    return spare[zlib.crc32(name.encode()) % len(spare)]


def backend_palette(names: Iterable[str]) -> dict[str, str]:
    """{name: colour} for seaborn's `palette=`: each name's own colour, unless two unknown names in one
    figure would share one; then the later in sorted order takes the next free spare colour."""
    palette: dict[str, str] = {}
    known, spare = _known(), _spare()
    names = sorted(set(names), key=lambda n: (n not in known, n))  # known first: they never move
    for name in names:
        color = backend_color(name)
        if name not in known and color in palette.values():
            start = spare.index(color)
            for step in range(1, len(spare)):
                candidate = spare[(start + step) % len(spare)]
                if candidate not in palette.values():
                    color = candidate
                    break
        palette[name] = color
    return palette


def precision_order(precision: str) -> int:
    """Sort key: widest to narrowest; unknown precisions after the known ones."""
    return PRECISION_ORDER.index(precision) if precision in PRECISION_ORDER else len(PRECISION_ORDER)


def precision_color(precision: str) -> str:
    return PRECISION_COLORS.get(precision, OTHER)


def scale_color(scale: str) -> str:
    return SCALE_COLORS.get(scale, OTHER)


def precision_dashes(precisions: Iterable[str]) -> dict[str, tuple | str]:
    """{precision: dashes} for seaborn's `dashes=`; an unknown precision is drawn dotted."""
    return {p: PRECISION_DASHES.get(p, (1, 2)) for p in set(precisions)}


def device_palette(devices: Iterable[str]) -> dict[str, str]:
    return {d: DEVICE_COLORS[i % len(DEVICE_COLORS)] for i, d in enumerate(sorted(set(devices)))}


# scope=layer (attention) and the recurrent baselines (figure 18): attention in the colour sdpa has, the RNNs apart.
SCOPE_COLORS = {"layer": "#0072B2", "lstm": "#D55E00", "gru": "#CC79A7"}


def scope_palette(scopes: Iterable[str]) -> dict[str, str]:
    return {s: SCOPE_COLORS.get(s, OTHER) for s in set(scopes)}


# The attention variants (figure 22, analysis/variants.py): colours of their own in the order of their first word,
# so a variant reads the same in every back end's panel; a combination or a value outside this table takes OTHER.
VARIANT_COLORS = {"window": "#0072B2", "causal window": "#56B4E9", "softcap": "#D55E00", "ALiBi": "#009E73",
                  "sink": "#CC79A7", "causal": "#E69F00"}
VARIANT_MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def variant_palette(kinds: Iterable[str]) -> dict[str, str]:
    """{variant kind ('window [127, 0]', 'softcap 50', ...): colour}: its kind's colour; two windows of one kind
    (two pairs) take the kind's colour and the next spare ones."""
    palette: dict[str, str] = {}
    for kind in sorted(set(kinds)):
        base = next((color for prefix, color in sorted(VARIANT_COLORS.items(), key=lambda kv: -len(kv[0]))
                     if kind.startswith(prefix) and " + " not in kind), OTHER)
        if base in palette.values():
            base = next((c for c in _COLORS if c not in palette.values()), OTHER)
        palette[kind] = base
    return palette
