"""Figure 5: logit std, softmax entropy, max weight, gradient at softmax's input vs d_k, scaled vs unscaled."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from analysis.figures.common import (
    Context, Made, Skipped, line_grid, linestyle_of, log_if_spans, save, set_log2_ticks, suptitle, tidy_log_axis,
)
from analysis.figures.style import PRECISION_DASHES, SCALE_COLORS, precision_dashes, precision_order, scale_color
from analysis.slices import number_text, scale_text
from analysis.stability import stability_points, stability_slice, theory_logit_std

PANELS = (  # metric, panel title, y label, y scale
    ("logit_std", "Logit std (theory dotted)", "std of the logits fed to softmax", "log"),
    ("softmax_entropy", "Softmax entropy (0 one-hot, 1 uniform)", "entropy / log(keys seen)", "linear"),
    ("max_weight", "Largest attention weight", "mean largest weight per row (0–1)", "auto"),
    ("grad_norm_logits", "Gradient at softmax's input", "median ‖∂L/∂logits‖ per row", "log"),
)


def _long(rows: pd.DataFrame, panels) -> pd.DataFrame:
    """One row per (measured row, panel metric): what relplot facets by panel title."""
    ok = rows[rows["status"] == "ok"]
    ok = ok.assign(**{m: np.nan for m, *_ in panels if m not in ok.columns})
    long = ok.melt(id_vars=["precision", "scale", "head_dim"], value_vars=[m for m, *_ in panels],
                   var_name="metric", value_name="value").dropna(subset=["value"])
    titles = {m: t for m, t, *_ in panels}
    return long.assign(panel=long["metric"].map(titles))


def scaling_stability(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig5_scaling_stability", "Scaling stability vs d_k"
    experiment = "scaling_stability (or the default sweep's head_dim x scale grid)"
    chosen = stability_slice(rows)
    points = stability_points(chosen) if chosen else pd.DataFrame()
    if points.empty or points["head_dim"].nunique() < 2 or points["scale"].nunique() < 2:
        return Skipped(name, title, "needs ok rows at two or more head_dim values both with and without the scale",
                       experiment)
    input_std = float(chosen.fixed.get("input_std", 1.0))
    notes = []
    data = _long(chosen.rows, PANELS)
    scales = sorted(data["scale"].unique())
    g = line_grid(data, x="head_dim", y="value", hue="scale", hue_order=scales,
                  palette={s: scale_color(s) for s in scales}, style="precision",
                  style_order=sorted(data["precision"].unique(), key=precision_order),
                  dashes=precision_dashes(data["precision"]), markers={p: "o" for p in data["precision"].unique()},
                  col="panel", col_order=[t for _, t, *_ in PANELS], col_wrap=2, markersize=4,
                  panel_width=4.4, panel_height=3.1)
    for (metric, panel_title, ylabel, yscale), ax in zip(PANELS, g.axes.flat):
        values = data.loc[data["metric"] == metric, "value"]
        if values.empty:
            ax.set_axis_on()  # an empty panel says what is missing, so it is not read as a drawing bug
            ax.text(0.5, 0.5, f"{metric}: not measured\n(needs mode=fwd_bwd)" if metric.startswith("grad")
                    else f"{metric}: not measured", ha="center", va="center", transform=ax.transAxes, color="0.4")
            notes.append(f"{metric} not measured in this slice")
        if metric == "logit_std":
            d = np.geomspace(points["head_dim"].min(), points["head_dim"].max(), 50)
            ax.plot(d, theory_logit_std(d, "none", input_std), color="black", linewidth=0.9, linestyle=(0, (1, 1)))
            ax.plot(d, theory_logit_std(d, "auto", input_std), color="0.5", linewidth=0.9, linestyle=(0, (1, 1)))
        if yscale == "log":
            ax.set_yscale("log")
        elif yscale == "auto":
            log_if_spans(ax, values, "y", decades=1.0)
        if ax.get_yscale() == "linear":
            ax.set_ylim(0, 1.05)
        set_log2_ticks(ax, points["head_dim"], text=lambda v: number_text(float(v)))
        tidy_log_axis(ax)
        ax.set_xlabel("head dimension d_k")
        ax.set_ylabel(ylabel)
        ax.set_title(panel_title)
    sigma2 = "" if input_std == 1 else f"{number_text(input_std)}²·"
    handles = [Line2D([], [], color=c, marker="o", label=scale_text(s)) for s, c in SCALE_COLORS.items()
               if s in set(points["scale"])]
    handles += [Line2D([], [], color="0.2", linestyle=linestyle_of(PRECISION_DASHES.get(p, (1, 2))), label=p)
                for p in sorted(points["precision"].unique(), key=precision_order)]
    handles += [Line2D([], [], color="black", linestyle=(0, (1, 1)), label=f"theory unscaled: {sigma2}√d_k"),
                Line2D([], [], color="0.5", linestyle=(0, (1, 1)), label=f"theory scaled: {sigma2 or '1'}".rstrip("·"))]
    g.figure.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4))
    suptitle(g.figure, f"Scaled (1/√d_k) vs unscaled logits as d_k grows\n"
                       f"{chosen.describe(always=('seq_len', 'backend'))}")
    return Made(name, title,
                "Blue is the standard 1/√d_k scale, orange the unscaled ablation; in the first panel the dotted "
                "theory lines are s²·√d_k and s² (s = input std); the chapter expects the unscaled softmax to turn "
                "one-hot as d_k grows (entropy → 0, largest weight → 1) and the typical row's gradient at the softmax "
                "input (median ‖∂L/∂logits‖) to shrink, which the claims table checks against these points.",
                save(g.figure, ctx, name), [f"{chosen.describe(always=('seq_len', 'backend'))}"] + notes)

