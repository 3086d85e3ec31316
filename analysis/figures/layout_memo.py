"""Two answers matplotlib computes again and again while it lays a figure out, remembered where that is exact.

`text_layouts()`: each text's layout computed once per figure instead of at every layout pass.

matplotlib lays a text out (its lines' widths, ascents and descents, its rotated box, its offsets for the
alignment) each time anything asks for its extent, and nothing keeps the answer: a figure's tight layout, its
constrained layout's two passes, each axis label's placement (which asks every tick label of its siblings again)
and the render ask for the same tick labels a dozen times, and laying them out was a fifth of a figure's time.
The layout is a function of the text and the properties below, not of where the text is (the caller adds the
position), so within `text_layouts()` a layout is computed once per distinct key and reused. The pictures are the
same: a cached layout is the very value the computation would return.

`tight_boxes()`: within one tight layout, each axes' tight box computed once. matplotlib's tight layout within a
rectangle (seaborn's grids ask for one, leaving room for the legend) solves the subplot parameters twice, the
second time within the rectangle the first gave, and computes every axes' tight box both times, although nothing
is moved between the two: the second solve reads the first's boxes. That was half of each grid's tight layout.

These lean on matplotlib's private `Text._get_layout` and `artist._get_tightbbox_for_layout_only`; where a
matplotlib lacks one, its context does nothing.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from matplotlib import artist as martist
from matplotlib import text as mtext

_ORIGINAL = getattr(mtext.Text, "_get_layout", None)
_TIGHT_BOX = getattr(martist, "_get_tightbbox_for_layout_only", None)


def _key(text: mtext.Text, renderer: Any) -> tuple | None:
    """What Text._get_layout reads, or None for a text whose layout also depends on where it is (wrapped)."""
    if text.get_wrap():
        return None
    font = text._fontproperties
    return (id(renderer), text.get_text(), text.get_usetex(), text.get_parse_math(),
            tuple(font.get_family()), font.get_style(), font.get_variant(), font.get_weight(), font.get_stretch(),
            font.get_size(), font.get_file(), font.get_math_fontfamily(),
            text._linespacing, text._get_multialignment(), text.get_rotation(), text.get_rotation_mode(),
            text._horizontalalignment, text._verticalalignment, text.get_figure(root=True).dpi)


@contextlib.contextmanager
def text_layouts() -> Iterator[None]:
    """Within the block, each text layout is computed once per key (see the module's docstring)."""
    if _ORIGINAL is None or mtext.Text._get_layout is not _ORIGINAL:  # missing, or already remembered
        yield
        return
    layouts: dict[tuple, Any] = {}
    renderers: dict[int, Any] = {}  # the renderers keyed by id stay alive while their keys do

    def get_layout(text: mtext.Text, renderer: Any):
        key = _key(text, renderer)
        if key is None:
            return _ORIGINAL(text, renderer)
        layout = layouts.get(key)
        if layout is None:
            layout = layouts[key] = _ORIGINAL(text, renderer)
            renderers[id(renderer)] = renderer
        return layout

    mtext.Text._get_layout = get_layout
    try:
        yield
    finally:
        mtext.Text._get_layout = _ORIGINAL


@contextlib.contextmanager
def tight_boxes() -> Iterator[None]:
    """Within the block, each artist's tight box for the layout is computed once per renderer. Only for a block
    in which nothing that changes a box happens between the asks: one tight layout's solve (see the module's
    docstring)."""
    if _TIGHT_BOX is None or martist._get_tightbbox_for_layout_only is not _TIGHT_BOX:
        yield
        return
    boxes: dict[tuple[int, int], Any] = {}
    held: list[Any] = []  # what is keyed by id stays alive while its key does

    def tight_box(obj: Any, *args: Any, **kwargs: Any):
        if len(args) != 1 or kwargs:  # not the call the tight layout makes: as it was
            return _TIGHT_BOX(obj, *args, **kwargs)
        key = (id(obj), id(args[0]))
        if key not in boxes:
            boxes[key] = _TIGHT_BOX(obj, *args)
            held.append((obj, args[0]))
        return boxes[key]

    martist._get_tightbbox_for_layout_only = tight_box
    try:
        yield
    finally:
        martist._get_tightbbox_for_layout_only = _TIGHT_BOX
