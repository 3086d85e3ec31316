"""The masks of a sweep as pictures, and time against mask density across them (seaborn's public API).

`mask_label` names a row's mask the way a reader says it: its mask function with its parameters
(`prefix_lm(prefix=256)`), or today's axes (`causal`, `causal window=64`, `pad_frac=0.25`), joined with
`+`. `density_figure` draws each back end's median time against `mask_density` (the share of visible
(query, key) pairs, counted exactly), one marker per mask and a panel per n: a block-sparse back end's time
falls with the density, a materializing one's does not. `maps_figure` draws pictures that
runners/mask_maps.py computes (this package reads CSV files only).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd


def mask_label(row: pd.Series) -> str:
    """`prefix_lm(prefix=256)`, `causal window=64`, `none`: the mask a row measured, as one label."""
    parts = []
    mask = row.get("mask")
    if isinstance(mask, str) and mask not in ("", "none"):
        name = mask.rsplit(":", 1)[-1]
        try:
            options = json.loads(row.get("mask_options") or "{}")
        except (TypeError, ValueError):
            options = {}
        parts.append(f"{name}({', '.join(f'{k}={v}' for k, v in options.items())})" if options else name)
    if str(row.get("causal")).lower() == "true":
        parts.append("causal")
    window, pad, documents = row.get("window"), row.get("pad_frac"), row.get("documents")
    if pd.notna(window) and str(window).strip():
        parts.append(f"window={window}")
    if pd.notna(pad) and float(pad) > 0:
        parts.append(f"pad_frac={pad}")
    if pd.notna(documents) and str(documents).strip():
        parts.append(f"documents={int(float(documents))}")
    return " + ".join(parts) or "none"


def mask_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The ok rows of the attention core with their `mask_label`, and only where more than one mask was measured."""
    ok = rows[(rows["status"] == "ok") & (rows.get("scope", "core") == "core")].copy()
    if ok.empty:
        return ok
    ok["mask_label"] = ok.apply(mask_label, axis=1)
    return ok if ok["mask_label"].nunique() > 1 else ok.iloc[0:0]


def density_figure(rows: pd.DataFrame, out: Path) -> Path | None:
    """time_ms against mask_density, hue back end, style mask, a panel per seq_len; None without two masks."""
    import seaborn as sns

    data = mask_rows(rows)
    if data.empty or "mask_density" not in data:
        return None
    sns.set_theme(style="whitegrid")
    grid = sns.relplot(data=data, x="mask_density", y="time_ms", hue="backend", style="mask_label",
                       col="seq_len", kind="scatter", s=60, facet_kws={"sharey": False})
    grid.set(yscale="log")
    grid.set_axis_labels("mask density (visible pairs / all pairs)", "time (ms, median)")
    grid.figure.suptitle("Time against mask density, per back end and mask", y=1.03)
    out.parent.mkdir(parents=True, exist_ok=True)
    grid.savefig(out, dpi=110, bbox_inches="tight")
    return out


def maps_figure(cells: pd.DataFrame, out: Path) -> Path:
    """Each mask's picture: `cells` tidy (mask_label, query_cell, key_cell, visible: share of the cell's pairs
    seen), one panel per mask, queries down, keys across (attention-gym draws its masks so)."""
    import seaborn as sns

    sns.set_theme(style="white")

    def draw(data: pd.DataFrame, **kwargs) -> None:
        picture = data.pivot(index="query_cell", columns="key_cell", values="visible")
        sns.heatmap(picture, vmin=0, vmax=1, cmap="Blues", cbar=False, xticklabels=False, yticklabels=False)

    grid = sns.FacetGrid(cells, col="mask_label", col_wrap=min(4, cells["mask_label"].nunique()), height=2.6)
    grid.map_dataframe(draw)
    grid.set_titles("{col_name}", size=8)
    grid.set_axis_labels("keys", "queries")
    out.parent.mkdir(parents=True, exist_ok=True)
    grid.savefig(out, dpi=110, bbox_inches="tight")
    return out
