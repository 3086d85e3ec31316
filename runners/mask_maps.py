"""`python -m runners.mask_maps RESULTS --out DIR`: every mask a sweep measured, drawn, and time against density.

For each distinct mask of the sweep's ok rows (its mask function and parameters, causal, window, padding,
documents, at the smallest n it ran), the mask is evaluated through the harness's own geometry
(selfattn/mods/geometry.py: the function itself, intersected with the interval masks; sequence 0, head 0)
and pooled into at most CELLS x CELLS cells, each the share of its (query, key) pairs that are visible. Writes
DIR/mask_maps.csv (tidy: mask_label, query_cell, key_cell, visible), DIR/mask_maps.png, and
DIR/time_vs_density.png (analysis/mask_figures.py; the latter from the CSV alone).

Why here (runners/): computing a mask needs torch and selfattn, which analysis/ never imports
(runners/attention_maps.py is the same case).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from analysis.mask_figures import density_figure, mask_label, mask_rows, maps_figure

CELLS = 64  # a picture's cells per side (attention-gym draws its masks at about this size)


def mask_cells(row: pd.Series, cells: int = CELLS) -> pd.DataFrame:
    """One mask's picture: the share of visible pairs per cell, for sequence 0 and head 0 of the row's point."""
    import torch

    from selfattn.inputs import point_masks
    from selfattn.mods.geometry import keep
    from selfattn.point import Point
    from selfattn.variants import parse_window

    window = row.get("window")
    point = Point(batch=int(row["batch"]), heads=int(row["heads"]), q_len=int(row["q_len"]), seq_len=int(row["seq_len"]),
                  causal=str(row["causal"]).lower() == "true",
                  window=parse_window(int(float(window)) if pd.notna(window) and str(window).strip().lstrip("-").replace(".", "", 1).isdigit() else (str(window) if pd.notna(window) and str(window).strip() else None)),
                  pad_frac=float(row.get("pad_frac") or 0.0),
                  documents=int(float(row["documents"])) if pd.notna(row.get("documents")) and str(row["documents"]).strip() else None,
                  mask=str(row.get("mask") or "none") if pd.notna(row.get("mask")) else "none",
                  mask_options=json.loads(row.get("mask_options") or "{}") if pd.notna(row.get("mask_options")) else {},
                  seed=int(row["seed"]))
    masks = point_masks(point)
    q_len, seq_len = point.q_len_resolved, point.seq_len
    q_edges = torch.linspace(0, q_len, min(cells, q_len) + 1).long()
    k_edges = torch.linspace(0, seq_len, min(cells, seq_len) + 1).long()
    out = []
    for qi in range(len(q_edges) - 1):
        rows = torch.arange(int(q_edges[qi]), int(q_edges[qi + 1]))
        block = keep(masks, 1, 1, q_len, seq_len, "cpu", rows=rows)[0, 0].float()
        for ki in range(len(k_edges) - 1):
            out.append((qi, ki, float(block[:, int(k_edges[ki]):int(k_edges[ki + 1])].mean())))
    frame = pd.DataFrame(out, columns=["query_cell", "key_cell", "visible"])
    frame.insert(0, "mask_label", f"{mask_label(row)} (n={seq_len})")
    return frame


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runners.mask_maps", description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a sweep's results.csv (or its folder)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the CSV and the figures")
    parser.add_argument("--cells", type=int, default=CELLS, help="cells per side of a picture")
    args = parser.parse_args(argv)
    path = args.results / "results.csv" if args.results.is_dir() else args.results
    rows = pd.read_csv(path)
    data = mask_rows(rows)
    if data.empty:
        print(f"error: {path} has ok rows of fewer than two masks: nothing to compare", file=sys.stderr)
        return 1
    firsts = data.sort_values("seq_len").drop_duplicates("mask_label")
    cells = pd.concat([mask_cells(row, args.cells) for _, row in firsts.iterrows()], ignore_index=True)
    args.out.mkdir(parents=True, exist_ok=True)
    cells.to_csv(args.out / "mask_maps.csv", index=False)
    written = [maps_figure(cells, args.out / "mask_maps.png"), density_figure(rows, args.out / "time_vs_density.png")]
    for figure in written:
        if figure is not None:
            print(figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
