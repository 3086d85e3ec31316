"""Figure 22: what each attention variant adds over the plain call, per back end: time and memory ratios vs n."""

from __future__ import annotations

import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D

from analysis.cost import variant_order
from analysis.figures.common import Context, Made, Skipped, plt, save, set_log2_ticks, suptitle
from analysis.figures.style import VARIANT_MARKERS, variant_palette
from analysis.variants import EXPERIMENT, PLAIN, variant_ratios

METRICS = (("time_ratio", "time / plain call's"), ("memory_ratio", "memory peak / plain call's"))


def variant_costs(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig22_variants", "What each attention variant adds, per back end"
    ratios = variant_ratios(rows)
    if ratios.empty:
        return Skipped(name, title, "no rows with a window pair, soft-cap, ALiBi or sink", EXPERIMENT)
    # an ok row at an n without a plain call (the window claim's larger sizes) has nothing to be divided by
    ratios = ratios[(ratios["variant"] != PLAIN) & ((ratios["status"] != "ok") | ratios["time_ratio"].notna())]
    drawn = ratios[ratios["time_ratio"].notna()]
    if drawn.empty:
        return Skipped(name, title, "no variant measured beside a plain call at the same n", EXPERIMENT)
    backends = list(dict.fromkeys(ratios.sort_values("name", key=lambda s: s.map(variant_order))["backend_label"]))
    kinds = sorted(ratios["variant"].unique())
    palette = variant_palette(kinds)
    markers = {kind: VARIANT_MARKERS[i % len(VARIANT_MARKERS)] for i, kind in enumerate(kinds)}
    fig, axes = plt.subplots(len(METRICS), len(backends), figsize=(3.6 * len(backends) + 2.2, 6.4), squeeze=False)
    for j, backend in enumerate(backends):
        mine = ratios[ratios["backend_label"] == backend]
        for i, (metric, ylabel) in enumerate(METRICS):
            ax = axes[i][j]
            measured = mine[mine[metric].notna()]
            if not measured.empty:
                sns.lineplot(data=measured, x="seq_len", y=metric, hue="variant", palette=palette, style="variant",
                             markers=markers, dashes=False, estimator="median", errorbar=None, linewidth=1.5,
                             markersize=4.5, legend=False, ax=ax)
            ax.axhline(1.0, color="0.3", linestyle=":", linewidth=1.0)
            values = mine[metric].dropna()
            values = values[values > 0]
            if len(values) and values.max() / values.min() > 4:
                ax.set_yscale("log")
            set_log2_ticks(ax, mine["seq_len"].unique())
            sizes = mine["seq_len"].to_numpy(dtype=float)  # every n the back end was asked for, drawn or not
            ax.set_xlim(sizes.min() / 1.2, sizes.max() * 1.2)
            ax.set_xlabel("seq_len n")
            ax.set_ylabel(ylabel if j == 0 else "")
            if i == 0:
                ax.set_title(backend)
        for i, (metric, _) in enumerate(METRICS):
            if mine[metric].notna().any():
                continue
            ax = axes[i][j]  # nothing to draw: keep the plain call's ×1 readable
            ax.set_ylim(0.5, 2.0)
            ax.set_yscale("log")
            if i > 0:
                ax.text(0.5, 0.7, "not measured", transform=ax.transAxes, ha="center", va="center", color="0.35")
        missing = _not_measured(mine)
        if missing:  # unsupported (or failed) combinations: named, never drawn
            axes[0][j].text(0.03, 0.97, "\n".join(missing), transform=axes[0][j].transAxes, va="top", ha="left",
                            fontsize=6.5, color="0.35", bbox=dict(facecolor="white", edgecolor="none", alpha=0.8))
    handles = [Line2D([], [], color=palette[k], marker=markers[k], linewidth=1.5, label=k) for k in kinds]
    handles.append(Line2D([], [], color="0.3", linestyle=":", label="the plain call (×1)"))
    fig.legend(handles=handles, loc="outside right center")
    fig.set_layout_engine("constrained")
    device = rows["device_label"].mode().iloc[0] if "device_label" in rows and len(rows) else ""
    suptitle(fig, f"Each variant's time and memory over the plain call at the same n, per back end — {device}")
    return Made(name, title,
                "One column per back end: each variant's time (top) and memory peak (bottom) divided by the plain "
                "call's at the same n (dotted: ×1, nothing added). A window pair is a mask: a back end that skips "
                "the blocks it hides falls below 1 as n grows, one that masks every score stays near 1 or above. "
                "Soft-capping, ALiBi and the sink change the scores: a materializing back end pays a pass (and a "
                "tensor) per transform. Grey text in a panel names the variants that back end did not run "
                "(`unsupported`: it cannot express them; the row says why).",
                save(fig, ctx, name))


def _not_measured(mine: pd.DataFrame) -> list[str]:
    """'unsupported:', then '  softcap 50', '  ALiBi' (one a line): each status's variants with no ok row at any n."""
    failed = mine[mine["status"] != "ok"]
    ran = set(mine.loc[mine["status"] == "ok", "variant"])
    lines = []
    for status, part in failed.groupby("status"):
        kinds = [k for k in dict.fromkeys(part["variant"]) if k not in ran]
        if kinds:
            lines += [f"{status}:", *(f"  {k}" for k in kinds)]
    partial = sorted(set(failed["variant"]) & ran)
    if partial:
        lines += ["failed at some n:", *(f"  {k}" for k in partial)]
    return lines
