"""What every figure shares: the Agg back end, the project's seaborn theme, grids of line panels, axis helpers,
saving.

Colours live in analysis.figures.style."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Callable, Iterable, Sequence

from analysis.figures.made import Context, Made, Skipped  # noqa: F401  (re-exported: every figure module reads them here)

import matplotlib
import matplotlib.image

matplotlib.use("Agg")  # files only, no display: works headless and in CI

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib import ticker  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

DPI = 130
# zlib's level for the PNGs: the same pixels at any level; 3 deflates the report's figures to the size the
# default 6 does (within 1%) in two thirds of its time.
PNG_COMPRESS_LEVEL = 3
# The project's one theme: seaborn's "ticks" style in its "notebook" context, with smaller text (the panels are
# small and many) and a light grid. A user restyles every figure by calling sns.set_theme after importing this.
RC = {
    "figure.dpi": DPI, "savefig.dpi": DPI, "font.size": 9, "axes.titlesize": 9.5,
    "axes.labelsize": 9, "legend.fontsize": 7.5, "legend.title_fontsize": 8, "legend.framealpha": 0.85,
    "xtick.labelsize": 8.5, "ytick.labelsize": 8.5, "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.6,
    "axes.spines.top": False, "axes.spines.right": False, "svg.fonttype": "none", "pdf.fonttype": 42,
}
sns.set_theme(context="notebook", style="ticks", palette="deep", rc=RC)

# The mask is a line's style in every figure: solid circles without, dashed squares with a causal mask.
MASKS = ("no mask", "causal")
MASK_MARKERS = {"no mask": "o", "causal": "s"}
MASK_DASHES = {"no mask": "", "causal": (4, 2)}
# Each line is the median over seeds at each x; the shaded interval is their p20-p80 where seeds differ.
ESTIMATOR = "median"
SEED_INTERVAL = ("pi", 60)
Estimator = str | Callable[[pd.Series], float]


def suptitle(fig, text: str) -> None:
    """A figure title wrapped to the figure's width, so a one-panel figure never clips it."""
    width = max(40, int(fig.get_figwidth() * 12))
    fig.suptitle("\n".join(textwrap.fill(part, width) for part in text.split("\n")))


def line_grid(data: pd.DataFrame, *, x: str, y: str, panel_width: float, panel_height: float,
              hue: str | None = None, palette: dict[str, str] | None = None, style: str | None = None,
              row: str | None = None, col: str | None = None, col_wrap: int | None = None,
              errorbar=SEED_INTERVAL, share_y: bool = False, row_order: Sequence | None = None,
              col_order: Sequence | None = None, hue_order: Sequence | None = None,
              style_order: Sequence | None = None, estimator: Estimator = ESTIMATOR, **kw) -> sns.FacetGrid:
    """seaborn's `relplot(kind="line")`: per panel, the median over seeds at each x with its interval, one line per
    hue x style level; returns its FacetGrid (`axes_dict` keyed by the column's level, the row's, or both).

    Panels keep their own x axes (sizes, ranges and slices differ between them; `share_y` shares y), titles and
    legends are left to the figure, and an empty row x col cell is hidden. `style="mask"` draws the mask the same
    way in every figure; any other `style` gets seaborn's default markers and dashes unless given. `kw` goes to
    each line (matplotlib's Line2D properties).
    """
    markers, dashes = kw.pop("markers", None), kw.pop("dashes", None)
    if style == "mask":
        style_order = [m for m in MASKS if m in set(data["mask"])]
        markers, dashes = MASK_MARKERS, MASK_DASHES
    elif style is not None:
        markers = True if markers is None else markers
        dashes = True if dashes is None else dashes
    else:
        kw.setdefault("marker", "o")
    if col_wrap and col and len(col_order if col_order is not None else data[col].unique()) <= col_wrap:
        col_wrap = None  # one row: wrapping would only add empty cells to the right
    kw.setdefault("linewidth", 1.6)
    kw.setdefault("markersize", 4.5)
    style_kw = dict(style=style, style_order=style_order, markers=markers, dashes=dashes) if style else {}
    hue_kw = dict(hue=hue, hue_order=hue_order, palette=palette) if hue else {}
    g = sns.relplot(data=data, kind="line", x=x, y=y, **hue_kw, **style_kw, row=row, col=col, col_wrap=col_wrap,
                    row_order=row_order, col_order=col_order, estimator=estimator, errorbar=errorbar,
                    height=panel_height, aspect=panel_width / panel_height, legend=False,
                    facet_kws=dict(sharex=False, sharey=share_y), **kw)
    for ax in g.axes.flat:
        if not ax.lines:
            ax.set_axis_off()
    return g


