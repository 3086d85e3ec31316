"""Figures 16 and 17: compiled back ends against their eager selves (time and memory), and what compiling costs."""

from __future__ import annotations

import pandas as pd
from matplotlib.lines import Line2D

from analysis.compiled import compiled_study, mask_order, mode_order, points
from analysis.cost import memory_metric, variant_order
from analysis.figures.common import (
    Context, Made, Skipped, bytes_axis, guide_lines, legend_right, line_grid, save, set_log2_ticks, suptitle,
    tidy_log_axis,
)
from analysis.figures.style import backend_palette

EXPERIMENT = "compiled"
# Compiled code is drawn dashed with crosses, eager solid with circles; a compiled variant's colour is a
# darker shade of its back end's (analysis.figures.style).
CODE_DASHES = {"eager": "", "compiled": (4, 2)}
CODE_MARKERS = {"eager": "o", "compiled": "X"}
MASK_MARKERS = {"no mask": "o", "causal": "s"}  # windows: "^"
MASK_DASHES = {"no mask": "", "causal": (4, 2)}  # windows: dotted


def _code(compiled: pd.Series) -> pd.Series:
    return compiled.map(lambda c: "compiled" if c else "eager")


def _mask_order(masks) -> list[str]:
    return sorted(set(masks), key=mask_order)


def _variant_order(study: pd.DataFrame) -> list[str]:
    """Registry order, each compiled variant right after its back end."""
    return sorted(study["variant"].unique(), key=variant_order)


def _at_least_a_decade(ax) -> None:
    """Widen a log y axis to span a decade around its data, so it has labelled ticks to read by."""
    low, high = ax.get_ylim()
    if low > 0 and high / low < 10:
        centre = (low * high) ** 0.5
        ax.set_ylim(centre / 3.5, centre * 3.5)


def _legend_handles(palette: dict[str, str], compiled: dict[str, bool]) -> list:
    return [Line2D([], [], color=palette[v], marker=CODE_MARKERS["compiled" if c else "eager"], markersize=4.5,
                   linestyle=(0, CODE_DASHES["compiled"]) if c else "-", linewidth=1.6, label=v)
            for v, c in compiled.items()]


def _not_run(study: pd.DataFrame, panel: str, mode: str, mask: str) -> str:
    """'flex: unsupported' for variants of the study with rows but no ok row in this cell."""
    cell = study[(study["panel"] == panel) & (study["mode"] == mode) & (study["mask"] == mask)]
    failed = []
    for variant, group in cell.groupby("variant"):
        if not (group["status"] == "ok").any():
            failed.append(f"{variant}: {'/'.join(sorted(group['status'].unique()))}")
    return "not run: " + ", ".join(failed) if failed else ""


