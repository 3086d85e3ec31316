"""Figure 9: each device's speed relative to the baseline device, per back end, vs seq_len."""

from __future__ import annotations

import pandas as pd

from analysis.compare import device_speedups, pick_baseline
from analysis.figures.common import (
    Context, Made, Skipped, log_if_spans, save, set_log2_ticks, subplots, suptitle, tidy_log_axis,
)
from analysis.slices import fix_axes

DEVICE_COLORS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"]
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
    devices = sorted(data["device_label"].unique())
    fig, axes = subplots(1, len(labels), 4.6, 3.6, sharey=True)
    for ax, label in zip(axes[0], labels):
        part = data[data["label"] == label]
        for i, device in enumerate(devices):
            series = part[part["device_label"] == device].groupby("seq_len")["speedup"].median()
            if len(series):
                ax.plot(series.index, series.values, marker="o", markersize=4.5, linewidth=1.6,
                        color=DEVICE_COLORS[i % len(DEVICE_COLORS)], label=device)
        ax.axhline(1.0, color="black", linewidth=1.0, linestyle="--", label=f"baseline: {baseline}")
        set_log2_ticks(ax, part["seq_len"])
        ax.set_xlabel("sequence length n (tokens)")
        ax.set_ylabel(f"speed relative to {baseline} (×, >1 = faster)")
        ax.set_title(label)
        ax.legend(loc="best")
    log_if_spans(axes[0][0], list(data["speedup"]) + [1.0], "y", decades=1.0)
    for ax in axes[0]:
        tidy_log_axis(ax)
    text = chosen.describe(always=("precision", "head_dim", "causal"))
    suptitle(fig, f"Time on {baseline} / time on each device, same points — {text}")
    notes = [f"{text}"] + ([note] if note else [])
    return Made(name, title,
                f"Each line is one device's speed relative to {baseline} (its time divided into the baseline's time "
                "on the identical point), so 10 means ten times faster; the dashed line is the baseline itself.",
                save(fig, ctx, name), notes)