def linestyle_of(dashes) -> str | tuple:
    """A line's dashes ('' solid, or an on/off tuple) as a matplotlib linestyle, for legend entries."""
    return (0, dashes) if dashes else "-"


def mask_handle(color: str, mask: str, label: str) -> Line2D:
    """A legend entry drawn like `line_grid` draws a line of this colour and mask."""
    return Line2D([], [], color=color, marker=MASK_MARKERS.get(mask, "o"), markersize=4.5, linewidth=1.6,
                  linestyle=linestyle_of(MASK_DASHES.get(mask, "")), label=label)


def save(fig, ctx: Context, name: str) -> list[Path]:
    """Write `fig` in each of ctx.formats from one rendering: the layout is solved first (twice when tick labels
    had to be dropped), then rendered once, and the PNG is that rendering's pixels, written as savefig writes them. savefig would solve the layout twice more and render
    again, which took half of a small report's time; the pictures differ from those by a pixel at most (a
    constrained layout solved again starts from the last one's positions)."""
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    # Per-panel legends sit outside their axes: constrained layout makes room for them, which
    # a tight layout does not.
    fig.set_layout_engine("constrained")
    placed = [axis for ax in fig.axes for axis in (ax.xaxis, ax.yaxis) if _has_fixed_ticks(axis)]
    if fig.axes:  # as a draw would first (a figure without axes has no layout to solve)
        fig.get_layout_engine().execute(fig)  # solves the layout: the tick labels' places are known
    if not _drop_touching_tick_labels(fig, placed):
        fig.set_layout_engine("none")  # solved: the render below keeps these positions
        _freeze_ticks(fig)  # the axes have their final sizes, so these are the ticks the render would compute
    fig.canvas.draw()  # renders (after solving the layout again without the labels left out, where some were)
    fig.set_layout_engine("none")  # solved: other formats draw with the same positions
    paths = []
    for fmt in ctx.formats:
        path = ctx.out_dir / f"{name}.{fmt}"
        if fmt == "png":
            # FigureCanvasAgg.print_png's own call, on the rendering just made (savefig.dpi is the figure's).
            matplotlib.image.imsave(path, fig.canvas.buffer_rgba(), format="png", origin="upper", dpi=fig.dpi,
                                    pil_kwargs={"compress_level": PNG_COMPRESS_LEVEL})
        else:
            fig.savefig(path, format=fmt)
        paths.append(path)
    plt.close(fig)
    return paths


def _has_fixed_ticks(axis) -> bool:
    """Whether the figure's own code placed this axis's major ticks (set_log2_ticks does)."""
    return (isinstance(axis.get_major_locator(), ticker.FixedLocator)
            and isinstance(axis.get_major_formatter(), ticker.FixedFormatter))


# The label matplotlib gives the axes a figure's colorbar() makes (and attention_maps draws colorbars only so).
COLORBAR_LABEL = "<colorbar>"


