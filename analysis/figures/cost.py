"""Figures 1-3: time, peak memory and TFLOP/s vs seq_len, per back end (colour) and mask (line style),
one panel per precision x device."""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D

from analysis.cost import Facet, cost_facets, memory_metric
from analysis.costmodel import MIN_MODEL_SIZES
from analysis.figures.common import (
    MASK_MARKERS, MASKS, SEED_INTERVAL, Context, Made, Skipped, bytes_axis, guide_lines, hollow_points, legend_right,
    line_grid, log_if_spans,
    mark_failed, mask_handle, save, set_log2_ticks, suptitle, tidy_log_axis,
)
from analysis.figures.style import backend_palette, precision_order
from analysis.judged import facet_notes
from analysis.noise import unsure_mask

EXPERIMENT = "quadratic_cost (or the default sweep)"


def _mask_text(causal: bool) -> str:
    return "causal" if causal else "no mask"


# A panel's width: the data's 6.4 inches and its legend's (long fit labels) beside them, so the legend never
# squeezes the data.
PANEL_WIDTH_IN = 6.4 + 4.6


def _panel_order(facets: list[Facet]) -> list[Facet]:
    """Device by device, widest precision first: the panels' reading order, two to a row."""
    return sorted(facets, key=lambda f: (f.device_label, precision_order(f.precision)))


def _grid(facets: list[Facet], metric: str, errorbar=SEED_INTERVAL, estimator: str = "median"):
    """relplot of every facet's ok rows: hue = back end, style = mask, one panel per device x precision
    (wrapped two to a row, so a single device's precisions do not stack into one tall column).

    Returns the grid, its palette and each facet's axis.
    """
    facets = _panel_order(facets)
    data = pd.concat([f.slice_rows.assign(panel=f.title) for f in facets], ignore_index=True)
    palette = backend_palette(data["label"])  # failed rows' labels too: their markers take the same colour
    data = data[(data["status"] == "ok") & np.isfinite(data[metric]) & (data[metric] > 0)]
    data = data.assign(mask=data["causal"].map(lambda c: _mask_text(bool(c))))
    g = line_grid(data, x="seq_len", y=metric, hue="label", palette=palette, style="mask", col="panel",
                  col_order=[f.title for f in facets], col_wrap=2, errorbar=errorbar, panel_width=PANEL_WIDTH_IN,
                  panel_height=3.7, estimator=estimator)
    return g, palette, {(f.precision, f.device_label): g.axes_dict[f.title] for f in facets}


def _legend(ax, facet: Facet, palette: dict[str, str], label_of, extra=()) -> None:
    """One entry per line (its colour and mask, labelled with its fit), then the figure's extras, right of the panel
    in the room PANEL_WIDTH_IN leaves it."""
    handles = [mask_handle(palette[line.label], _mask_text(line.causal), label_of(line)) for line in facet.lines]
    legend_right(ax, extra, lead_handles=handles)


def _hollow(ax, facet: Facet, metric: str, palette: dict[str, str]) -> list[Line2D]:
    """The facet's noisy or fewer-thread ok rows drawn hollow over their lines (analysis.noise.unsure_mask)."""
    rows = facet.slice_rows
    unsure = rows[unsure_mask(rows)]
    return hollow_points(ax, unsure, "seq_len", metric, lambda r: palette.get(r["label"], "0.5"),
                         lambda r: MASK_MARKERS[_mask_text(bool(r["causal"]))])


MODEL_STYLE = {"linewidth": 0.8, "alpha": 0.75, "zorder": 2}
QUADRATIC_TERM_DASHES = (0, (5, 1.5, 1, 1.5, 1, 1.5))  # dash-dot-dot: not a mask's dashes, not the prediction's dots


