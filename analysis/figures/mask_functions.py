"""Figure 23: time against mask density across the masks a sweep measured, mask functions included
(selfattn/mods/): one panel per n, one colour per back end, one marker per mask. A block-sparse back end's time
falls with the density (chunked skips the blocks a mask hides, flex its BlockMask's); a materializing one's
(naive, sdpa's boolean mask) does not."""

from __future__ import annotations

import pandas as pd
import seaborn as sns

from analysis.figures.common import Context, Made, Skipped, plt, save, suptitle
from analysis.mask_figures import mask_rows

EXPERIMENT = "a sweep over mask=... (docs/api.md, Mask and score functions)"


def time_vs_density(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig23_mask_functions", "Time against mask density, mask functions included"
    functions = rows["mask"].fillna("none").astype(str) if "mask" in rows else pd.Series(dtype=str)
    if not (~functions.isin(["none", ""])).any():
        return Skipped(name, title, "no rows with a mask function", EXPERIMENT)
    data = mask_rows(rows)
    data = data[data["mask_density"].notna()] if not data.empty else data
    if data.empty:
        return Skipped(name, title, "no ok rows of two masks or more with their density", EXPERIMENT)
    sizes = sorted(data["seq_len"].unique())
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.2 * len(sizes) + 2.4, 3.8), squeeze=False)
    for ax, n in zip(axes[0], sizes):
        sns.scatterplot(data=data[data["seq_len"] == n], x="mask_density", y="time_ms", hue="backend",
                        style="mask_label", s=45, ax=ax, legend=ax is axes[0][-1])
        ax.set_yscale("log")
        ax.set_xlim(0, 1.05)
        ax.set_xlabel("mask density (visible pairs / all pairs)")
        ax.set_ylabel("time, median (ms)")
        ax.set_title(f"n={n}")
    handles, labels = axes[0][-1].get_legend_handles_labels()
    if axes[0][-1].get_legend() is not None:
        axes[0][-1].get_legend().remove()
    fig.legend(handles, labels, loc="outside right upper", fontsize=7)
    suptitle(fig, "Time against the share of (query, key) pairs each mask leaves")
    return Made(name, title,
                "Each point is one back end on one mask at one n: its mask density (visible pairs, counted exactly from "
                "the mask, its function included) against its median time. Masks are named by their function and "
                "parameters or by today's axes; `python -m runners.mask_maps` draws each mask.",
                save(fig, ctx, name))
