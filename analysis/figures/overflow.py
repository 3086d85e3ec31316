"""Figure 6: low-precision overflow, the fraction of non-finite outputs vs input std (or d_k)."""

from __future__ import annotations

import pandas as pd
from matplotlib.lines import Line2D

from analysis.figures.common import Context, Made, Skipped, line_grid, linestyle_of, save, set_log2_ticks, suptitle
from analysis.figures.style import SCALE_COLORS, precision_order, scale_color
from analysis.slices import fix_axes, number_text, scale_text, self_attention

LOW_PRECISIONS = ("fp16", "bf16")
MARKERS = ("o", "s", "^", "D", "v", "P")
DASHES = ("", (4, 2), (4, 1.5, 1, 1.5), (1, 1.5), (5, 1), (1, 2))  # one per d_k, as seaborn dashes
EXPERIMENT = "scaling_stability (precision=fp16,bf16 with input_std varied)"


def overflow_slice(rows: pd.DataFrame):
    rows = self_attention(rows)
    rows = rows[rows["scale"].isin(["auto", "none"]) & rows["nonfinite_frac"].notna()]
    if not rows["precision"].isin(LOW_PRECISIONS).any():
        return None, None
    x = "input_std" if rows["input_std"].nunique() > 1 else "head_dim"
    fixed = ["device_label", "backend", "scope", "mode", "seq_len", "causal", "heads", "batch"]
    if x == "head_dim":
        fixed.append("input_std")
    chosen = fix_axes(rows, fixed, (x, "scale", "precision", "head_dim"))
    return chosen, x


def low_precision_overflow(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig6_low_precision_overflow", "Low-precision overflow"
    chosen, x = overflow_slice(rows)
    if chosen is None:
        return Skipped(name, title, "no fp16/bf16 rows with a measured non-finite fraction", EXPERIMENT)
    ok = chosen.rows[chosen.rows["status"] == "ok"]
    if ok[x].nunique() < 2:
        return Skipped(name, title, "fp16/bf16 rows exist but neither input_std nor head_dim varies", EXPERIMENT)
    precisions = sorted(ok["precision"].unique(), key=precision_order)
    scales = sorted(ok["scale"].unique())
    style = {}
    if x == "input_std":  # one line per d_k too: the largest ones, where overflow starts
        head_dims = sorted(ok["head_dim"].unique())[-len(MARKERS):]
        ok = ok[ok["head_dim"].isin(head_dims)]
        ok = ok.assign(d_k=ok["head_dim"].map(lambda d: f"d_k={number_text(float(d))}"))
        levels = [f"d_k={number_text(float(d))}" for d in head_dims]
        style = dict(style="d_k", style_order=levels, markers=dict(zip(levels, MARKERS)),
                     dashes=dict(zip(levels, DASHES)))
    g = line_grid(ok, x=x, y="nonfinite_frac", hue="scale", hue_order=scales,
                  palette={s: scale_color(s) for s in scales}, col="precision", col_order=precisions,
                  linewidth=1.5, panel_width=4.4, panel_height=3.6, **style)
    for precision, ax in g.axes_dict.items():
        part = ok[ok["precision"] == precision]
        if (part["nonfinite_frac"] == 0).all():  # say it, so a flat line at 0 is not read as missing data
            ax.text(0.5, 0.55, f"all {len(part)} points finite", ha="center", transform=ax.transAxes, color="0.35")
        set_log2_ticks(ax, part[x], text=lambda v: number_text(float(v)))
        ax.set_ylim(-0.03, 1.03)
        ax.set_xlabel("input standard deviation s of Q, K, V" if x == "input_std" else "head dimension d_k")
        ax.set_ylabel("fraction of non-finite outputs (0–1)")
        ax.set_title(precision)
    handles = [Line2D([], [], color=c, label=scale_text(s)) for s, c in SCALE_COLORS.items() if s in scales]
    if style:
        handles += [Line2D([], [], color="0.3", marker=style["markers"][level],
                           linestyle=linestyle_of(style["dashes"][level]), label=level)
                    for level in style["style_order"]]
    g.figure.legend(handles=handles, loc="outside right center")
    suptitle(g.figure, f"Non-finite outputs (inf/NaN) by precision — {chosen.describe(always=('seq_len', 'backend'))}")
    return Made(name, title,
                "Each panel is one precision; a line above 0 means some outputs became inf or NaN (fp16's largest "
                "finite value is 65504, bf16 shares fp32's range), orange without the 1/√d_k scale and blue with it.",
                save(g.figure, ctx, name), [f"{chosen.describe(always=('seq_len', 'backend'))}"])