def _draw_models(ax, facet: Facet, palette: dict[str, str]) -> dict[str, str]:
    """Each no-mask line's fitted cost model (thin) and its n² term alone (dash-dot-dot), over the measured
    sizes: where the two part, fixed and per-row costs still hold the slope below 2. Returns the
    legend text per line label (its n² share at the largest n, or how far a model that does not follow
    the rows misses them)."""
    shares = {}
    for line in facet.lines:
        if line.causal:
            continue
        model = line.growth.model
        if model is None:
            continue
        if not model.fits:  # a curve that misses the rows explains nothing: say so, draw none
            shares[line.label] = f"cost model off by {100 * model.residual:.0f}% rms"
            continue
        xs = np.geomspace(model.n_min, model.n_max, 48)
        color = palette[line.label]
        ax.plot(xs, model.predict(xs), color=color, linestyle="-", **MODEL_STYLE)
        if model.share >= 0.01:  # a vanishing n² term would only stretch the axis down to it
            ax.plot(xs, model.terms(xs)[2], color=color, linestyle=QUADRATIC_TERM_DASHES, **MODEL_STYLE)
        shares[line.label] = f"n² {100 * model.share:.0f}% of it at {model.n_max:.0f}"
    return shares


def _model_handles(shown: bool) -> list[Line2D]:
    if not shown:
        return []
    return [Line2D([], [], color="0.3", linestyle="-", linewidth=0.8, label="fitted fixed + linear + n² (no mask)"),
            Line2D([], [], color="0.3", linestyle=QUADRATIC_TERM_DASHES, linewidth=0.8, label="its n² term alone")]


def _with_share(text: str, line, shares: dict[str, str]) -> str:
    return text + (f"; {shares[line.label]}" if not line.causal and line.label in shares else "")


HOLLOW_TEXT = (" Hollow markers are rows flagged noisy or timed on fewer threads than the device's others: their time "
               "may be the machine's load rather than the kernel's (the rows' `noise` column says why).")


def _row_color(palette: dict[str, str]):
    return lambda row: palette.get(row["label"], "0.5")


