"""The shortcut that makes a figure cheaper to render keeps its picture: ticks frozen once the layout is solved
(analysis.figures.common._freeze_ticks), through matplotlib's public locators and formatters."""

import numpy as np

from analysis.figures import common
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
