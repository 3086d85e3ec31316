"""Figure 6: low-precision overflow, the measured fraction of non-finite outputs vs input std,
beside the fraction a Gaussian tail predicts, one panel per place the scale is applied."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from analysis.figures.common import Context, Made, Skipped, line_grid, linestyle_of, save, set_log2_ticks, suptitle
from analysis.figures.style import SCALE_COLORS, scale_color
from analysis.slices import number_text, scale_text
from analysis.stability import AFTER, BEFORE, FUSED, overflow_rows, predicted_nonfinite_frac

MARKERS = ("o", "s", "^", "D", "v", "P")
DASHES = ("", (4, 2), (4, 1.5, 1, 1.5), (1, 1.5), (5, 1), (1, 2))  # one per d_k, as seaborn dashes
EXPERIMENT = "scaling_stability (precision=fp16,bf16 with input_std varied)"
PLACEMENT_ORDER = (AFTER, BEFORE, FUSED)


def overflow_slice(rows: pd.DataFrame) -> pd.DataFrame:
    """The overflow rows at one seq_len, mask, scope and mode: the most common ones among them."""
    part = overflow_rows(rows)
    if part.empty:
        return part
    for axis in ("device_label", "scope", "mode", "causal", "seq_len", "heads", "batch"):
        part = part[part[axis] == part[axis].mode().iloc[0]]
    return part


def low_precision_overflow(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig6_low_precision_overflow", "Low-precision overflow, measured and predicted"
    ok = overflow_slice(rows)
    if ok.empty:
        return Skipped(name, title, "no fp16/bf16 rows with a measured non-finite fraction", EXPERIMENT)
    if ok["input_std"].nunique() < 2:
        return Skipped(name, title, "fp16/bf16 rows exist but input_std does not vary", EXPERIMENT)
    variants = sorted(ok["variant"].unique(), key=lambda v: (PLACEMENT_ORDER.index(ok[ok["variant"] == v]["placement"]
                                                                                   .iloc[0]), v))
    precisions = sorted(ok["precision"].unique())
    head_dims = sorted(ok["head_dim"].unique())[-len(MARKERS):]
    ok = ok[ok["head_dim"].isin(head_dims)]
    levels = [f"d_k={number_text(float(d))}" for d in head_dims]
    ok = ok.assign(d_k=ok["head_dim"].map(lambda d: f"d_k={number_text(float(d))}"))
    scales = sorted(ok["scale"].unique())
    g = line_grid(ok, x="input_std", y="nonfinite_frac", hue="scale", hue_order=scales,
                  palette={s: scale_color(s) for s in scales}, col="variant", col_order=variants,
                  row="precision" if len(precisions) > 1 else None, row_order=precisions if len(precisions) > 1 else None,
                  style="d_k", style_order=levels, markers=dict(zip(levels, MARKERS)), dashes=dict(zip(levels, DASHES)),
                  linewidth=1.5, panel_width=4.2, panel_height=3.5)
    s = np.geomspace(ok["input_std"].min(), ok["input_std"].max(), 200)
    keys = float(ok["seq_len"].iloc[0])
    for key, ax in g.axes_dict.items():
        precision, variant = (key if isinstance(key, tuple) else (precisions[0], key))
        part = ok[(ok["variant"] == variant) & (ok["precision"] == precision)]
        if part.empty:
            continue
        placement = part["placement"].iloc[0]
        # Theory, dotted, per d_k: the fraction of rows holding a logit past the largest finite value.
        for level, d in zip(levels, head_dims):
            for scale in sorted(part["scale"].unique()):  # only what this panel measured
                if placement == FUSED:
                    predicted = np.zeros_like(s)  # the product never exists in the input dtype
                else:
                    unscaled_product = scale == "none" or placement == AFTER
                    predicted = predicted_nonfinite_frac(s, d, keys, unscaled_product=unscaled_product,
                                                         precision=precision)
                ax.plot(s, predicted, color=scale_color(scale), linestyle=":", linewidth=1.1, alpha=0.9, zorder=1)
        if (part["nonfinite_frac"] == 0).all():  # say it, so a flat line at 0 is not read as missing data
            ax.text(0.5, 0.55, f"all {len(part)} points finite", ha="center", transform=ax.transAxes, color="0.35")
        set_log2_ticks(ax, part["input_std"], text=lambda v: number_text(float(v)))
        ax.set_ylim(-0.03, 1.03)
        ax.set_xlabel("input standard deviation s of Q, K, V")
        ax.set_ylabel(f"{precision}: fraction of non-finite outputs")
        ax.set_title(variant)
    handles = [Line2D([], [], color=c, label=scale_text(sc)) for sc, c in SCALE_COLORS.items() if sc in scales]
    handles += [Line2D([], [], color="0.3", marker=m, linestyle=linestyle_of(dash), label=level)
                for level, m, dash in zip(levels, MARKERS, DASHES)]
    handles.append(Line2D([], [], color="0.3", linestyle=":", label="predicted (Gaussian tail)"))
    g.figure.legend(handles=handles, loc="outside right center")
    where = f"n={int(keys)}, {'causal' if bool(ok['causal'].iloc[0]) else 'no mask'}, {ok['device_label'].iloc[0]}"
    suptitle(g.figure, f"Non-finite outputs (inf/NaN) vs input std: measured (markers) and predicted (dotted) — {where}")
    return Made(name, title,
                "Each panel is one place the 1/√d_k scale is applied; a line above 0 means some outputs became inf or "
                "NaN, orange without the scale and blue with it. Dotted lines are the Gaussian-tail prediction: a logit "
                "q·k has std s²·√d_k, and where that product is formed in fp16 before any scale (unscaled, or scaled "
                "after QKᵀ) a row with one logit past 65504 turns NaN, P(row) = 1-(1-P(z > 65504/(s²·√d_k)))^n; with "
                "the scale on Q first the logits have std s²; fused kernels form the product in fp32.",
                save(g.figure, ctx, name), [where])
