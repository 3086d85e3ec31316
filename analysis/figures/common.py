"""What every figure shares: the Agg back end, colours per back end, axis helpers, saving."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import matplotlib

matplotlib.use("Agg")  # files only, no display: works headless and in CI

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib import ticker  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

DPI = 130
# Fixed colours for the three back ends so every figure reads the same; others cycle after them.
_PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]
_KNOWN = {"naive": 0, "sdpa": 1, "chunked": 2}
_assigned: dict[str, str] = {}

plt.rcParams.update({
    "figure.dpi": DPI, "savefig.dpi": DPI, "font.size": 9, "axes.titlesize": 9.5,
    "axes.labelsize": 9, "legend.fontsize": 7.5, "legend.framealpha": 0.85,
    "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.6, "axes.spines.top": False,
    "axes.spines.right": False, "svg.fonttype": "none", "pdf.fonttype": 42,
})


@dataclass
class Context:
    out_dir: Path  # figures are written to out_dir / "<name>.<format>"
    formats: Sequence[str] = ("png", "pdf")
    baseline_device: str | None = None


@dataclass
class Made:
    name: str
    title: str
    how_to_read: str
    files: list[Path]
    notes: list[str] = field(default_factory=list)  # slices and caveats computed from the data


@dataclass
class Skipped:
    name: str
    title: str
    reason: str
    experiment: str  # the named experiment whose rows make this figure


def color_for(label: str) -> str:
    """The same colour for a back end in every figure (its options variants get their own)."""
    if label in _KNOWN:
        return _PALETTE[_KNOWN[label]]
    if label not in _assigned:
        _assigned[label] = _PALETTE[(3 + len(_assigned)) % len(_PALETTE)]
    return _assigned[label]


def precision_order(precision: str) -> int:
    """Widest to narrowest, so panels and legends read fp64, fp32, tf32, bf16, fp16."""
    order = ["fp64", "fp32", "tf32", "bf16", "fp16"]
    return order.index(precision) if precision in order else len(order)


def causal_style(causal: bool) -> dict:
    return {"linestyle": "--", "marker": "s"} if causal else {"linestyle": "-", "marker": "o"}


def subplots(nrows: int, ncols: int, width: float, height: float, **kw):
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False,
                             layout="constrained", **kw)
    return fig, axes


def suptitle(fig, text: str) -> None:
    """A figure title wrapped to the figure's width, so a one-panel figure never clips it."""
    width = max(40, int(fig.get_figwidth() * 12))
    fig.suptitle("\n".join(textwrap.fill(part, width) for part in text.split("\n")))


def facet_grid(count: int, width: float, height: float, max_cols: int = 2):
    """`count` panels wrapped into at most `max_cols` columns (README-friendly); unused cells hidden."""
    ncols = max(1, min(max_cols, count))
    nrows = math.ceil(count / ncols)
    fig, axes = subplots(nrows, ncols, width, height)
    flat = list(axes.flat)
    for ax in flat[count:]:
        ax.set_axis_off()
    return fig, flat[:count]


def save(fig, ctx: Context, name: str) -> list[Path]:
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, fmt in enumerate(ctx.formats):
        path = ctx.out_dir / f"{name}.{fmt}"
        fig.savefig(path, format=fmt)
        paths.append(path)
        if i == 0:  # the layout is solved once; redoing it per format doubles the drawing time
            fig.set_layout_engine("none")
    plt.close(fig)
    return paths


def size_text(n: float) -> str:
    """1024 -> '1K', 131072 -> '128K', 300 -> '300'."""
    n = int(round(n))
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}K"
    return str(n)


def set_log2_ticks(ax, values: Iterable[float], axis: str = "x", text=size_text) -> None:
    """A log2 axis labelled at the measured values (thinned when crowded)."""
    ticks = sorted({float(v) for v in values if np.isfinite(v) and v > 0})
    if not ticks:
        return
    while len(ticks) > 9:
        ticks = ticks[::2]
    set_scale = ax.set_xscale if axis == "x" else ax.set_yscale
    set_scale("log", base=2)
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(ticker.FixedLocator(ticks))
    target.set_major_formatter(ticker.FixedFormatter([text(t) for t in ticks]))
    target.set_minor_locator(ticker.NullLocator())


def bytes_formatter() -> ticker.FuncFormatter:
    def fmt(value, _pos):
        if value <= 0:
            return ""
        for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
            if value >= size:
                return f"{value / size:g} {unit}"
        return f"{value:g} B"
    return ticker.FuncFormatter(fmt)


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


def legend_right(ax, extra_handles: Sequence[Line2D] = ()) -> None:
    handles, labels = ax.get_legend_handles_labels()
    handles = list(handles) + list(extra_handles)
    labels = list(labels) + [h.get_label() for h in extra_handles]
    if handles:
        ax.legend(handles, labels, loc="center left", bbox_to_anchor=(1.02, 0.5), borderaxespad=0.0)