def compiled_time_memory(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig16_compiled", "Compiled back ends: time and memory"
    study = compiled_study(rows)
    if study.empty:
        return Skipped(name, title, "no rows of a compiled back end (compile=true, or flex)", EXPERIMENT)
    metric = memory_metric(study)
    frames = []
    for column, what in (("time_ms", "time per call (ms)"), (metric, "peak memory")):
        part = points(study, column)
        frames.append(part.assign(metric=what))
    data = pd.concat(frames, ignore_index=True)
    if data.empty:
        return Skipped(name, title, "no ok row of the compiled study", EXPERIMENT)
    data["code"] = _code(data["compiled"])
    panels = sorted(data["panel"].unique())
    prefix = (lambda p: f"{p} · ") if len(panels) > 1 else (lambda p: "")
    data["row"] = [f"{prefix(p)}{m} · {w}" for p, m, w in zip(data["panel"], data["mode"], data["metric"])]
    row_order = [f"{prefix(p)}{m} · {w}" for p in panels for m in sorted(set(data["mode"]), key=mode_order)
                 for w in ("time per call (ms)", "peak memory") if f"{prefix(p)}{m} · {w}" in set(data["row"])]
    masks = _mask_order(data["mask"])
    variants = _variant_order(study)
    palette = backend_palette(variants)
    g = line_grid(data, x="seq_len", y="value", hue="variant", hue_order=[v for v in variants if v in set(data["variant"])],
                  palette=palette, style="code", style_order=[c for c in ("eager", "compiled") if c in set(data["code"])],
                  dashes=CODE_DASHES, markers=CODE_MARKERS, row="row", row_order=row_order, col="mask", col_order=masks,
                  errorbar=None, panel_width=4.4, panel_height=3.0)
    for (row, mask), ax in g.axes_dict.items():
        cell = data[(data["row"] == row) & (data["mask"] == mask)]
        if cell.empty:
            continue
        ax.set_yscale("log")
        memory = row.endswith("peak memory")
        if memory:  # the verdict's figure: slopes 1 and 2 to read the exponents against
            guide_lines(ax, cell["seq_len"].min(), cell["seq_len"].max(),
                        float(cell.loc[cell["seq_len"] == cell["seq_len"].min(), "value"].min()) / 2.5)
        _at_least_a_decade(ax)
        set_log2_ticks(ax, cell["seq_len"])
        if memory:
            bytes_axis(ax)
        else:
            tidy_log_axis(ax)
        ax.set_ylabel(("peak allocated (bytes)" if metric == "peak_alloc_bytes" else "peak RSS (bytes)") if memory
                      else "time per call (ms)")
        ax.set_xlabel("sequence length n (tokens)")
        ax.set_title(f"{row.rsplit(' · ', 1)[0]}, {mask}", fontsize=8.5)
        first = cell.iloc[0]
        note = _not_run(study, first["panel"], first["mode"], mask)
        if note:
            ax.text(0.02, 0.98, note, transform=ax.transAxes, fontsize=6.5, color="0.3", va="top")
    compiled = {v: bool(study.loc[study["variant"] == v, "compiled"].any()) for v in variants}
    guides = [Line2D([], [], color="0.45", linestyle=(0, (6, 3)), linewidth=1.0, label="guide ∝ n (memory)"),
              Line2D([], [], color="0.45", linestyle="-.", linewidth=1.0, label="guide ∝ n² (memory)")]
    legend_right(g.axes.flat[len(masks) - 1], guides, lead_handles=_legend_handles(palette, compiled))
    slices = sorted({f"{p}: {s}" for p, s in zip(study["panel"], study["slice"])})
    suptitle(g.figure, "Compiled and eager back ends: time per call and peak memory against n (log-log), per mode "
             "and mask")
    return Made(name, title,
                "One line per variant: solid circles eager code, dashed crosses compiled code (naive+compile and "
                "chunked+compile in a darker shade of their back end's colour; flex always compiles). Rows: time "
                "per call (fastest repeat) and peak memory, per mode; columns: the mask. On log-log axes a slope of 2 "
                "is quadratic: a naive+compile memory line parallel to naive's still materializes the n×n matrix, one "
                "parallel to chunked's was fused. Compile time is not in these times (figure 17).",
                save(g.figure, ctx, name), slices)


def compile_cost(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig17_compile_cost", "What compiling costs"
    study = compiled_study(rows)
    ok = study[(study["status"] == "ok")] if not study.empty else study
    paid = ok[ok["recompiled"] & ok["compile_s"].notna() & (ok["compile_s"] > 0)] if not ok.empty else ok
    if paid.empty:
        return Skipped(name, title, "no compiled row that compiled new code (recompiled=true with compile_s)", EXPERIMENT)
    data = paid.assign(value=paid["compile_s"], series=paid["variant"])
    block = ok[ok["block_mask_s"].notna() & (ok["block_mask_s"] > 0)]
    masks = _mask_order(pd.concat([data["mask"], block["mask"]]))
    marker_of = {m: MASK_MARKERS.get(m, "^") for m in masks}
    dashes_of = {m: MASK_DASHES.get(m, (1, 1.5)) for m in masks}
    panels = sorted(data["panel"].unique())
    data["cell"] = [f"{p}, {m}" if len(panels) > 1 else m for p, m in zip(data["panel"], data["mode"])]
    order = [f"{p}, {m}" if len(panels) > 1 else m for p in panels for m in sorted(set(data["mode"]), key=mode_order)]
    order = [c for c in order if c in set(data["cell"])]
    variants = _variant_order(study)
    palette = backend_palette(variants)
    g = line_grid(data, x="seq_len", y="value", hue="series", hue_order=[v for v in variants if v in set(data["series"])],
                  palette=palette, style="mask", style_order=[m for m in masks if m in set(data["mask"])],
                  markers=marker_of, dashes=dashes_of, col="cell", col_order=order, col_wrap=2, errorbar=None,
                  panel_width=5.6, panel_height=3.6)
    for cell, ax in g.axes_dict.items():
        part = data[data["cell"] == cell]
        panel, mode = part["panel"].iloc[0], part["mode"].iloc[0]
        mine = block[(block["panel"] == panel) & (block["mode"] == mode)]
        for (variant, mask), line in mine.groupby(["variant", "mask"]):
            line = line.groupby("seq_len")["block_mask_s"].median()
            ax.plot(line.index, line.values, color=palette.get(variant, "0.4"), linestyle=":", linewidth=1.2,
                    marker=marker_of.get(mask, "^"), markersize=3.5, markerfacecolor="white", zorder=2)
        ax.set_yscale("log")
        _at_least_a_decade(ax)
        set_log2_ticks(ax, pd.concat([part["seq_len"], mine["seq_len"]]))
        tidy_log_axis(ax)
        ax.set_xlabel("sequence length n (tokens)")
        ax.set_ylabel("seconds")
        ax.set_title(cell)
        handles = [Line2D([], [], color=palette[v], linewidth=1.6, label=f"{v}: first call, compiling")
                   for v in variants if v in set(part["series"])]
        handles += [Line2D([], [], color="0.3", marker=marker_of[m], linestyle=(0, dashes_of[m]) if dashes_of[m] else "-",
                           markersize=4, label=m) for m in masks if m in set(part["mask"]) | set(mine["mask"])]
        if not mine.empty:
            handles.append(Line2D([], [], color=palette.get(mine["variant"].iloc[0], "0.4"), linestyle=":",
                                  marker="o", markerfacecolor="white", markersize=3.5,
                                  label=f"{', '.join(sorted(mine['variant'].unique()))}: block mask build"))
        legend_right(ax, lead_handles=handles)
    skipped = len(ok[ok["compile_s"].notna()]) - len(paid)
    notes = [f"{p}: {s}" for p, s in sorted(set(zip(study["panel"], study["slice"])))]
    if skipped:
        notes.append(f"{skipped} compiled row(s) reused code compiled for an earlier point (recompiled=false) and "
                     "are not compile costs")
    suptitle(g.figure, "The first call of each point, compilation included (only points that compiled new code), "
             "and flex's block-mask build")
    return Made(name, title,
                "Each line is a compiled variant's compile_s: the wall time of a point's first call, compilation "
                "included, timed once apart from the timed calls; only points whose first call compiled new code "
                "(recompiled) are drawn. Dotted, hollow markers: the time flex spends building its block mask for a "
                "point, also outside time_ms. Read against figure 16's time per call: the ratio is how many calls "
                "compiling must save before it pays (the findings' table gives the break-even count).",
                save(g.figure, ctx, name), notes)
