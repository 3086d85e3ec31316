"""Figure 4: what a causal mask saves, time(no mask) / time(causal), against the ideal n²/(n(n+1)/2)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.cost import causal_ratios, cost_facets, ideal_causal_ratio
from analysis.figures.common import (
    Context, Made, Skipped, hollow_points, legend_right, line_grid, mask_handle, save, set_log2_ticks, suptitle,
)
from analysis.figures.style import backend_palette, precision_order
from analysis.judged import facet_notes
from analysis.noise import unsure_mask


def causal_saving(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig4_causal_saving", "Causal-mask saving"
    panels = [(f, causal_ratios(f)) for f in cost_facets(rows, "time_ms")]
    panels = [(f, r) for f, r in panels if not r.empty]
    if not panels:
        return Skipped(name, title, "no back end was timed both with and without a causal mask at the same seq_len",
                       "causal_mask (or the default sweep)")
    # A ratio is one number per point (medians over seeds divided), so there is no interval to draw.
    panels.sort(key=lambda p: (p[0].device_label, precision_order(p[0].precision)))
    data = pd.concat([r.assign(panel=f.title) for f, r in panels], ignore_index=True)
    palette = backend_palette(data["label"])
    g = line_grid(data, x="seq_len", y="ratio", hue="label", palette=palette, col="panel",
                  col_order=[f.title for f, _ in panels], col_wrap=2, errorbar=None, panel_width=6.6,
                  panel_height=3.6)
    any_hollow = False
    for facet, ratios in panels:
        ax = g.axes_dict[facet.title]
        handles = [mask_handle(palette[label], "no mask",
                               f"{label}: ×{group['ratio'].iloc[-1]:.2f} at n={int(group['seq_len'].iloc[-1])}")
                   for label, group in ratios.sort_values("seq_len").groupby("label", sort=True)]
        n = np.geomspace(ratios["seq_len"].min(), ratios["seq_len"].max(), 50)
        ax.plot(n, ideal_causal_ratio(n), color="black", linestyle="--", linewidth=1.1,
                label="ideal n² / (n(n+1)/2) ≈ 2")
        ax.axhline(1.0, color="0.45", linestyle=":", linewidth=1.0, label="no saving (1)")
        set_log2_ticks(ax, ratios["seq_len"])
        ax.set_ylim(0, max(2.3, float(ratios["ratio"].max()) * 1.1))
        ax.set_xlabel("sequence length n (tokens)")
        ax.set_ylabel("time without mask / time with mask (×)")
        ax.set_title(f"{facet.title}\n{facet.slice_text}")
        # a ratio read from a noisy or fewer-thread row (either mask) is drawn hollow
        unsure = facet.slice_rows[unsure_mask(facet.slice_rows)]
        keys = set(zip(unsure["label"], unsure["seq_len"].astype(float)))
        flagged = ratios[[(label, float(n)) in keys for label, n in zip(ratios["label"], ratios["seq_len"])]]
        hollow = hollow_points(ax, flagged, "seq_len", "ratio", lambda r: palette[r["label"]], lambda r: "o")
        any_hollow |= bool(hollow)
        legend_right(ax, hollow, lead_handles=handles)
    suptitle(g.figure, "Speed-up from a causal mask (time without / time with); skipping the masked half "
                       "of the scores would give 2")
    return Made(name, title,
                "Each line is a back end's median time without a mask divided by its time with a causal mask; the "
                "dashed line is the ideal n²/(n(n+1)/2) ≈ 2 if only the unmasked half were computed, the dotted "
                "line 1 means the mask saved nothing."
                + (" Hollow markers are ratios read from a row flagged noisy or timed on fewer threads (with or without "
                   "the mask): the machine's load may have made them." if any_hollow else ""),
                save(g.figure, ctx, name), [f"{f.title}: {f.slice_text}" for f, _ in panels]
                + facet_notes(f for f, _ in panels))
