"""Figures 11 and 12: what masks save per back end, and grouped-query attention against kv_heads."""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D

from analysis.figures.common import Context, Made, Skipped, bytes_axis, plt, save, set_log2_ticks, suptitle
from analysis.figures.style import backend_palette
from analysis.masks import gqa_study, ideal_line, mask_study
from analysis.slices import number_text

MASK_MARKERS = {"none": "o", "causal": "s", "padding": "D", "documents": "^"}
WINDOW_MARKERS = ("v", "<", ">", "p")  # windows by size, smallest first


def _window_size(mask: str) -> tuple[float, str]:
    """'window 256' -> 256; a pair 'window [63, 0]' by the keys it spans (64); an unbounded side sorts last."""
    text = mask.split(" + ")[0].removeprefix("window ").strip()
    if text.startswith("["):
        left, right = (int(side) for side in text.strip("[]").split(","))
        return (float("inf") if -1 in (left, right) else float(left + right + 1), text)
    return (float(text), text)


def _markers(masks) -> dict[str, str]:
    windows = sorted((m for m in masks if m.startswith("window")), key=_window_size)
    markers = {m: WINDOW_MARKERS[i % len(WINDOW_MARKERS)] for i, m in enumerate(windows)}
    return {m: MASK_MARKERS.get(m, markers.get(m, "X")) for m in masks}


def masks_vs_density(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig11_masks", "What a mask saves"
    study = mask_study(rows)
    if study.empty:
        return Skipped(name, title, "no rows with several masks (none, causal, window, padding, documents)", "masks")
    devices = sorted(study["device_label"].unique())
    palette = backend_palette(study["label"])
    ideal = ideal_line(study)
    fig, axes = plt.subplots(len(devices), 2, figsize=(13, 3.9 * len(devices)), squeeze=False)
    notes = []
    for i, device in enumerate(devices):
        part = study[study["device_label"] == device]
        markers = _markers(part["mask"].unique())
        for j, (metric, ylabel) in enumerate((("time_per_seq_ms", "time per sequence, median (ms)"),
                                               ("alloc_per_seq_bytes", "peak allocated per sequence"))):
            ax = axes[i][j]
            measured = part[np.isfinite(part[metric]) & (part[metric] > 0)]
            ax.set_xlim(0, 1.05)
            ax.set_xlabel("mask density (fraction of query-key pairs left)")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{device}, n={number_text(float(part['seq_len'].max()))}")
            if measured.empty:  # a column the sweep did not measure (metrics without memory): said, not drawn
                column = "peak_alloc_bytes" if metric == "alloc_per_seq_bytes" else "time_ms"
                ax.text(0.5, 0.5, f"{column} not measured", transform=ax.transAxes, ha="center", va="center",
                        color="0.35")
                notes.append(f"{device}: {column} not measured (the sweep's metrics left it out)")
                continue
            sns.scatterplot(data=measured, x="mask_density", y=metric, hue="label", palette=palette, style="mask",
                            markers=markers, s=30, legend=False, zorder=3, ax=ax)
            if metric == "time_per_seq_ms" and not ideal.empty:  # linear axes: the ideal is a straight line
                line = ideal[ideal["device_label"] == device]
                sns.lineplot(data=line, x="mask_density", y="ideal_ms", hue="variant",
                             palette={v: palette.get(v, backend_palette([v])[v]) for v in line["variant"].unique()},
                             linestyle=":", linewidth=1.2, estimator=None, legend=False, ax=ax)
                ax.set_ylim(bottom=0)
            elif metric == "alloc_per_seq_bytes":
                ax.set_yscale("log")  # memory spans orders of magnitude between back ends
                bytes_axis(ax)
            ax.set_xlabel("mask density (fraction of query-key pairs left)")  # seaborn named them after the columns
            ax.set_ylabel(ylabel)
        handles = [Line2D([], [], color=palette[lab], linewidth=2, label=lab) for lab in sorted(part["label"].unique())]
        handles += [Line2D([], [], color="0.3", marker=markers[m], linestyle="", label=m)
                    for m in sorted(markers, key=lambda m: -part[part["mask"] == m]["mask_density"].max())]
        handles.append(Line2D([], [], color="0.3", linestyle=":", label="ideal: time ∝ density"))
        # outside the panels: the points fill every corner of both
        axes[i][1].legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7)
    suptitle(fig, "Time and memory against the mask density, at the largest n per back end")
    return Made(name, title,
                "Each point is one mask at the largest n: its density (the share of query-key pairs it leaves) "
                "against the time and memory per sequence. Dotted: the back end's unmasked time scaled by the density, "
                "what a back end that skips exactly the hidden work would reach. Points near their dotted line turn "
                "the mask into saved time; a flat row of points (naive) computes every score anyway.",
                save(fig, ctx, name), notes)


def gqa_vs_kv_heads(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig12_gqa", "Grouped-query attention"
    study = gqa_study(rows)
    if study.empty:
        return Skipped(name, title, "no rows that vary kv_heads at a fixed number of heads", "gqa")
    study = study[study["seq_len"] == study.groupby("backend")["seq_len"].transform("max")]
    palette = backend_palette(study["label"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.9))
    sns.lineplot(data=study, x="kv_heads", y="time_ms", hue="label", palette=palette, style="mode", markers=True,
                 estimator="median", errorbar=None, ax=axes[0])
    kv = study.groupby("kv_heads")["kv_bytes"].median().reset_index()
    sns.lineplot(data=kv, x="kv_heads", y="kv_bytes", color="0.2", marker="o", label="K and V (what a decode step reads)",
                 ax=axes[1])
    for ax in axes:
        set_log2_ticks(ax, study["kv_heads"].unique(), text=lambda v: str(int(v)))
        ax.set_xlabel(f"K/V heads (query heads: {number_text(float(study['heads'].iloc[0]))})")
        sns.move_legend(ax, "upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7, title=None)  # beside the data
    axes[0].set_yscale("log")
    axes[0].set_ylabel("time per call, median (ms)")
    axes[1].set_ylabel("bytes")
    bytes_axis(axes[1])
    suptitle(fig, f"Fewer K/V heads at n={number_text(float(study['seq_len'].max()))}: time per back end, and the K/V bytes")
    return Made(name, title,
                "Left: time per call against the number of K/V heads (solid forward, dashed forward+backward); the "
                "FLOPs are the same at every kv_heads, so a flat line is the expectation for prefill. Right: the bytes "
                "of K and V, which shrink by heads / kv_heads: what grouped-query attention saves in a KV cache.",
                save(fig, ctx, name))
