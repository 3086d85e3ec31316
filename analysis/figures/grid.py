"""Panels of lines and of points over tidy rows, in plain matplotlib: what the figures drew with seaborn's relplot
and catplot, without seaborn.

seaborn's figure-level API lays each grid out twice on the way (once empty, once drawn) and its import pulls in
scipy.stats; the report lays every figure out once more when it saves it (common.save). Keeping its speed meant
patching seaborn's classes and hiding scipy from it, both private and version-bound, so the few things the figures
use are written here against matplotlib's public API: one axes per facet (`Grid`), per panel one line per hue x
style level, the median (or another estimator) over the seeds at each x, and the p20-p80 band of those seeds
(`lines`); one marker per category with its range (`points`). The drawing follows seaborn 0.13's: the same default
markers and dashes, a white edge on markers, a band of the line's colour at alpha 0.2, x and y labels named after
the columns on the outer panels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

# seaborn's defaults for `markers=True` and `dashes=True` (its unique_markers and unique_dashes, first entries)
DEFAULT_MARKERS = ("o", "X", (4, 0, 45), "P", (4, 0, 0), (4, 1, 0), "^", (4, 1, 45), "v")
DEFAULT_DASHES = ("", (4, 1.5), (1, 1), (3, 1.25, 1.5, 1.25), (5, 1, 1, 1))
BAND_ALPHA = 0.2

Estimator = str | Callable[[pd.Series], float]
ErrorBar = tuple[str, float] | None  # ("pi", width): the percentile interval of that width around the median


def levels(values: pd.Series, order: Sequence | None = None) -> list:
    """A column's levels in `order`, else sorted when numeric and in order of appearance otherwise (as seaborn)."""
    if order is not None:
        return list(order)
    found = pd.Series(values).dropna().unique()
    return sorted(found) if pd.api.types.is_numeric_dtype(pd.Series(values).dropna()) else list(found)


@dataclass
class Grid:
    """A figure of panels: `axes` (rows x cols, or one dimension when wrapped) and `axes_dict` keyed like
    seaborn's FacetGrid: by the column's level, the row's level, or (row, column) when there are both."""
    figure: Figure
    axes: np.ndarray
    axes_dict: dict[Hashable, Axes]
    outer: dict[int, tuple[bool, bool]]  # id(axes) -> (in the bottom row, in the left column)
    panels: list[tuple[Axes, pd.DataFrame]]  # each panel's axes with its rows

    def set(self, **kwargs: Any) -> "Grid":
        """ax.set(**kwargs) on every panel."""
        for ax in self.axes.flat:
            ax.set(**kwargs)
        return self


def facets(data: pd.DataFrame, *, panel_width: float, panel_height: float, row: str | None = None,
           col: str | None = None, row_order: Sequence | None = None, col_order: Sequence | None = None,
           col_wrap: int | None = None, share_x: bool = False, share_y: bool = False
           ) -> Grid:
    """The grid of panels for `data` split by `row` and `col`."""
    rows = levels(data[row], row_order) if row else [None]
    cols = levels(data[col], col_order) if col else [None]
    if col_wrap and row:
        raise ValueError("col_wrap: only with col and without row")
    n_rows, n_cols = (math.ceil(len(cols) / col_wrap), min(col_wrap, len(cols))) if col_wrap else (len(rows), len(cols))
    fig = plt.figure(figsize=(n_cols * panel_width, n_rows * panel_height))
    if col_wrap:
        first: Axes | None = None
        flat = []
        for i in range(len(cols)):
            ax = fig.add_subplot(n_rows, n_cols, i + 1, sharex=first if share_x else None,
                                 sharey=first if share_y else None)
            first = first or ax
            flat.append(ax)
        axes = np.array(flat, dtype=object)
        keyed = list(zip(((None, c) for c in cols), flat))
        bottom = {id(ax) for i, ax in enumerate(flat) if i + n_cols >= len(cols)}
        left = {id(ax) for i, ax in enumerate(flat) if i % n_cols == 0}
    else:
        axes = fig.subplots(n_rows, n_cols, sharex=share_x, sharey=share_y, squeeze=False)
        keyed = [((r, c), axes[i, j]) for i, r in enumerate(rows) for j, c in enumerate(cols)]
        bottom = {id(ax) for ax in axes[-1, :]}
        left = {id(ax) for ax in axes[:, 0]}
    if share_y:  # the inner panels' y tick labels say nothing the left ones do not
        for ax in axes.flat:
            if id(ax) not in left:
                ax.tick_params(axis="y", labelleft=False)
    axes_dict: dict[Hashable, Axes] = {}
    panels = []
    for (r, c), ax in keyed:
        part = data
        if row:
            part = part[part[row] == r]
        if col:
            part = part[part[col] == c]
        axes_dict[(r, c) if row and col else r if row else c] = ax
        panels.append((ax, part))
    outer = {id(ax): (id(ax) in bottom, id(ax) in left) for ax in axes.flat}
    return Grid(fig, axes, axes_dict, outer, panels)


def _style_values(given: Any, names: list, defaults: Sequence) -> dict:
    if isinstance(given, Mapping):
        return {name: given[name] for name in names}
    if given is True:
        return {name: defaults[i % len(defaults)] for i, name in enumerate(names)}
    return {}