def _freeze_ticks(fig) -> None:
    """Replace each axis's locators and formatters by the ticks and labels they give now, once the figure's
    layout is solved and its limits are final (the ticks depend on both: an automatic locator picks as many as
    the axis's length in pixels has room for). The render asks every axis for its ticks several times (its
    own, then its label's place asks its siblings again, then the title's place): with the answers fixed they
    are not computed anew each time. The ticks are the same values with the same labels and offset text, so
    the picture is the same. Axes whose limits a draw may still move (an aspect kept by changing the limits)
    keep their locators, as do colorbars, which set their own."""
    for ax in fig.axes:
        if ax.name != "rectilinear" or ax.get_label() == COLORBAR_LABEL or (
                ax.get_aspect() != "auto" and ax.get_adjustable() == "datalim"):
            continue
        for axis in (ax.xaxis, ax.yaxis):
            for get_locator, get_formatter, get_locs, set_locator, set_formatter in (
                    (axis.get_major_locator, axis.get_major_formatter, axis.get_majorticklocs,
                     axis.set_major_locator, axis.set_major_formatter),
                    (axis.get_minor_locator, axis.get_minor_formatter, axis.get_minorticklocs,
                     axis.set_minor_locator, axis.set_minor_formatter)):
                formatter = get_formatter()
                if isinstance(get_locator(), (ticker.NullLocator, ticker.FixedLocator)) and isinstance(
                        formatter, (ticker.NullFormatter, ticker.FixedFormatter)):
                    continue  # nothing left to compute
                locs = get_locs()  # the locator's values, as a draw asks for them (minor: less the major)
                labels = formatter.format_ticks(locs)
                offset = formatter.get_offset()
                fixed = ticker.FixedFormatter(labels)
                fixed.set_offset_string(offset)
                set_locator(ticker.FixedLocator(locs))
                set_formatter(fixed)


def _drop_touching_tick_labels(fig, placed, pad_px: float = 3.0) -> bool:
    """Once the figure is drawn: drop x tick labels that still touch a neighbour (set_log2_ticks spaces them
    for an estimated axis width; a wide legend beside the panel can leave less), on the axes in `placed`, whose
    ticks the figure's code chose. The smallest and largest stay, then the shortest labels. Returns whether any
    was dropped."""
    dropped = False
    for ax in fig.axes:
        if ax.xaxis not in placed:
            continue
        locator, formatter = ax.xaxis.get_major_locator(), ax.xaxis.get_major_formatter()
        ticks, texts = list(locator.locs), list(formatter.seq)
        labels = [t for t in ax.xaxis.get_ticklabels() if t.get_visible() and t.get_text()]
        if len(labels) != len(ticks) or len(ticks) <= 2:
            continue
        boxes = [label.get_window_extent() for label in labels]
        order = [0, len(ticks) - 1] + sorted(range(1, len(ticks) - 1), key=lambda i: (len(texts[i]), ticks[i]))
        kept: list[int] = []
        for i in order:
            if all(boxes[i].x1 + pad_px < boxes[k].x0 or boxes[k].x1 + pad_px < boxes[i].x0 for k in kept):
                kept.append(i)
        if len(kept) < len(ticks):
            kept.sort()
            ax.xaxis.set_major_locator(ticker.FixedLocator([ticks[i] for i in kept]))
            ax.xaxis.set_major_formatter(ticker.FixedFormatter([texts[i] for i in kept]))
            dropped = True
    return dropped


def size_text(n: float) -> str:
    """One style for every size: 300 -> '300', 1024 -> '1K', 1536 -> '1.5K', 131072 -> '128K'."""
    n = int(round(n))
    if n >= 1024:
        return f"{n / 1024:.3g}K"
    return str(n)


def set_log2_ticks(ax, values: Iterable[float], axis: str = "x", text=size_text) -> None:
    """A log2 axis labelled at the measured values, as many as fit without two labels touching.

    Short labels first ("2K" before "2560"), the smallest and largest always: a label is kept only
    when its distance to every kept neighbour, on the axis as drawn, is wider than half of each
    label plus a gap (the width is read from the axes' size, with room for the legend that the
    layout later puts beside it)."""
    ticks = sorted({float(v) for v in values if np.isfinite(v) and v > 0})
    if not ticks:
        return
    set_scale = ax.set_xscale if axis == "x" else ax.set_yscale
    set_scale("log", base=2)
    target = ax.xaxis if axis == "x" else ax.yaxis
    kept = _spaced_ticks(ax, ticks, axis, text)
    target.set_major_locator(ticker.FixedLocator(kept))
    target.set_major_formatter(ticker.FixedFormatter([text(t) for t in kept]))
    target.set_minor_locator(ticker.NullLocator())


