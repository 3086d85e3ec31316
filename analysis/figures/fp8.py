"""Figures 20-21: FP8 attention. 20: error against float64 per Q/K/V quantization, format, P's scale and
outliers, beside bf16 and fp16; 21: raw casts of logits and inputs of growing std, the measured fraction
saturated (e4m3) or non-finite (e5m2) beside the Gaussian tail's prediction."""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D

from analysis.figures.common import Context, Made, Skipped, save, set_log2_ticks, suptitle
from analysis.figures.style import precision_color, scale_color
from analysis.fp8 import BASELINES, FP8_AXES, _scaled_errors, fp8_points, overflow_points, predicted_nonfinite_frac, \
    predicted_saturated_frac, variant_text
from analysis.slices import number_text, plain_rows, scale_text

EXPERIMENT = "fp8"
VARIANT_ORDER = ("tensor", "tensor+H", "block64", "block64+H")


def fp8_error(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig20_fp8_error", "FP8 error by quantization, format and P's scale"
    points = fp8_points(rows)
    part = _scaled_errors(points) if not points.empty else points
    if part.empty:
        return Skipped(name, title, "no quantized FP8 rows", EXPERIMENT)
    # The products' way (fp8_matmul) is a series of its own, not a category: a GPU's rows come in scaled_mm and
    # dequant twins of each quantization, and one category per twin crowded the axis with a line zigzagging
    # between them (the first H200 check).
    matmuls = sorted(part["fp8_matmul"].astype(str).unique())
    part = part.assign(variant=variant_text(part, with_matmul=False),
                       series=part["precision"] + (" (" + part["fp8_matmul"].astype(str) + ")" if len(matmuls) > 1 else ""),
                       outliers=part["input_outliers"].map(lambda p: f"outliers {number_text(float(p))}"),
                       P=part["p_scale"].map(lambda p: f"p_scale {number_text(float(p))}"))
    variants = [v for v in VARIANT_ORDER if v in set(part["variant"])] + sorted(set(part["variant"]) - set(VARIANT_ORDER))
    precisions = sorted(part["series"].unique())
    twins = part[["series", "precision", "fp8_matmul"]].drop_duplicates()
    palette = {s: _shade(precision_color(p), matmuls.index(str(m))) for s, p, m in twins.itertuples(index=False)}
    # per format (and products' way), the median over d_k and n with a bar over their range
    g = sns.catplot(data=part, kind="point", x="variant", order=variants, y="rel_rms_err", hue="series",
                    hue_order=precisions, palette=palette, estimator="median", errorbar=("pi", 100),
                    dodge=0.3 if len(precisions) > 1 else False, col="outliers", row="P", height=3.2, aspect=1.3,
                    sharex=True, sharey=True, legend=False)
    base = plain_rows(rows[(rows["status"] == "ok") & rows["precision"].isin(BASELINES) & (rows["backend"] == "naive")
                           & (rows["input_std"] == 1) & rows["seq_len"].isin(part["seq_len"].unique())
                           & rows["head_dim"].isin(part["head_dim"].unique())], vary=FP8_AXES)
    drawn = set()  # the baselines some panel has rows for (the legend names no line that is not drawn)
    for (p_text, outliers_text), ax in g.axes_dict.items():
        share = float(outliers_text.split()[-1])
        for precision, h in base[base["input_outliers"].fillna(0) == share].groupby("precision"):
            ax.axhline(h["rel_rms_err"].median(), color=precision_color(precision), linestyle="--", linewidth=1)
            drawn.add(precision)
        ax.set_yscale("log")
        ax.set_title(f"{p_text}, {outliers_text}")
        ax.set_xlabel("Q/K/V quantization (+H: Hadamard)")
        ax.set_ylabel("relative RMS error vs float64")
        ax.tick_params(axis="x", labelrotation=30)  # "block64+H" beside "tensor+H" overlap when level
    handles = [Line2D([], [], color=palette[p], marker="o", label=p) for p in precisions]
    handles += [Line2D([], [], color=precision_color(p), linestyle="--", label=f"{p} (same inputs)")
                for p in sorted(drawn)]
    g.figure.legend(handles=handles, loc="outside right center")
    where = f"naive, n {', '.join(number_text(float(n)) for n in sorted(part['seq_len'].unique()))}, d_k " \
            f"{', '.join(number_text(float(d)) for d in sorted(part['head_dim'].unique()))}, {part['device_label'].iloc[0]}"
    suptitle(g.figure, f"FP8 attention: error against float64 — {where}")
    return Made(name, title,
                "Each marker is the median relative RMS error over d_k and n (bars: their range) of one format with one "
                "Q/K/V quantization; dashed lines are bf16 and fp16 on the same inputs. Rows: P cast as it is (p_scale 1) "
                "or scaled by 2^8 first; columns: Gaussian inputs, or 0.1% of entries with an extra N(0, 10^2) term.",
                save(g.figure, ctx, name), [where])


def fp8_overflow(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig21_fp8_overflow", "FP8 raw casts: saturated and non-finite, measured and predicted"
    raw = overflow_points(rows)
    if raw.empty:
        return Skipped(name, title, "no raw-cast (fp8_scaling=none) FP8 rows", EXPERIMENT)
    if raw["input_std"].nunique() < 2:
        return Skipped(name, title, "raw-cast FP8 rows exist but input_std does not vary", EXPERIMENT)
    fmts = [f for f in ("e4m3", "e5m2") if f in set(raw["fmt"])]
    fig, axes = _subplots(len(fmts))
    s = np.geomspace(raw["input_std"].min(), raw["input_std"].max(), 200)
    for ax, fmt in zip(axes, fmts):
        part = raw[raw["fmt"] == fmt]
        for scale, h in part.groupby("scale"):
            color = scale_color(scale)
            h = h.groupby("input_std", as_index=False).median(numeric_only=True)
            d = float(h["head_dim"].iloc[0])
            sigma = s ** 2 * (np.sqrt(d) * float(h["scale_value"].iloc[0]))  # a logit q.k has std s^2 sqrt(d) x scale
            ax.plot(h["input_std"], h["raw_logit_saturated_frac"], "o", color=color)
            ax.plot(s, predicted_saturated_frac(sigma, fmt), ":", color=color)
            if fmt == "e5m2":
                ax.plot(h["input_std"], h["raw_logit_nonfinite_frac"], "x", color=color, markersize=7)
                ax.plot(s, predicted_nonfinite_frac(sigma, fmt), "--", color=color, linewidth=1)
        inputs = part.groupby("input_std", as_index=False).median(numeric_only=True)
        ax.plot(inputs["input_std"], inputs["fp8_saturated_frac"], "s", color="0.3", markersize=4)
        ax.plot(s, predicted_saturated_frac(s, fmt), ":", color="0.3")
        ax.set_xscale("log", base=2)
        set_log2_ticks(ax, part["input_std"], text=lambda v: number_text(float(v)))
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(fmt)
        ax.set_xlabel("input standard deviation s of Q, K, V")
        ax.set_ylabel("fraction of values")
    handles = [Line2D([], [], color=scale_color(sc), marker="o", linestyle="", label=f"logits, {scale_text(sc)}: saturated")
               for sc in sorted(raw["scale"].unique())]
    handles += [Line2D([], [], color="0.4", marker="x", linestyle="", label="logits: non-finite (e5m2)"),
                Line2D([], [], color="0.3", marker="s", linestyle="", label="Q, K, V: saturated"),
                Line2D([], [], color="0.3", linestyle=":", label="predicted, saturated (Gaussian tail)"),
                Line2D([], [], color="0.3", linestyle="--", label="predicted, non-finite")]
    fig.legend(handles=handles, loc="outside right center")
    where = f"naive, n={number_text(float(raw['seq_len'].iloc[0]))}, d_k={number_text(float(raw['head_dim'].iloc[0]))}, " \
            f"{raw['device_label'].iloc[0]}"
    suptitle(fig, f"Raw FP8 casts (no quantization scale) vs input std — {where}")
    return Made(name, title,
                "A raw cast keeps values as they are: e4m3 rounds everything from 432 up to 448 (saturated, silent), "
                "e5m2 rounds 53248..61440 to 57344 and larger values to inf. Markers are measured on the sampled rows "
                "(logits with and without the 1/√d_k scale; the quantized Q, K, V), lines the Gaussian tail of a "
                "value of std s (inputs) or s²·√d_k·scale (logits) past those thresholds.",
                save(fig, ctx, name), [where])


def _shade(color: str, step: int) -> tuple[float, ...]:
    """`color`, lighter by half for each `step` (the second products' way of one format)."""
    from matplotlib.colors import to_rgb

    mix = 1 - 0.5 ** step
    return tuple(c + (1 - c) * mix for c in to_rgb(color))


def _subplots(n: int):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, n, figsize=(4.4 * n, 3.6), squeeze=False)
    return fig, list(axes[0])