def aggregate(part: pd.DataFrame, x: str, y: str, estimator: Estimator, errorbar: ErrorBar) -> pd.DataFrame:
    """One row per x, sorted: the estimate of y and, at each x with several values when an error bar is asked
    for, their percentile interval (`low`, `high`; NaN elsewhere, as seaborn leaves it)."""
    part = part[[x, y]].dropna().sort_values([x, y])
    if estimator is None or part.empty or part[x].value_counts().max() <= 1:  # nothing to aggregate
        return part.rename(columns={y: "estimate"}).assign(low=np.nan, high=np.nan)
    grouped = part.groupby(x, sort=True)[y]
    out = grouped.agg(estimator).rename("estimate").to_frame()
    if errorbar is not None:
        method, width = errorbar
        if method != "pi":
            raise ValueError(f"errorbar: only ('pi', width) is drawn here, not {errorbar!r}")
        several = grouped.count() > 1  # one value has no interval: the band is left open there, not drawn to it
        out["low"] = grouped.agg(lambda v: np.nanpercentile(v, 50 - width / 2)).where(several)
        out["high"] = grouped.agg(lambda v: np.nanpercentile(v, 50 + width / 2)).where(several)
    else:
        out["low"] = out["high"] = np.nan
    return out.reset_index()


def lines(ax: Axes, data: pd.DataFrame, *, x: str, y: str, hue: str | None = None, hue_order: Sequence | None = None,
          palette: Mapping | None = None, style: str | None = None, style_order: Sequence | None = None,
          markers: Any = None, dashes: Any = None, estimator: Estimator = "median", errorbar: ErrorBar = ("pi", 60),
          **line_kws: Any) -> None:
    """One line per hue x style level of `data` on `ax`: `estimator` of y at each x, with its band (seaborn's
    lineplot, kind="line", err_style="band")."""
    line_kws.setdefault("markeredgewidth", 0.75)
    line_kws.setdefault("markeredgecolor", "w")
    hues = levels(data[hue], hue_order) if hue else [None]
    styles = levels(data[style], style_order) if style else [None]
    marker_of = _style_values(markers, styles, DEFAULT_MARKERS) if style else {}
    dashes_of = _style_values(dashes, styles, DEFAULT_DASHES) if style else {}
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, hue_level in enumerate(hues):
        for style_level in styles:
            part = data
            if hue:
                part = part[part[hue] == hue_level]
            if style:
                part = part[part[style] == style_level]
            if part.empty:
                continue
            points = aggregate(part, x, y, estimator, errorbar)
            if points.empty:
                continue
            color = palette[hue_level] if palette is not None and hue else cycle[i % len(cycle)]
            (line,) = ax.plot(points[x], points["estimate"], color=color, **line_kws)
            if style_level in dashes_of:
                line.set_dashes(dashes_of[style_level])
            if style_level in marker_of:
                line.set_marker(marker_of[style_level])
            if errorbar is not None and points["low"].notna().any():
                ax.fill_between(points[x], points["low"], points["high"], color=color, alpha=BAND_ALPHA)


def label_outer(grid: Grid, x: str, y: str) -> None:
    """The columns' names as axis labels on the bottom row and the left column, blank elsewhere (as relplot)."""
    for ax in grid.axes.flat:
        bottom, left = grid.outer[id(ax)]
        ax.set_xlabel(x if bottom else "")
        ax.set_ylabel(y if left else "")


def points(ax: Axes, data: pd.DataFrame, *, x: str, order: Sequence, y: str, hue: str, hue_order: Sequence,
           palette: Mapping, estimator: Estimator = "median", dodge: float = 0.0) -> None:
    """Per hue level, the `estimator` of y at each category of x, joined by a line, with a bar over the range
    of its values (seaborn's pointplot with errorbar=("pi", 100)); hue levels set `dodge` apart."""
    offsets = np.linspace(-dodge / 2, dodge / 2, len(hue_order)) if dodge and len(hue_order) > 1 else \
        np.zeros(len(hue_order))
    position = {category: i for i, category in enumerate(order)}
    for offset, level in zip(offsets, hue_order):
        part = data[(data[hue] == level) & data[x].isin(position)].dropna(subset=[y])
        if part.empty:
            continue
        stats = part.groupby(x)[y].agg([estimator, "min", "max"])
        stats.columns = ["estimate", "low", "high"]
        stats = stats.loc[[c for c in order if c in stats.index]]
        at = np.array([position[c] for c in stats.index], dtype=float) + offset
        color, width = palette[level], plt.rcParams["lines.linewidth"] * 1.8  # seaborn's pointplot sizes
        ax.vlines(at, stats["low"], stats["high"], color=color, linewidth=width)
        ax.plot(at, stats["estimate"], color=color, marker="o", linewidth=width, markeredgewidth=width * 0.75,
                markersize=width * np.sqrt(2 * np.pi))
    ax.set_xticks(range(len(order)), [str(c) for c in order])
    ax.xaxis.grid(False)  # a category axis: no grid between categories
    ax.set_xlim(-0.5, len(order) - 0.5)
