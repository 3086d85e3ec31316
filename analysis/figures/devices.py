"""Figure 9: each device's speed relative to the baseline device, per back end, vs seq_len."""

from __future__ import annotations

import pandas as pd

from analysis.compare import device_speedups, pick_baseline
from analysis.figures.common import (
    Context, Made, Skipped, legend_right, line_grid, log_if_spans, mask_handle, save, set_log2_ticks, suptitle, tidy_log_axis,
)
from analysis.figures.style import device_palette
from analysis.slices import fix_axes

DEVICES_FIXED = ("precision", "scope", "mode", "batch", "heads", "head_dim", "scale", "causal", "input_std")


def devices_compared(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig9_devices_compared", "Devices compared"
    experiment = "cross_gpu, run once per device and merged"
    if rows[rows["status"] == "ok"]["device_label"].nunique() < 2:
        return Skipped(name, title, "rows come from a single device", experiment)
    baseline, note = pick_baseline(rows, ctx.baseline_device)
    speedups = device_speedups(rows, baseline)
    if speedups.empty:
        return Skipped(name, title, f"no point was measured both on {baseline} and on another device", experiment)
    chosen = fix_axes(speedups.assign(status="ok"), DEVICES_FIXED, ("seq_len", "label", "device_label"))
    data = chosen.rows
    labels = sorted(data["label"].unique())
    palette = device_palette(data["device_label"])
    # One panel per back end on one shared speed-up axis, one line per device: the median over seeds.
    g = line_grid(data, x="seq_len", y="speedup", hue="device_label", palette=palette, col="label",
                  col_order=labels, share_y=True, panel_width=4.6, panel_height=3.6)
    log_if_spans(g.axes_dict[labels[0]], list(data["speedup"]) + [1.0], "y", decades=1.0)  # shared: all panels
    for label in labels:
        ax = g.axes_dict[label]
        part = data[data["label"] == label]
        ax.axhline(1.0, color="black", linewidth=1.0, linestyle="--", label=f"baseline: {baseline}")
        set_log2_ticks(ax, part["seq_len"])
        ax.set_xlabel("sequence length n (tokens)")
        ax.set_ylabel(f"speed relative to {baseline} (×, >1 = faster)")
        ax.set_title(label)
        tidy_log_axis(ax)
        devices = [mask_handle(palette[d], "no mask", d) for d in sorted(part["device_label"].unique())]
        legend_right(ax, lead_handles=devices)
    text = chosen.describe(always=("precision", "head_dim", "causal"))
    suptitle(g.figure, f"Time on {baseline} / time on each device, same points — {text}")
    notes = [f"{text}"] + ([note] if note else [])
    return Made(name, title,
                f"Each line is one device's speed relative to {baseline} (its time divided into the baseline's time "
                "on the identical point), so 10 means ten times faster; the dashed line is the baseline itself.",
                save(g.figure, ctx, name), notes)
