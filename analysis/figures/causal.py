"""Figure 4: what a causal mask saves, time(no mask) / time(causal), against the ideal n²/(n(n+1)/2)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.cost import causal_ratios, cost_facets, ideal_causal_ratio
from analysis.figures.common import (
    Context, Made, Skipped, color_for, facet_grid, legend_right, precision_order, save, set_log2_ticks, suptitle,
)


def causal_saving(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig4_causal_saving", "Causal-mask saving"
    panels = [(f, causal_ratios(f)) for f in cost_facets(rows, "time_ms")]
    panels = [(f, r) for f, r in panels if not r.empty]
    if not panels:
        return Skipped(name, title, "no back end was timed both with and without a causal mask at the same seq_len",
                       "causal_mask (or the default sweep)")
    panels.sort(key=lambda p: (p[0].device_label, precision_order(p[0].precision)))
    fig, axes = facet_grid(len(panels), 6.6, 3.6)
    for ax, (facet, ratios) in zip(axes, panels):
        for label, group in ratios.groupby("label", sort=True):
            ax.plot(group["seq_len"], group["ratio"], marker="o", color=color_for(label), linewidth=1.6,
                    markersize=4.5, label=f"{label}: ×{group['ratio'].iloc[-1]:.2f} at n={int(group['seq_len'].iloc[-1])}")
        n = np.geomspace(ratios["seq_len"].min(), ratios["seq_len"].max(), 50)
        ax.plot(n, ideal_causal_ratio(n), color="black", linestyle="--", linewidth=1.1,
                label="ideal n² / (n(n+1)/2) ≈ 2")
        ax.axhline(1.0, color="0.45", linestyle=":", linewidth=1.0, label="no saving (1)")
        set_log2_ticks(ax, ratios["seq_len"])
        ax.set_ylim(0, max(2.3, float(ratios["ratio"].max()) * 1.1))
        ax.set_xlabel("sequence length n (tokens)")
        ax.set_ylabel("time without mask / time with mask (×)")
        ax.set_title(f"{facet.title}\n{facet.slice_text}")
        legend_right(ax)
    suptitle(fig, "Speed-up from a causal mask (time without / time with); skipping the masked half "
                 "of the scores would give 2")
    return Made(name, title,
                "Each line is a back end's median time without a mask divided by its time with a causal mask; the "
                "dashed line is the ideal n²/(n(n+1)/2) ≈ 2 if only the unmasked half were computed, the dotted "
                "line 1 means the mask saved nothing.",
                save(fig, ctx, name), [f"{f.title}: {f.slice_text}" for f, _ in panels])
