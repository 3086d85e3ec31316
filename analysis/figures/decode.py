"""Figures 13-15: the roofline per device, decode time against the cache, generation with and without it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D

from analysis.decode import ceilings, context_series, decode_rows, generate_rows, roofline_rows
from analysis.figures.common import Context, Made, Skipped, linestyle_of, plt, save, suptitle
from analysis.figures.style import backend_palette

PHASE_MARKERS = {"prefill": "o", "decode": "s", "generate": "^"}
KV_DASHES = ("", (4, 2), (1, 1.5), (4, 1.5, 1, 1.5))  # kv_heads, most first (seaborn's dashes)
CACHE_DASHES = {"cache": "", "no cache": (4, 2), "FP8 cache": (1, 1.5)}
CACHE_MARKERS = {"cache": "o", "no cache": "s", "FP8 cache": "o"}


def roofline(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig13_roofline", "The roofline"
    points = roofline_rows(rows)
    # Only a report with decode steps or generation rows needs it; the default study has neither.
    if points.empty or not points["phase"].isin(["decode", "generate"]).any():
        return Skipped(name, title, "no decode or generation rows with flops and bytes_moved", "decode")
    devices = sorted(points["device_label"].unique())
    palette = backend_palette(points["backend"])
    fig, axes = plt.subplots(1, len(devices), figsize=(6.2 * len(devices), 4.6), squeeze=False)
    for ax, device in zip(axes[0], devices):
        part = points[points["device_label"] == device]
        sns.scatterplot(data=part, x="intensity", y="achieved_tflops", hue="backend", palette=palette, style="phase",
                        markers=PHASE_MARKERS, s=18, alpha=0.75, zorder=3, legend=False, ax=ax)
        peak_tflops, peak_gbps = ceilings(part)
        if peak_tflops and peak_gbps:
            x = np.logspace(np.log10(part["intensity"].min() / 2), np.log10(part["intensity"].max() * 2), 200)
            ax.plot(x, np.minimum(peak_tflops, x * peak_gbps / 1e3), color="0.15", linewidth=1.5)
            ridge = peak_tflops * 1e3 / peak_gbps
            ax.axvline(ridge, color="0.5", linestyle=":", linewidth=1)
            ax.annotate(f"ridge {ridge:.3g} FLOPs/B\n{peak_gbps:.3g} GB/s, {peak_tflops:.3g} TFLOP/s",
                        (ridge, peak_tflops), textcoords="offset points", xytext=(6, -24), fontsize=7)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOPs / byte moved)")
        ax.set_ylabel("achieved TFLOP/s")
        ax.set_title(device)
        handles = [Line2D([], [], color=palette[b], marker="o", linestyle="", label=b) for b in sorted(part["backend"].unique())]
        handles += [Line2D([], [], color="0.3", marker=PHASE_MARKERS[p], linestyle="", label=p)
                    for p in PHASE_MARKERS if p in set(part["phase"])]
        handles.append(Line2D([], [], color="0.15", label="min(matmul peak, intensity x copy bandwidth)"))
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7)  # beside the points
    suptitle(fig, "Every row on its device's roofline: prefill, decode steps and generation loops")
    return Made(name, title,
                "x: FLOPs per byte the call must move (flops / bytes_moved); y: achieved TFLOP/s. The solid line is "
                "the measured ceiling: the copy bandwidth times the intensity left of the ridge (dotted), the matmul "
                "peak right of it. Decode steps (squares) sit near 1 FLOP/byte, far left of the ridge: their speed is "
                "set by bandwidth, so the right comparison for them is gbps against device_peak_gbps, not tflops.",
                save(fig, ctx, name))


def decode_time(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig14_decode", "Decode time per step against the cache"
    dec = decode_rows(rows)
    if dec.empty:
        return Skipped(name, title, "no decode steps (q_len < seq_len, a few queries)", "decode")
    panels = sorted({(q, b) for q, b in zip(dec["q_len"], dec["batch"])})
    palette = backend_palette(dec["backend"])
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 3.9), squeeze=False, sharey=True)
    kv_values = sorted(dec["kv_heads"].unique(), reverse=True)
    dashes = {kv: KV_DASHES[i % len(KV_DASHES)] for i, kv in enumerate(kv_values)}
    for ax, (q_len, batch) in zip(axes[0], panels):
        part = dec[(dec["q_len"] == q_len) & (dec["batch"] == batch)]
        fp8 = part["precision"].astype(str).str.startswith("fp8")  # an FP8 K/V cache: its own line, x markers
        part = part.assign(series=[f"kv_heads={kv:g}" + (", FP8" if f else "") for kv, f in zip(part["kv_heads"], fp8)])
        kinds = part[["series", "kv_heads"]].drop_duplicates().assign(fp8=lambda d: d["series"].str.endswith("FP8"))
        sns.lineplot(data=part, x="seq_len", y="ms_per_step", hue="backend", palette=palette, style="series",
                     dashes={r.series: dashes[r.kv_heads] for r in kinds.itertuples()},
                     markers={r.series: "x" if r.fp8 else "o" for r in kinds.itertuples()},
                     estimator="median", errorbar=None, markersize=4, legend=False, ax=ax)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("cache length (seq_len, tokens)")
        ax.set_title(f"q_len={q_len:g}, batch={batch:g}")
        ax.set_ylabel("time per step, median (ms)" if ax is axes[0][0] else "")
    handles = [Line2D([], [], color=palette[b], label=b) for b in sorted(dec["backend"].unique())]
    handles += [Line2D([], [], color="0.3", linestyle=linestyle_of(dashes[kv]), label=f"kv_heads={kv:g}")
                for kv in kv_values]
    if dec["precision"].astype(str).str.startswith("fp8").any():
        handles.append(Line2D([], [], color="0.3", marker="x", label="FP8 K/V cache"))
    axes[0][-1].legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7)  # beside the lines
    suptitle(fig, f"One decode step against the cache length (heads={dec['heads'].max():g}), per back end and kv_heads")
    return Made(name, title,
                "Each line is one back end (colour) at one number of K/V heads (dash). A step reads the whole cache, "
                "so its time grows with the cache length; fewer K/V heads shrink the cache, and a back end that reads "
                "K/V once per K/V head gets faster by about heads / kv_heads.",
                save(fig, ctx, name))


def generation(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig15_generation", "Generation with and without the KV-cache"
    gen = generate_rows(rows)
    if gen.empty:
        return Skipped(name, title, "no scope=generate rows", "decode")
    palette = backend_palette(gen["backend"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.0))
    series = context_series(gen)
    # a lone prompt (the T grid's) is no line against the context
    series = series[series.groupby(["backend", "precision", "kv_cache", "batch"])["context"].transform("size") >= 2]
    if not series.empty:
        fp8 = series["precision"].astype(str).str.startswith("fp8")  # an FP8 K/V cache: its own line, dotted
        series = series.assign(way=np.where(fp8, "FP8 cache", np.where(series["kv_cache"].astype(bool), "cache",
                                                                         "no cache")))
        sns.lineplot(data=series, x="context", y="ms_per_token", hue="backend", palette=palette, style="way",
                     dashes=CACHE_DASHES, markers=CACHE_MARKERS, units="batch", estimator=None, ax=axes[0])
    axes[0].set_xscale("log", base=2)
    axes[0].set_yscale("log")
    axes[0].set_xlabel("context (prompt + half the new tokens)")
    axes[0].set_ylabel("time per new token, median (ms)")
    if axes[0].get_legend() is not None:  # one prompt per back end (scope=generate alone) draws no line here
        sns.move_legend(axes[0], "upper left", fontsize=7, title=None)
    # Cumulative time against T at one prompt: the prompt length with the most new_tokens values.
    per_prompt = gen.groupby("seq_len")["new_tokens"].nunique()
    prompt = per_prompt.idxmax()
    part = gen[(gen["seq_len"] == prompt) & ~gen["precision"].astype(str).str.startswith("fp8")]
    part = part.assign(way=np.where(part["kv_cache"].astype(bool), "cache", "no cache"), time_s=part["time_ms"] / 1e3)
    sns.lineplot(data=part, x="new_tokens", y="time_s", hue="backend", palette=palette, style="way",
                 dashes=CACHE_DASHES, markers=CACHE_MARKERS, estimator="median", errorbar=None, ax=axes[1])
    axes[1].set_xlabel("new tokens T")
    axes[1].set_ylabel("cumulative generation time (s)")
    axes[1].set_title(f"prompt of {prompt:g} tokens")
    sns.move_legend(axes[1], "upper left", fontsize=7, title=None)
    suptitle(fig, "What the KV-cache saves: cost per token against the context, and total time against T")
    return Made(name, title,
                "Left: time per new token against the context on log-log axes; a slope of 1 is linear (the cache: one "
                "q_len = 1 step against the cache), 2 is quadratic (no cache: every step recomputes the prefix's "
                "attention). Right: total time to generate T tokens after one prompt: a straight line with the cache, "
                "a curve bending upward without.",
                save(fig, ctx, name))
