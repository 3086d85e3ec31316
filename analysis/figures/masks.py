"""Figures 11 and 12: what masks save per back end, and grouped-query attention against kv_heads."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from analysis.figures.common import Context, Made, Skipped, bytes_formatter, save, set_log2_ticks, suptitle
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
    for i, device in enumerate(devices):
        part = study[study["device_label"] == device]
        markers = _markers(part["mask"].unique())
        for j, (metric, ylabel) in enumerate((("time_per_seq_ms", "time per sequence, median (ms)"),
                                               ("alloc_per_seq_bytes", "peak allocated per sequence"))):
            ax = axes[i][j]
            for label, group in part.groupby("label"):
                for _, r in group.iterrows():
                    ax.scatter(r["mask_density"], r[metric], color=palette[label], marker=markers[r["mask"]], s=30,
                               zorder=3)
            if metric == "time_per_seq_ms" and not ideal.empty:  # linear axes: the ideal is a straight line
                for variant, line in ideal[ideal["device_label"] == device].groupby("variant"):
                    color = palette.get(variant, backend_palette([variant])[variant])
                    ax.plot(line["mask_density"], line["ideal_ms"], color=color, linestyle=":", linewidth=1.2)
                ax.set_ylim(bottom=0)
            else:
                ax.set_yscale("log")  # memory spans orders of magnitude between back ends
                ax.yaxis.set_major_formatter(bytes_formatter())
            ax.set_xlim(0, 1.05)
            ax.set_xlabel("mask density (fraction of query-key pairs left)")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{device}, n={number_text(float(part['seq_len'].max()))}")
        handles = [plt.Line2D([], [], color=palette[lab], linewidth=2, label=lab) for lab in sorted(part["label"].unique())]
        handles += [plt.Line2D([], [], color="0.3", marker=markers[m], linestyle="", label=m)
                    for m in sorted(markers, key=lambda m: -part[part["mask"] == m]["mask_density"].max())]
        handles.append(plt.Line2D([], [], color="0.3", linestyle=":", label="ideal: time ∝ density"))
        # outside the panels: the points fill every corner of both
        axes[i][1].legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7)
    suptitle(fig, "Time and memory against the mask density, at the largest n per back end")
    return Made(name, title,
                "Each point is one mask at the largest n: its density (the share of query-key pairs it leaves) "
                "against the time and memory per sequence. Dotted: the back end's unmasked time scaled by the density, "
                "what a back end that skips exactly the hidden work would reach. Points near their dotted line turn "
                "the mask into saved time; a flat row of points (naive) computes every score anyway.",
                save(fig, ctx, name))


def gqa_vs_kv_heads(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig12_gqa", "Grouped-query attention"
    study = gqa_study(rows)
    if study.empty:
        return Skipped(name, title, "no rows that vary kv_heads at a fixed number of heads", "gqa")
    study = study[study["seq_len"] == study.groupby("backend")["seq_len"].transform("max")]
    palette = backend_palette(study["label"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.9))
    for (label, mode), group in study.groupby(["label", "mode"]):
        by_kv = group.groupby("kv_heads")["time_ms"].median().sort_index()
        axes[0].plot(by_kv.index, by_kv.values, color=palette[label], marker="o" if mode == "fwd" else "s",
                     linestyle="-" if mode == "fwd" else "--", label=f"{label} {mode}")
    kv = study.groupby("kv_heads")["kv_bytes"].median().sort_index()
    axes[1].plot(kv.index, kv.values, color="0.2", marker="o", label="K and V (what a decode step reads)")
    for ax in axes:
        set_log2_ticks(ax, study["kv_heads"].unique(), text=lambda v: str(int(v)))
        ax.set_xlabel(f"K/V heads (query heads: {number_text(float(study['heads'].iloc[0]))})")
        ax.legend(loc="best", fontsize=7)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("time per call, median (ms)")
    axes[1].set_ylabel("bytes")
    axes[1].yaxis.set_major_formatter(bytes_formatter())
    suptitle(fig, f"Fewer K/V heads at n={number_text(float(study['seq_len'].max()))}: time per back end, and the K/V bytes")
    return Made(name, title,
                "Left: time per call against the number of K/V heads (solid forward, dashed forward+backward); the "
                "FLOPs are the same at every kv_heads, so a flat line is the expectation for prefill. Right: the bytes "
                "of K and V, which shrink by heads / kv_heads: what grouped-query attention saves in a KV cache.",
                save(fig, ctx, name))
