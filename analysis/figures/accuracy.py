"""Figure 7: relative RMS error against the float64 reference vs seq_len, per precision and back end."""

from __future__ import annotations

import pandas as pd
from matplotlib.lines import Line2D

from analysis.cost import variant_labels
from analysis.figures.common import (
    Context, Made, Skipped, line_grid, linestyle_of, save, set_log2_ticks, suptitle, tidy_log_axis,
)
from analysis.figures.style import precision_color, precision_order
from analysis.slices import fix_axes, self_attention

# Colour is the precision here, so the back end is the line style (seaborn dashes) and marker.
BACKEND_STYLES = {"naive": ("", "o"), "sdpa": ((4, 2), "s"), "chunked": ((4, 1.5, 1, 1.5), "^")}
OTHER_STYLE = ((1, 1.5), "D")
# a back end's second, third ... option set (naive with scale_at=query beside its default): styles of their own
EXTRA_STYLES = [((1, 1.5), "D"), ((6, 2, 1, 2), "v"), ((2, 2), "P"), ((8, 2), "X")]
ACCURACY_FIXED = ("scope", "mode", "batch", "heads", "head_dim", "scale", "causal", "input_std")
# Unit roundoff of each precision: the scale its errors are read against.
UNIT_ROUNDOFF = {"fp64": 2.0**-53, "fp32": 2.0**-24, "tf32": 2.0**-11, "bf16": 2.0**-8, "fp16": 2.0**-11}


def _styles(labels: list[str]) -> dict[str, tuple]:
    """(dashes, marker) per label: a back end's first label its own style, its others the next of EXTRA_STYLES."""
    styles, extra = {}, iter(EXTRA_STYLES * (1 + len(labels) // len(EXTRA_STYLES)))
    for label in labels:
        backend = label.split(" ")[0]
        first = backend in BACKEND_STYLES and not any(k.split(" ")[0] == backend for k in styles)
        styles[label] = BACKEND_STYLES[backend] if first else next(extra)
    return styles


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
    notes = []
    for device, _, ok in panels:
        zero = ok[ok["rel_rms_err"] <= 0]
        if len(zero):
            notes.append(f"{device}: {len(zero)} exact-zero errors ({', '.join(sorted(zero['precision'].unique()))}) "
                         "not drawn on the log axis")
    data = pd.concat([ok[ok["rel_rms_err"] > 0] for _, _, ok in panels], ignore_index=True)
    precisions = sorted(data["precision"].unique(), key=precision_order)
    labels = sorted(data["label"].unique())
    style_of = _styles(labels)
    g = line_grid(data, x="seq_len", y="rel_rms_err", hue="precision", hue_order=precisions,
                  palette={p: precision_color(p) for p in precisions}, style="label", style_order=labels,
                  dashes={lab: style_of[lab][0] for lab in labels}, markers={lab: style_of[lab][1] for lab in labels},
                  col="device_label", col_order=[d for d, _, _ in panels], col_wrap=2, linewidth=1.5,
                  panel_width=7.0, panel_height=3.8)
    g.set(yscale="log")
    for device, chosen, _ in panels:
        ax = g.axes_dict[device]
        ok = data[data["device_label"] == device]
        set_log2_ticks(ax, ok["seq_len"])
        ax.set_xlabel("sequence length n (tokens)")
        ax.set_ylabel("relative RMS error vs float64 (unitless)")
        tidy_log_axis(ax)
        ax.set_title(f"{device}\n{chosen.describe(always=('head_dim', 'scale'))}")
        shown = sorted(ok["precision"].unique(), key=precision_order)
        handles = [Line2D([], [], color=precision_color(p), linewidth=3, label=p) for p in shown]
        handles += [Line2D([], [], color="0.3", linestyle=linestyle_of(style_of[lab][0]), marker=style_of[lab][1], label=lab)
                    for lab in sorted(ok["label"].unique())]
        for p in shown:
            eps = UNIT_ROUNDOFF.get(p)
            if eps and eps > ax.get_ylim()[0] / 10:
                ax.axhline(eps, color=precision_color(p), linewidth=0.7, alpha=0.5, linestyle=(0, (1, 3)))
        handles.append(Line2D([], [], color="0.4", linestyle=(0, (1, 3)), label="unit roundoff of the precision"))
        ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.02, 0.5))
    suptitle(g.figure, "Error against a float64 reference of the same inputs (sampled query rows)")
    return Made(name, title,
                "Colour is the precision, line style the back end; each point is the RMS error of the output divided "
                "by the RMS of the float64 reference, and the faint dotted lines mark each precision's unit roundoff.",
                save(g.figure, ctx, name), [f"{d}: {c.describe(always=('head_dim', 'scale'))}" for d, c, _ in panels] + notes)
