"""The two shortcuts that make a figure cheaper to lay out keep its picture: ticks frozen before the layout
(analysis.figures.common._freeze_ticks) and text layouts remembered within a figure
(analysis.figures.layout_memo.text_layouts), and tight boxes remembered within one tight layout
(layout_memo.tight_boxes)."""

import contextlib

import numpy as np
import pytest

from analysis.figures import common, layout_memo
from analysis.figures.common import plt, ticker


def _figure():
    """Axes whose ticks need every kind of locator and formatter: log with minor labels, a scalar axis with an
    offset ('1e6' beside it), a log2 axis placed by set_log2_ticks, rotated and multi-line text."""
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(9, 3))
    a.plot([1e-3, 5e2], [3, 40])
    a.set_xscale("log")
    a.set_yscale("log")
    common.tidy_log_axis(a, "y")
    b.plot([1e6 + 1, 1e6 + 9], [0.1, 0.7])
    c.plot([256, 1024, 4096, 16384], [1, 2, 3, 4])
    common.set_log2_ticks(c, [256, 1024, 4096, 16384])
    c.set_xlabel("a label\non two lines")
    c.tick_params(axis="x", labelrotation=30)
    fig.suptitle("a title")
    return fig


def _pixels(fig, freeze: bool) -> np.ndarray:
    """The figure rendered as save() renders it: the layout solved, then (freeze) the ticks frozen, then drawn."""
    fig.set_layout_engine("constrained")
    fig.get_layout_engine().execute(fig)
    fig.set_layout_engine("none")
    if freeze:
        common._freeze_ticks(fig)
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba()).copy()


def test_frozen_ticks_draw_the_same_picture():
    plain, frozen_fig = _figure(), _figure()
    expected = _pixels(plain, freeze=False)
    got = _pixels(frozen_fig, freeze=True)
    assert got.shape == expected.shape
    assert np.array_equal(got, expected)
    axes = frozen_fig.axes
    assert isinstance(axes[0].yaxis.get_minor_locator(), ticker.FixedLocator)  # the log axis was frozen
    assert axes[1].xaxis.get_major_formatter().get_offset() == plain.axes[1].xaxis.get_major_formatter().get_offset()
    assert axes[1].xaxis.get_major_formatter().get_offset() != ""  # the offset case was really exercised
    plt.close(plain)
    plt.close(frozen_fig)


def test_frozen_ticks_are_the_ones_the_locators_gave():
    fig = _figure()
    fig.canvas.draw()
    before = [(list(axis.get_majorticklocs()), [t.get_text() for t in axis.get_majorticklabels()])
              for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)]
    common._freeze_ticks(fig)
    fig.canvas.draw()
    after = [(list(axis.get_majorticklocs()), [t.get_text() for t in axis.get_majorticklabels()])
             for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)]
    assert after == before
    plt.close(fig)


def test_remembered_layouts_draw_the_same_picture_and_lay_out_less(monkeypatch):
    calls = []
    original = layout_memo._ORIGINAL

    def counting(text, renderer):
        calls.append(text.get_text())
        return original(text, renderer)

    monkeypatch.setattr(layout_memo, "_ORIGINAL", counting)
    monkeypatch.setattr(layout_memo.mtext.Text, "_get_layout", counting)
    plain = _figure()
    expected = _pixels(plain, freeze=False)
    uncached = len(calls)
    calls.clear()
    with layout_memo.text_layouts():
        fig = _figure()
        got = _pixels(fig, freeze=False)
        assert layout_memo.mtext.Text._get_layout is not counting  # the memo is in place inside the block
    assert layout_memo.mtext.Text._get_layout is counting  # and gone after it
    assert np.array_equal(got, expected)
    assert len(calls) < uncached / 2, (len(calls), uncached)
    plt.close(plain)
    plt.close(fig)


def test_a_changed_property_is_laid_out_again():
    def extents(label):
        sizes = [label.get_window_extent().bounds[2:]]
        label.set_fontsize(20)
        sizes.append(label.get_window_extent().bounds[2:])
        label.set_rotation(90)
        sizes.append(label.get_window_extent().bounds[2:])
        label.set_text("n, two words")
        sizes.append(label.get_window_extent().bounds[2:])
        return sizes

    figures = [plt.subplots() for _ in range(2)]
    labels = [ax.set_xlabel("n") for _, ax in figures]
    for fig, _ in figures:
        fig.canvas.draw()
    expected = extents(labels[0])
    with layout_memo.text_layouts():
        got = extents(labels[1])
    assert got == expected
    assert len(set(expected)) == 4  # each change changed the extent
    for fig, _ in figures:
        plt.close(fig)


@pytest.mark.parametrize("wrap", [True, False])
def test_a_wrapped_text_is_never_remembered(wrap):
    fig, ax = plt.subplots()
    text = ax.text(0.1, 0.5, "a long text " * 6, wrap=wrap)
    fig.canvas.draw()
    with layout_memo.text_layouts():
        renderer = fig.canvas.get_renderer()
        assert (layout_memo._key(text, renderer) is None) == wrap
    plt.close(fig)


def test_tight_boxes_once_per_tight_layout_give_the_same_layout(monkeypatch):
    calls = []
    original = layout_memo._TIGHT_BOX

    def counting(obj, *args, **kwargs):
        calls.append(obj)
        return original(obj, *args, **kwargs)

    monkeypatch.setattr(layout_memo, "_TIGHT_BOX", counting)
    monkeypatch.setattr(layout_memo.martist, "_get_tightbbox_for_layout_only", counting)
    positions = []
    for remembered in (False, True):
        fig = _figure()
        calls.clear()
        with layout_memo.tight_boxes() if remembered else contextlib.nullcontext():
            fig.tight_layout(rect=(0, 0, 0.8, 1))  # within a rectangle: solved twice, as seaborn's grids ask
        positions.append(([ax.get_position().bounds for ax in fig.axes], len(calls)))
        plt.close(fig)
    (plain, plain_calls), (memo, memo_calls) = positions
    assert memo == plain
    assert memo_calls * 2 == plain_calls  # the second solve read the first's boxes
    assert layout_memo.martist._get_tightbbox_for_layout_only is counting  # restored after the block
