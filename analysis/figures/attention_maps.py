"""Figure: one head's attention weights A as heat maps, from the tidy table runners/attention_maps.py writes.

No torch here (analysis/ never imports it): the weights arrive as a DataFrame (panel, group, title, query,
key, weight), computed by the harness's naive back end on the runner side.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.colors import PowerNorm

from analysis.figures.common import Context, Made, plt, save, suptitle

NAME = "fig_attention_maps"
GAMMA = 0.4  # a power-law colour scale: small weights stay visible beside a saturated one-hot row


def attention_maps_figure(maps: pd.DataFrame, ctx: Context) -> Made:
    groups = list(dict.fromkeys(maps["group"]))
    per_group = {g: list(dict.fromkeys(maps.loc[maps["group"] == g, "panel"])) for g in groups}
    cols = max(len(p) for p in per_group.values())
    fig, axes = plt.subplots(len(groups), cols, figsize=(2.6 * cols + 1.0, 2.8 * len(groups)), squeeze=False)
    norm = PowerNorm(gamma=GAMMA, vmin=0.0, vmax=1.0)
    notes, image = [], None
    for r, group in enumerate(groups):
        for c in range(cols):
            ax = axes[r][c]
            if c >= len(per_group[group]):
                ax.set_axis_off()
                continue
            part = maps[maps["panel"] == per_group[group][c]]
            n = int(part["query"].max()) + 1
            a = np.zeros((n, int(part["key"].max()) + 1))
            a[part["query"].to_numpy(), part["key"].to_numpy()] = part["weight"].to_numpy()
            sns.heatmap(a, cmap="magma", norm=norm, cbar=False, square=True, xticklabels=n // 4, yticklabels=n // 4,
                        ax=ax)
            image = ax.collections[0]
            title = str(part["title"].iloc[0])
            ax.set_title(title)
            ax.set_xlabel("key j")
            ax.set_ylabel("query i" if c == 0 else "")
            ax.grid(False)
            seen = a.sum(axis=1) > 0
            top = a.max(axis=1)[seen].mean() if seen.any() else float("nan")
            notes.append(f"{title}: mean largest weight per row {top:.2f}")
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label=f"weight A[i, j] (power scale, γ={GAMMA})")
    n = int(maps["query"].max()) + 1
    suptitle(fig, f"One head's attention weights at n = {n} (naive back end, seeded Q and K): the scale at a small "
             "and a large d_k, and the masks")
    return Made(NAME, "Attention maps",
                "Each panel is A = softmax(scale·QKᵀ + mask) for one head, a row per query. Top: without the 1/√d_k "
                "scale the logits' spread grows with √d_k and each row collapses towards one key (one-hot) at a "
                "large d_k. Bottom: what each mask leaves — the lower triangle (causal), a band (window), the "
                "columns of real keys (padding), blocks on the diagonal (packed documents).",
                save(fig, ctx, NAME), notes)
