"""Figure 10: the chapter's cost table measured: the attention core's share of a layer's time vs n,
beside its share of the FLOPs, n / (n + 2·d_model), which is 1/2 at n = 2·d_model."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from analysis.cost import crossover_n, flop_core_share, layer_shares
from analysis.figures.common import Context, Made, Skipped, line_grid, mask_handle, save, set_log2_ticks, suptitle
from analysis.figures.style import backend_palette


def layer_share(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig10_layer_share", "Where a layer's time goes: attention core vs projections"
    shares = layer_shares(rows)
    if shares.empty or shares["seq_len"].nunique() < 2:
        return Skipped(name, title, "no point timed both with scope=layer and scope=core at two or more n",
                       "quick (grid layer: scope=core,layer)")
    # One panel per d_model (the crossover moves with it); device and precision: the most common.
    for axis in ("device_label", "precision"):
        shares = shares[shares[axis] == shares[axis].mode().iloc[0]]
    palette = backend_palette(shares["backend"])
    g = line_grid(shares, x="seq_len", y="share", hue="backend", palette=palette, col="d_model",
                  panel_width=5.0, panel_height=3.6)
    notes = []
    for d_model, ax in g.axes_dict.items():
        part = shares[shares["d_model"] == d_model]
        n = np.geomspace(part["seq_len"].min(), part["seq_len"].max(), 100)
        ax.plot(n, flop_core_share(n, float(d_model)), color="0.3", linestyle=":", linewidth=1.2, zorder=1)
        ax.axvline(2 * float(d_model), color="0.5", linestyle="--", linewidth=0.9)
        ax.axhline(0.5, color="0.7", linewidth=0.8)
        handles = []
        for backend, line in part.groupby("backend", sort=True):
            cross = crossover_n(line["seq_len"].to_numpy(), line["share"].to_numpy())
            text = f"n≈{cross:.0f}" if np.isfinite(cross) else "none in range"
            handles.append(mask_handle(palette[backend], "no mask", f"{backend}: crosses 1/2 at {text}"))
            notes.append(f"d_model={int(d_model)} {backend}: measured crossover {text}")
        handles += [Line2D([], [], color="0.3", linestyle=":", label="FLOP share n/(n+2·d_model)"),
                    Line2D([], [], color="0.5", linestyle="--", label=f"n = 2·d_model = {2 * int(d_model)}")]
        ax.legend(handles=handles, loc="lower right")
        set_log2_ticks(ax, part["seq_len"])
        ax.set_ylim(0, 1)
        ax.set_xlabel("sequence length n (tokens)")
        ax.set_ylabel("attention core time / layer time")
        ax.set_title(f"d_model = {int(d_model)}")
    where = f"{shares['precision'].iloc[0]} · {shares['device_label'].iloc[0]}"
    suptitle(g.figure, f"Share of a layer's time in the attention core (QKᵀ, softmax, AV) vs n — {where}")
    return Made(name, title,
                "Each line is the time of the attention core alone (scope=core) divided by that of the whole "
                "layer with its Q, K, V and output projections (scope=layer) at the same point (each the faster of its repeats); the dotted line is the "
                "core's share of the FLOPs, 4n²d / (8nd² + 4n²d), which crosses 1/2 at n = 2·d_model (dashed).",
                save(g.figure, ctx, name), notes)