TICK_CHAR_IN = 0.075  # width of one tick-label character at xtick.labelsize 8.5 pt, in inches
TICK_GAP_IN = 0.12  # blank space between two labels
AXIS_ROOM = 0.7  # share of the axes' current width left after the layout places legends beside it


def _spaced_ticks(ax, ticks: list[float], axis: str, text) -> list[float]:
    if len(ticks) <= 2:
        return ticks
    box = ax.get_position()
    fig_w, fig_h = ax.figure.get_size_inches()
    length_in = (box.width * fig_w if axis == "x" else box.height * fig_h) * AXIS_ROOM
    span = math.log2(ticks[-1] / ticks[0])
    chars = (lambda t: len(text(t))) if axis == "x" else (lambda t: 1.2)  # y labels stack: one line high

    def clear(a: float, b: float) -> bool:
        gap_in = abs(math.log2(b / a)) / span * length_in
        return gap_in >= (chars(a) + chars(b)) / 2 * TICK_CHAR_IN + TICK_GAP_IN

    kept = [ticks[0], ticks[-1]]
    for tick in sorted(ticks[1:-1], key=lambda t: (len(text(t)), t)):
        if all(clear(tick, k) for k in kept):
            kept.append(tick)
    return sorted(kept)


def bytes_text(value: float) -> str:
    """Bytes in binary units, as every figure and table gives them: 1536 -> '1.5 KiB', 2**30 -> '1 GiB'."""
    if not value > 0:
        return ""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.3g} B"


def bytes_formatter() -> ticker.FuncFormatter:
    return ticker.FuncFormatter(lambda value, _pos: bytes_text(value))


def bytes_axis(ax, axis: str = "y") -> None:
    """A byte axis in binary units: on a log scale its ticks at powers of 4 (1 KiB, 4 KiB, 16 KiB, ...), so no
    label reads '1.05 MiB'; the minor ticks unlabelled."""
    target = ax.yaxis if axis == "y" else ax.xaxis
    if (ax.get_yscale() if axis == "y" else ax.get_xscale()) == "log":
        target.set_major_locator(ticker.LogLocator(base=4, numticks=8))
        target.set_minor_locator(ticker.NullLocator())
    target.set_major_formatter(bytes_formatter())


UNSURE_LABEL = "hollow: noisy, or timed on fewer threads"


def hollow_points(ax, points: pd.DataFrame, x: str, y: str, color_of, marker_of) -> list[Line2D]:
    """Each row of `points` (the unsure ones: analysis.noise.unsure_mask) as a hollow marker over its line, and
    the legend entry that says what hollow means (none when there is no such row)."""
    shown = points[np.isfinite(points[y]) & (points[y] > 0)] if len(points) else points
    for _, row in shown.iterrows():
        ax.plot(row[x], row[y], marker=marker_of(row), markersize=6, markerfacecolor="white",
                markeredgecolor=color_of(row), markeredgewidth=1.3, linestyle="none", zorder=4)
    if shown.empty:
        return []
    return [Line2D([], [], marker="o", markersize=6, markerfacecolor="white", markeredgecolor="0.3",
                   markeredgewidth=1.3, linestyle="none", label=UNSURE_LABEL)]


def log_if_spans(ax, values: Iterable[float], axis: str = "y", decades: float = 1.3) -> bool:
    """Log scale when the positive values span more than `decades` decades."""
    vals = np.asarray([v for v in values if np.isfinite(v) and v > 0], dtype=float)
    if len(vals) >= 2 and math.log10(vals.max() / vals.min()) > decades:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
        return True
    return False


