"""Figure 18: path length measured: the last position's sensitivity to a token against its distance, per scope."""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.ticker import FuncFormatter

from analysis.figures.common import Context, Made, Skipped, plt, save, suptitle
from analysis.figures.style import scope_palette
from analysis.recurrence import PATH_SCOPES, sensitivity_by_distance
from analysis.slices import number_text

MAX_PANELS = 4  # the largest n measured, one panel each


def _scope_label(scope: str) -> str:
    return "attention layer" if scope == "layer" else scope.upper()


def sensitivity_vs_distance(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig18_path_length", "Path length: sensitivity of the last output to a token vs its distance"
    tidy = sensitivity_by_distance(rows)
    if tidy.empty or tidy["scope"].nunique() < 1:
        return Skipped(name, title, "no scope=layer, lstm or gru row with grad_by_distance",
                       "rnn_vs_attention (or quick's recurrence grids)")
    for axis in ("device_label", "d_model"):  # one device and width: the most common
        tidy = tidy[tidy[axis] == tidy[axis].mode().iloc[0]]
    ns = sorted(tidy["seq_len"].unique())[-MAX_PANELS:]
    tidy = tidy[tidy["seq_len"].isin(ns)]
    fig, axes = plt.subplots(1, len(ns), figsize=(3.6 * len(ns) + 1.2, 3.6), squeeze=False)
    palette = scope_palette(tidy["scope"])
    notes = []
    for ax, n in zip(axes[0], ns):
        part = tidy[tidy["seq_len"] == n]
        line = part.groupby(["scope", "distance"])["sensitivity"].median().reset_index()
        shown = line[line["sensitivity"] > 0]  # a 0 is float64's underflow: no point on a log axis
        for scope, count in (line["sensitivity"] <= 0).groupby(line["scope"]).sum().items():
            if count:
                notes.append(f"n={number_text(n)} {scope}: {count} distance(s) underflowed to 0 in float64 (not drawn)")
        sns.lineplot(data=shown.assign(series=shown["scope"].map(_scope_label)), x="distance", y="sensitivity",
                     hue="series", hue_order=[_scope_label(s) for s in PATH_SCOPES if s in set(shown["scope"])],
                     palette={_scope_label(s): c for s, c in palette.items()}, marker="o", markersize=3.5,
                     estimator=None, ax=ax, legend="auto" if ax is axes[0][-1] else False)
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_yscale("log")
        ax.set_xlim(left=-0.2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel("distance k to the last token (0 = itself)")
        ax.set_title(f"n = {number_text(n)}")
        ax.axvline(1, color="0.7", linewidth=0.8, linestyle=":")
    for ax in axes[0]:
        ax.set_ylabel("gradient norm of the last output\nw.r.t. the token k back (float64, init)"
                      if ax is axes[0][0] else "")
    if axes[0][-1].get_legend() is not None:
        sns.move_legend(axes[0][-1], "upper left", bbox_to_anchor=(1.02, 1.0), title=None)  # beside the lines
    where = f"d_model = {number_text(tidy['d_model'].iloc[0])} · {tidy['device_label'].iloc[0]}"
    suptitle(fig, f"How strongly the last output depends on a token k positions back — {where}")
    ratios = (tidy.pivot_table(index=["scope", "seq_len"], columns="distance", values="sensitivity")
              if not tidy.empty else None)
    if ratios is not None:
        for (scope, n), row in ratios.iterrows():
            far, near = row.get(int(n) - 1, np.nan), row.get(1, np.nan)
            if np.isfinite(far) and np.isfinite(near) and near > 0:
                notes.append(f"{scope} n={number_text(n)}: far/near {far / near:.2g}")
    return Made(name, title,
                "Each line is the norm of the gradient of the last position's output (in a random direction) with "
                "respect to the input token k positions before it, averaged over seeded draws, at initialisation and "
                "in float64. A recurrence reaches a token through k steps, each shrinking the gradient: its line falls "
                "by orders of magnitude. Attention reaches every token in one step: its line is flat after k = 0 "
                "(the token itself also enters through its own query, so it sits higher for another reason).",
                save(fig, ctx, name), notes)
