"""Figure 7: relative RMS error against the float64 reference vs seq_len, per precision and back end."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from analysis.cost import variant_labels
from analysis.figures.common import (
    Context, Made, Skipped, facet_grid, precision_order, save, set_log2_ticks, suptitle, tidy_log_axis,
)
from analysis.slices import fix_axes, self_attention

PRECISION_COLORS = {"fp64": "#000000", "fp32": "#0072B2", "tf32": "#56B4E9", "bf16": "#009E73", "fp16": "#D55E00"}
BACKEND_STYLES = {"naive": ("-", "o"), "sdpa": ("--", "s"), "chunked": ("-.", "^")}
ACCURACY_FIXED = ("scope", "mode", "batch", "heads", "head_dim", "scale", "causal", "input_std")


def accuracy_vs_seq_len(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig7_accuracy_vs_seq_len", "Accuracy vs sequence length"
    rows = self_attention(rows)
    rows = rows[rows["rel_rms_err"].notna()]
    panels = []
    for device, part in rows.groupby("device_label", sort=True):
        chosen = fix_axes(part, ACCURACY_FIXED, ("seq_len", "precision", "backend"))
        ok = chosen.rows[chosen.rows["status"] == "ok"]
        ok = ok.assign(label=variant_labels(ok))
        if ok["seq_len"].nunique() >= 2:
            panels.append((device, chosen, ok))
    if not panels:
        return Skipped(name, title, "no relative error measured at two or more seq_len values",
                       "precision_accuracy (or the default sweep)")
    fig, axes = facet_grid(len(panels), 7.0, 3.8)
    notes = []
    for ax, (device, chosen, ok) in zip(axes, panels):
        zero = ok[ok["rel_rms_err"] <= 0]
        if len(zero):
            notes.append(f"{device}: {len(zero)} exact-zero errors ({', '.join(sorted(zero['precision'].unique()))}) "
                         "not drawn on the log axis")
        ok = ok[ok["rel_rms_err"] > 0]
        for (precision, label), group in sorted(ok.groupby(["precision", "label"]),
                                                key=lambda kv: (precision_order(kv[0][0]), kv[0][1])):
            series = group.groupby("seq_len")["rel_rms_err"].median()
            style, marker = BACKEND_STYLES.get(group["backend"].iloc[0], (":", "D"))
            ax.plot(series.index, series.values, color=PRECISION_COLORS.get(precision, "0.4"), linestyle=style,
                    marker=marker, markersize=4.5, linewidth=1.5, label=f"{precision}, {label}")
        ax.set_yscale("log")
        set_log2_ticks(ax, ok["seq_len"])
        ax.set_xlabel("sequence length n (tokens)")
        ax.set_ylabel("relative RMS error vs float64 (unitless)")
        tidy_log_axis(ax)
        ax.set_title(f"{device}\n{chosen.describe(always=('head_dim', 'scale'))}")
        precisions = sorted(ok["precision"].unique(), key=precision_order)
        labels = sorted(ok["label"].unique())
        handles = [Line2D([], [], color=PRECISION_COLORS.get(p, "0.4"), linewidth=3, label=p) for p in precisions]
        handles += [Line2D([], [], color="0.3", linestyle=BACKEND_STYLES.get(lab.split(" ")[0], (":", "D"))[0],
                           marker=BACKEND_STYLES.get(lab.split(" ")[0], (":", "D"))[1], label=lab) for lab in labels]
        for p in precisions:  # unit roundoff of each precision, the scale errors are read against
            eps = {"fp64": 2.0**-53, "fp32": 2.0**-24, "tf32": 2.0**-11, "bf16": 2.0**-8, "fp16": 2.0**-11}.get(p)
            if eps and eps > ax.get_ylim()[0] / 10:
                ax.axhline(eps, color=PRECISION_COLORS.get(p, "0.4"), linewidth=0.7, alpha=0.5, linestyle=(0, (1, 3)))
        handles.append(Line2D([], [], color="0.4", linestyle=(0, (1, 3)), label="unit roundoff of the precision"))
        ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.02, 0.5))
    suptitle(fig, "Error against a float64 reference of the same inputs (sampled query rows)")
    return Made(name, title,
                "Colour is the precision, line style the back end; each point is the RMS error of the output divided "
                "by the RMS of the float64 reference, and the faint dotted lines mark each precision's unit roundoff.",
                save(fig, ctx, name), [f"{d}: {c.describe(always=('head_dim', 'scale'))}" for d, c, _ in panels] + notes)
