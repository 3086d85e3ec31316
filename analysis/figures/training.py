"""Figure 19: the training study's loss curves, per d_k (columns) and precision (rows), scaled vs unscaled."""

from __future__ import annotations

import pandas as pd
from matplotlib.lines import Line2D

from analysis.figures.common import Context, Made, Skipped, line_grid, save, suptitle
from analysis.figures.style import SCALE_COLORS, precision_order, scale_color
from analysis.slices import number_text, scale_text
from analysis.training import train_rows
from selfattn.results import decode_curve

SMOOTH_STEPS = 10  # one batch's loss is noisy: each run's curve is its rolling mean over this many steps


def curves(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, step): the run's keys, its batch loss and the rolling mean of it (`loss_smooth`)."""
    frames = []
    for _, run in train_rows(rows).iterrows():
        curve = decode_curve(run["loss_curve"])
        if not curve:
            continue
        frame = pd.DataFrame(curve, columns=["step", "loss", "accuracy"])
        frame["loss_smooth"] = frame["loss"].rolling(SMOOTH_STEPS, min_periods=1).mean()
        for key in ("device_label", "precision", "head_dim", "scale", "seed"):
            frame[key] = run[key]
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def training_curves(rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
    name, title = "fig19_training", "Training loss with and without the scale"
    data = curves(rows)
    if data.empty:
        return Skipped(name, title, "no scope=train rows with a loss curve", "training")
    devices = sorted(data["device_label"].unique())
    data["panel_row"] = (data["precision"] if len(devices) == 1 else data["device_label"] + " " + data["precision"])
    order = sorted(data["panel_row"].unique(), key=lambda r: (r.rsplit(" ", 1)[0] if " " in r else "", precision_order(r.split()[-1])))
    dks = sorted(data["head_dim"].unique())
    scales = [s for s in ("auto", "none") if s in set(data["scale"])]
    g = line_grid(data, x="step", y="loss_smooth", hue="scale", hue_order=scales,
                  palette={s: scale_color(s) for s in scales}, row="panel_row", row_order=order, col="head_dim",
                  col_order=dks, marker=None, panel_width=3.4, panel_height=2.4, share_y=True)
    for (panel_row, d_k), ax in g.axes_dict.items():
        ax.set_title(f"{panel_row}, d_k={number_text(float(d_k))}")
        ax.set_xlabel("step")
        ax.set_ylabel(f"batch loss (nats, mean of {SMOOTH_STEPS} steps)")
    handles = [Line2D([], [], color=c, label=scale_text(s)) for s, c in SCALE_COLORS.items() if s in scales]
    g.figure.legend(handles=handles, loc="outside lower center", ncols=len(handles))
    runs = train_rows(rows)
    sizes = (f"d_model {number_text(float(runs['d_model'].iloc[0]))}, batch {number_text(float(runs['batch'].iloc[0]))}, "
             f"lr {runs['lr'].iloc[0]:g}, {runs['seed'].nunique()} seeds")
    suptitle(g.figure, f"Associative recall: training loss per d_k, scaled vs unscaled — {sizes}")
    return Made(name, title,
                f"Each line is the median over seeds of a run's batch loss (rolling mean of {SMOOTH_STEPS} steps), the "
                "band the seeds' p20-p80; blue trains with the 1/√d_k scale, orange without it. Chance is ln 16 ≈ 2.77 "
                "nats; a curve that leaves it has found the key the query asks for.",
                save(g.figure, ctx, name), [sizes])
