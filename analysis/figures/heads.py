"""Figure 8: heads at a fixed model width d_model = heads x head_dim: time and error vs heads."""

from __future__ import annotations

import pandas as pd

from analysis.cost import variant_labels
from analysis.figures.common import (
    Context, Made, Skipped, line_grid, log_if_spans, mask_handle, save, set_log2_ticks, suptitle, tidy_log_axis,
)
from analysis.figures.style import backend_palette
from analysis.slices import fix_axes, number_text, self_attention

HEADS_FIXED = ("d_model", "device_label", "precision", "scope", "mode", "batch", "seq_len", "causal", "scale",
               "input_std")
PANELS = (("time_ms", "time per call, median (ms)"), ("rel_rms_err", "relative RMS error vs float64 (unitless)"))


def heads_at_fixed_width(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig8_heads", "Heads at fixed d_model"
    rows = self_attention(rows)
    chosen = fix_axes(rows, HEADS_FIXED, ("heads", "backend"))
    ok = chosen.rows[chosen.rows["status"] == "ok"]
    if ok["heads"].nunique() < 2:
        return Skipped(name, title, "no d_model measured with two or more head counts", "heads")
    ok = ok.assign(label=variant_labels(ok))
    data = ok.melt(id_vars=["heads", "label"], value_vars=[m for m, _ in PANELS], var_name="metric",
                   value_name="value").dropna(subset=["value"])
    palette = backend_palette(ok["label"])
    g = line_grid(data, x="heads", y="value", hue="label", palette=palette, col="metric",
                  col_order=[m for m, _ in PANELS], panel_width=5.4, panel_height=3.6)
    for metric, ylabel in PANELS:
        ax = g.axes_dict[metric]
        values = data[data["metric"] == metric]
        if metric == "rel_rms_err" and (values["value"] > 0).all() and len(values):
            ax.set_yscale("log")  # errors are read as orders of magnitude, even when they span less than one
        else:
            log_if_spans(ax, values["value"], "y", decades=1.0)
        heads = sorted(values["heads"].unique()) if len(values) else sorted(ok["heads"].unique())
        set_log2_ticks(ax, heads, text=lambda h: f"{int(h)}\n(d_k={number_text(float(chosen.fixed['d_model']) / h)})")
        ax.set_xlabel("heads (head dimension d_k)")
        ax.set_ylabel(ylabel)
        ax.set_title("")
        tidy_log_axis(ax)
        if len(values):
            ax.legend(handles=[mask_handle(palette[lab], "no mask", lab) for lab in sorted(values["label"].unique())],
                      loc="best")
        else:
            ax.set_axis_on()  # say what is missing, so an empty panel is not read as a drawing bug
            ax.text(0.5, 0.5, f"{metric}: not measured", ha="center", transform=ax.transAxes, color="0.4")
    text = chosen.describe(always=("d_model", "seq_len", "precision"))
    suptitle(g.figure, f"Splitting a fixed width into more heads — {text}")
    return Made(name, title,
                "The model width d_model is fixed, so more heads means a smaller d_k per head (the second tick line); "
                "the left panel shows how each back end's time responds, the right its error.",
                save(g.figure, ctx, name), [f"{text}"])