def time_vs_seq_len(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig1_time_vs_seq_len", "Time vs sequence length"
    facets = cost_facets(rows, "time_ms")
    if not facets:
        return Skipped(name, title, "no back end was timed at two or more seq_len values", EXPERIMENT)
    # The band is each point's own spread over timing repeats (p20-p80), not a spread over seeds.
    # The fastest repeat at each n, as the fit uses (analysis.cost._points): load only adds time.
    g, palette, placed = _grid(facets, "time_ms", errorbar=None, estimator="min")
    g.set(yscale="log")
    share_shown = False  # whether some legend shows a cost model's n² share: the title promises it only then
    for facet in facets:
        ax = placed[(facet.precision, facet.device_label)]
        for line in facet.lines:
            pts = line.points
            if (pts["high"] > pts["low"]).any():
                ax.fill_between(pts["seq_len"], pts["low"], pts["high"], color=palette[line.label], alpha=0.15,
                                linewidth=0)
        values = pd.concat([l.points for l in facet.lines])
        first = values[values["seq_len"] == values["seq_len"].min()]["value"]
        guide_lines(ax, values["seq_len"].min(), values["seq_len"].max(), float(first.min()) / 2.5)
        shares = _draw_models(ax, facet, palette)
        share_shown |= any(t.startswith("n²") for t in shares.values())
        failed = (mark_failed(ax, facet.failed, None, _row_color(palette)) + _hollow(ax, facet, "time_ms", palette)
                  + _model_handles(any(t.startswith("n²") for t in shares.values())))
        set_log2_ticks(ax, pd.concat([values["seq_len"], facet.failed["seq_len"]]))
        ax.set_xlabel("sequence length n (tokens)")
        ax.set_ylabel("time per call, median (ms; fastest repeat)")
        tidy_log_axis(ax)
        ax.set_title(f"{facet.title}\n{facet.slice_text}")
        _legend(ax, facet, palette, lambda line: _with_share(f"{line.label}, {_mask_text(line.causal)}: "
                + (line.fit.label() if line.fit else "no fit"), line, shares), failed)
    suptitle(g.figure, "Time vs n, log-log; legend: fitted exponent b with 95% CI (larger sizes)"
             + (" and the cost model's n² share" if share_shown else "") + "; band: p20–p80")
    return Made(name, title,
                "Each line is one back end with (dashed) or without (solid) a causal mask; on log-log axes a "
                "slope of 2 (the grey dash-dot guide) is quadratic growth, and the legend gives each line's "
                "fitted slope b with its 95% interval over the larger sizes."
                + (" The thin line is the cost model fixed + linear·n + quadratic·n² fitted to the no-mask line, the "
                   "dash-dot-dot line its n² term alone: where they meet, the n² work is the whole cost, and the "
                   "legend's share says how much of the time it is at the largest n (the compute claim judges by it)."
                   if share_shown else
                   f" No line was measured at the {MIN_MODEL_SIZES} sizes the cost model fixed + linear·n + "
                   "quadratic·n² needs, or none follows it, so no model or n² share is drawn.")
                + (HOLLOW_TEXT if unsure_mask(pd.concat([f.slice_rows for f in facets])).any() else ""),
                save(g.figure, ctx, name), [f"{f.title}: {f.slice_text}" for f in facets] + facet_notes(facets))


def _predicted(ax, data: pd.DataFrame, **kw) -> None:
    """The analytic memory prediction of each line, where the row carries one."""
    data = data[data["predicted_mem_bytes"] > 0]
    if not data.empty:
        sns.lineplot(data=data, x="seq_len", y="predicted_mem_bytes", ax=ax, legend=False, **kw)


def memory_vs_seq_len(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig2_memory_vs_seq_len", "Peak memory vs sequence length"
    metric = memory_metric(rows)
    facets = cost_facets(rows, metric)
    if not facets:
        return Skipped(name, title, "no back end has a positive peak memory at two or more seq_len values",
                       EXPERIMENT)
    g, palette, placed = _grid(facets, metric)
    # The analytic prediction, thin and dotted, so a reader sees where measurement and model part.
    for panel, ax in g.axes_dict.items():
        part = g.data[g.data["panel"] == panel]
        _predicted(ax, part, hue="label", palette=palette, style="mask", style_order=MASKS,
                   dashes={m: (1, 1.5) for m in MASKS}, estimator="median", errorbar=None, linewidth=0.9, alpha=0.8)
    g.set(yscale="log")
    notes = []
    for facet in facets:
        ax = placed[(facet.precision, facet.device_label)]

        def label(line):
            if not line.fit:
                return f"{line.label}, {_mask_text(line.causal)}: no fit"
            ratio = line.fit.ratio(4096, 131072)[0]
            return f"{line.label}, {_mask_text(line.causal)}: {line.fit.label()}, 4K→128K ×{ratio:,.0f}"

        pred = facet.slice_rows[(facet.slice_rows["status"] == "ok") & (facet.slice_rows["predicted_mem_bytes"] > 0)]
        values = pd.concat([l.points for l in facet.lines])
        first = values[values["seq_len"] == values["seq_len"].min()]["value"]
        guide_lines(ax, values["seq_len"].min(), values["seq_len"].max(), float(first.min()) / 2.5)
        shares = _draw_models(ax, facet, palette)
        handles = mark_failed(ax, facet.failed, "predicted_mem_bytes", _row_color(palette)) + _model_handles(any(t.startswith("n²") for t in shares.values()))
        ceiling = facet.device_mem_bytes
        top = max(values["value"].max(), facet.failed["predicted_mem_bytes"].max() if len(facet.failed) else 0)
        if np.isfinite(ceiling) and ceiling > 0 and (len(facet.failed) or ceiling <= 1000 * top):
            ax.axhline(ceiling, color="black", linewidth=1.2, label=f"device memory {ceiling / 2**30:.0f} GiB")
        elif np.isfinite(ceiling) and ceiling > 0:
            notes.append(f"{facet.title}: device memory {ceiling / 2**30:.0f} GiB is >1000x above the largest "
                         "point and not drawn")
        if not pred.empty:
            handles.append(Line2D([], [], color="0.3", linestyle=":", label="analytic prediction (dotted)"))
        bytes_axis(ax)
        set_log2_ticks(ax, pd.concat([values["seq_len"], facet.failed["seq_len"]]))
        ax.set_xlabel("sequence length n (tokens)")
        ax.set_ylabel("peak allocated beyond inputs (bytes)" if metric == "peak_alloc_bytes"
                      else "peak memory (RSS) beyond inputs (bytes)")
        ax.set_title(f"{facet.title}\n{facet.slice_text}")
        _legend(ax, facet, palette, lambda line: _with_share(label(line), line, shares), handles)
    suptitle(g.figure, "Peak memory vs n, log-log; legend: fitted exponent b (95% CI) and the 4K→128K growth it "
             "implies")
    return Made(name, title,
                "Solid/dashed lines are the measured peak memory beyond the inputs (no mask/causal): "
                + ("the exact peak of bytes allocated through torch's allocator during the call, kernel buffers "
                   "included (results.csv's peak_mem_bytes keeps the process's RSS view)" if metric == "peak_alloc_bytes"
                   else "the process's peak RSS") + "; dotted lines the "
                "analytic prediction; the legend's b is the fitted slope over the larger sizes and ×R the growth "
                "from 4K to 128K tokens it extrapolates (the chapter's 1024x is b = 2); the black line is the "
                "device's memory and X / v mark points that ran out of memory or were skipped by the budget guard. "
                "The thin line is the cost model fixed + linear·n + quadratic·n² fitted to each no-mask line and "
                "the dash-dot-dot line its n² term alone (the memory claims judge by its share).",
                save(g.figure, ctx, name), [f"{f.title}: {f.slice_text}" for f in facets] + notes + facet_notes(facets))


def throughput_vs_seq_len(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig3_throughput_vs_seq_len", "Throughput vs sequence length"
    facets = cost_facets(rows, "tflops")
    if not facets:
        return Skipped(name, title, "no TFLOP/s at two or more seq_len values", EXPERIMENT)
    g, palette, placed = _grid(facets, "tflops")
    for facet in facets:
        ax = placed[(facet.precision, facet.device_label)]
        values = pd.concat([l.points for l in facet.lines])
        peak = facet.device_peak_tflops
        shown = list(values["value"])
        if np.isfinite(peak) and peak > 0:
            ax.axhline(peak, color="black", linewidth=1.2, label=f"measured matmul peak {peak:.3g} TFLOP/s")
            shown.append(peak)
            above = int((values["value"] > peak).sum())
            if above:  # never left to read as more than 100% of the hardware: say why (each row's `note` too)
                ax.text(0.02, 0.02, f"{above} point(s) above the measured peak: the peak was measured in a slower "
                        "moment (load) or the kernel beats the plain GEMM; see the rows' note",
                        transform=ax.transAxes, fontsize=6.5, color="0.3", va="bottom", wrap=True)
        log_if_spans(ax, shown, "y", decades=1.0)
        if ax.get_yscale() != "log":
            ax.set_ylim(bottom=0)
        set_log2_ticks(ax, values["seq_len"])
        ax.set_xlabel("sequence length n (tokens)")
        ax.set_ylabel("achieved throughput (TFLOP/s)")
        tidy_log_axis(ax)
        ax.set_title(f"{facet.title}\n{facet.slice_text}")
        _legend(ax, facet, palette, lambda line: f"{line.label}, {_mask_text(line.causal)}",
                _hollow(ax, facet, "tflops", palette))
    suptitle(g.figure, "Achieved TFLOP/s (useful attention FLOPs / median time) vs the device's measured matmul peak")
    return Made(name, title,
                "Each line is the attention FLOPs (only unmasked scores counted) divided by the median time; the "
                "black line is the same device's measured matmul peak, so the gap is the fraction of the hardware "
                "a back end leaves unused." + (HOLLOW_TEXT if unsure_mask(pd.concat([f.slice_rows for f in facets])).any()
                                               else ""),
                save(g.figure, ctx, name), [f"{f.title}: {f.slice_text}" for f in facets] + facet_notes(facets))