def tidy_log_axis(ax, axis: str = "y") -> None:
    """Plain numbers ('2', '0.05') instead of 2x10^0 on a log axis; minor labels only when under a decade."""
    target = ax.yaxis if axis == "y" else ax.xaxis
    if (ax.get_yscale() if axis == "y" else ax.get_xscale()) != "log":
        return
    low, high = ax.get_ylim() if axis == "y" else ax.get_xlim()
    plain = ticker.FuncFormatter(lambda v, _pos: f"{v:g}")
    target.set_major_formatter(plain)
    # Under two decades a log axis shows at most two labelled powers of ten, too few to read a
    # value: label some minor ticks too (2, 3, 5 under a decade; 2, 5 under two; all would crowd).
    labelled = (2, 3, 5) if low > 0 and high / low < 10 else (2, 5) if low > 0 and high / low < 100 else ()
    if labelled:
        target.set_minor_formatter(ticker.FuncFormatter(
            lambda v, _pos: f"{v:g}" if v > 0 and round(v / 10 ** math.floor(math.log10(v)), 6) in labelled else ""))
    else:
        target.set_minor_formatter(ticker.NullFormatter())


def guide_lines(ax, n_min: float, n_max: float, y_at_min: float, slopes=(1, 2)) -> None:
    """Grey lines of slope 1 and 2 on log-log axes from (n_min, y_at_min), below the data, for reading slopes."""
    xs = np.array([n_min, n_max], dtype=float)
    styles = {1: (0, (6, 3)), 2: "-."}  # not dotted: dotted lines are the analytic predictions
    for slope in slopes:
        ax.plot(xs, y_at_min * (xs / n_min) ** slope, color="0.45", linestyle=styles.get(slope, ":"),
                linewidth=1.0, label=f"guide ∝ n{'²' if slope == 2 else ''}", zorder=1)


def mark_failed(ax, failed, y_column: str | None, color_of, top_fraction: float = 0.96) -> list[Line2D]:
    """oom (X) and skipped_budget (v) markers: at `y_column` (e.g. predicted bytes) or the top edge."""
    handles = []
    if failed is None or len(failed) == 0:
        return handles
    top = blended_transform_factory(ax.transData, ax.transAxes)
    for status, marker, text in (("oom", "X", "oom"), ("skipped_budget", "v", "skipped (over budget)")):
        part = failed[failed["status"] == status]
        if part.empty:
            continue
        for _, row in part.iterrows():
            y = row.get(y_column) if y_column else None
            color = color_of(row)
            if y is not None and np.isfinite(y) and y > 0:
                ax.plot(row["seq_len"], y, marker=marker, color=color, markersize=8, linestyle="none",
                        markeredgecolor="black", markeredgewidth=0.6, zorder=5)
            else:
                ax.plot(row["seq_len"], top_fraction, marker=marker, color=color, markersize=8,
                        linestyle="none", transform=top, clip_on=False, markeredgecolor="black",
                        markeredgewidth=0.6, zorder=5)
        where = "at predicted memory" if y_column else "no time measured"
        handles.append(Line2D([], [], marker=marker, color="0.5", markeredgecolor="black", linestyle="none",
                              markersize=7, label=f"{text} ({where})"))
    return handles


def legend_right(ax, extra_handles: Sequence[Line2D] = (), lead_handles: Sequence[Line2D] = (),
                 loc: str = "right") -> None:
    """The axis's legend: `lead_handles` (the data lines), its own labelled artists, then extras; outside the
    data, to the right of the axis (a figure whose legends are wide gives its panels the room: `panel_width`
    counts it), or inside it at `loc` when that is not "right"."""
    handles, _ = ax.get_legend_handles_labels()
    handles = list(lead_handles) + list(handles) + list(extra_handles)
    if not handles:
        return
    if loc == "right":
        ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.02, 0.5), borderaxespad=0.0)
    else:
        ax.legend(handles=handles, loc=loc)
