"""Figure 8: heads at a fixed model width d_model = heads x head_dim: time and error vs heads."""

from __future__ import annotations

import pandas as pd

from analysis.cost import variant_labels
from analysis.figures.common import (
    Context, Made, Skipped, color_for, log_if_spans, save, set_log2_ticks, subplots, suptitle, tidy_log_axis,
)
from analysis.slices import fix_axes, number_text, self_attention

HEADS_FIXED = ("d_model", "device_label", "precision", "scope", "mode", "batch", "seq_len", "causal", "scale",
               "input_std")


def heads_at_fixed_width(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig8_heads", "Heads at fixed d_model"
    rows = self_attention(rows)
    chosen = fix_axes(rows, HEADS_FIXED, ("heads", "backend"))
    ok = chosen.rows[chosen.rows["status"] == "ok"]
    if ok["heads"].nunique() < 2:
        return Skipped(name, title, "no d_model measured with two or more head counts", "heads")
    ok = ok.assign(label=variant_labels(ok))
    panels = (("time_ms", "time per call, median (ms)"), ("rel_rms_err", "relative RMS error vs float64 (unitless)"))
    fig, axes = subplots(1, 2, 5.4, 3.6)
    for ax, (metric, ylabel) in zip(axes[0], panels):
        data = ok[ok[metric].notna()]
        for label, group in data.groupby("label", sort=True):
            series = group.groupby("heads")[metric].median()
            ax.plot(series.index, series.values, color=color_for(label), marker="o", markersize=4.5,
                    linewidth=1.6, label=label)
        if metric == "rel_rms_err" and (data[metric] > 0).all() and len(data):
            ax.set_yscale("log")  # errors are read as orders of magnitude, even when they span less than one
        else:
            log_if_spans(ax, data[metric], "y", decades=1.0)
        heads = sorted(data["heads"].unique()) if len(data) else sorted(ok["heads"].unique())
        set_log2_ticks(ax, heads, text=lambda h: f"{int(h)}\n(d_k={number_text(float(chosen.fixed['d_model']) / h)})")
        ax.set_xlabel("heads (head dimension d_k)")
        ax.set_ylabel(ylabel)
        tidy_log_axis(ax)
        if len(data):
            ax.legend(loc="best")
        else:
            ax.text(0.5, 0.5, f"{metric}: not measured", ha="center", transform=ax.transAxes, color="0.4")
    text = chosen.describe(always=("d_model", "seq_len", "precision"))
    suptitle(fig, f"Splitting a fixed width into more heads — {text}")
    return Made(name, title,
                "The model width d_model is fixed, so more heads means a smaller d_k per head (the second tick line); "
                "the left panel shows how each back end's time responds, the right its error.",
                save(fig, ctx, name), [f"{text}"])
