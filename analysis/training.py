"""The training study read from rows: does the 1/√d_k scale change learning itself, not only the logits at init?

scope=train rows (selfattn/train/): one short seeded training run of a tiny associative-recall model per
row, its attention through a harness back end. Two claims, judged over the seeds of each group (a group
is every axis but the scale and the seed), and a table of the numbers. The rows' `loss_curve` cells hold
each run's batch losses; analysis/figures/training.py draws them.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.claim import Evidence, claim, per_rows, study_table
from analysis.slices import number_text, plain_rows

TRAINING = "Training with and without the scale"
EXPERIMENT = "training"
# Everything that tells two runs apart but the scale and the seed: scaled and unscaled runs of one group are
# compared seed by seed.
GROUP = ["device_label", "precision", "backend", "backend_options", "d_model", "heads", "head_dim", "batch",
         "seq_len", "steps", "lr", "input_std", "causal"]
LOSS_MARGIN = 0.1  # nats: an unscaled run "learns slower" when its held-out loss ends above the scaled run's by more
LEARNED_ACCURACY = 0.5  # a scaled run learned the task when its held-out accuracy ends at least here (chance: 1/16)
FP16_MAX = 65504.0


@per_rows
def train_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """ok scope=train rows with both scales' columns typed (the claims, the table and the figure read them)."""
    if "scope" not in rows or "loss_final" not in rows:
        return rows.iloc[0:0]
    ok = rows[(rows["status"] == "ok") & (rows["scope"] == "train") & rows["scale"].isin(["auto", "none"])]
    ok = plain_rows(ok)  # the ablation axes at their plain value
    return ok.assign(loss_final=pd.to_numeric(ok["loss_final"], errors="coerce"))


def paired(rows: pd.DataFrame) -> list[tuple[dict, pd.DataFrame, pd.DataFrame]]:
    """(group keys, scaled runs, unscaled runs) per group measured both ways, seeds in common only, by seed."""
    runs = train_rows(rows)
    out = []
    keys = [k for k in GROUP if k in runs]
    for values, part in runs.groupby(keys, dropna=False, sort=True):
        scaled, unscaled = (part[part["scale"] == s].drop_duplicates("seed").set_index("seed") for s in ("auto", "none"))
        seeds = sorted(set(scaled.index) & set(unscaled.index))
        if seeds:
            out.append((dict(zip(keys, values)), scaled.loc[seeds], unscaled.loc[seeds]))
    return out


def _label(group: dict) -> str:
    return f"{group['device_label']} {group['precision']} d_k={number_text(group['head_dim'])}"


def _losses(values: pd.Series) -> str:
    return "/".join("nan" if not math.isfinite(v) else f"{v:.2f}" for v in values)


def _steps(values: pd.Series) -> str:
    return "/".join("never" if pd.isna(v) else str(int(v)) for v in values)


def _looked_at(runs: pd.DataFrame) -> str:
    """The sizes the study looked at, for a verdict that says where it looked."""
    def span(col: str) -> str:
        lo, hi = runs[col].min(), runs[col].max()
        return number_text(float(lo)) if lo == hi else f"{number_text(float(lo))}-{number_text(float(hi))}"
    return (f"d_k {span('head_dim')}, d_model {span('d_model')}, {span('steps')} steps of batch {span('batch')}, "
            f"input std {span('input_std')}")


@claim("unscaled_learns_slower", "Without the 1/√d_k scale, attention learns slower at large d_k",
       rule=f"scope=train, per device and precision, at the largest d_k, seed by seed: the unscaled run's held-out loss "
            f"at the end is above the scaled run's by more than {LOSS_MARGIN} nats (a non-finite loss counts as above) "
            f"in every seed; not decided when no scaled run reached {LEARNED_ACCURACY:.0%} held-out accuracy (the "
            "steps were too few to tell)", experiment=EXPERIMENT, study=TRAINING)
def unscaled_learns_slower(rows: pd.DataFrame) -> Evidence | None:
    pairs = paired(rows)
    if not pairs:
        return None
    largest: dict[tuple, float] = {}
    for group, _, _ in pairs:
        key = (group["device_label"], group["precision"])
        largest[key] = max(largest.get(key, 0.0), float(group["head_dim"]))
    parts, passes, undecided = [], [], []
    for group, scaled, unscaled in pairs:
        if float(group["head_dim"]) != largest[(group["device_label"], group["precision"])]:
            continue
        loss_s = scaled["loss_final"].to_numpy(dtype=float)
        loss_u = np.where(np.isfinite(unscaled["loss_final"].to_numpy(dtype=float)),
                          unscaled["loss_final"].to_numpy(dtype=float), np.inf)
        text = (f"{_label(group)}: loss scaled {_losses(scaled['loss_final'])} vs unscaled "
                f"{_losses(unscaled['loss_final'])}, steps to 90% scaled {_steps(scaled['steps_to_target_acc'])}, "
                f"unscaled {_steps(unscaled['steps_to_target_acc'])} ({len(scaled)} seed{'' if len(scaled) == 1 else 's'})")
        parts.append(text)
        if not (scaled["final_accuracy"] >= LEARNED_ACCURACY).any():
            undecided.append(f"{_label(group)}: the scaled runs did not learn either in "
                             f"{number_text(float(group['steps']))} steps; needs more steps")
            continue
        with np.errstate(invalid="ignore"):
            passes.append(bool(np.all(loss_u - loss_s > LOSS_MARGIN)))
    looked = _looked_at(train_rows(rows))
    return Evidence("; ".join(parts) + f" (looked at: {looked})", tuple(passes), tuple(undecided))


def _counts(runs: pd.DataFrame, column: str) -> pd.Series:
    return pd.to_numeric(runs[column], errors="coerce").fillna(0).astype(int) if column in runs else pd.Series(0, index=runs.index)


@claim("fp16_unscaled_nonfinite", "In fp16, unscaled training has non-finite steps where scaled training has none",
       rule="scope=train, fp16 (autocast + GradScaler), per d_k and device, summed over the seeds both scales ran: "
            "unscaled has at least one step whose loss or gradient was not finite and scaled has none, not counting "
            "GradScaler's start-up skips (the leading steps whose gradient overflowed at its initial scale 2^16 while it "
            "halves it: by design, in any run); a d_k where neither has any is no evidence either way, and when that is "
            f"every d_k the verdict is not decided (the logits stayed below fp16's {FP16_MAX:g} at these sizes)",
       experiment=EXPERIMENT, study=TRAINING)
def fp16_unscaled_nonfinite(rows: pd.DataFrame) -> Evidence | None:
    if train_rows(rows).empty:
        return None
    pairs = [p for p in paired(rows) if p[0]["precision"] == "fp16"]
    if not pairs:
        return Evidence("no fp16 training runs both scaled and unscaled")
    parts, passes = [], []
    for group, scaled, unscaled in pairs:
        counted = []
        for runs in (unscaled, scaled):
            total, startup = _counts(runs, "nonfinite_steps"), _counts(runs, "scaler_startup_skips")
            counted.append(int((total - startup).sum()))
            parts.append(f"{_label(group)} {'unscaled' if runs is unscaled else 'scaled'}: "
                         f"{'/'.join(str(v) for v in total)} non-finite steps, of them "
                         f"{'/'.join(str(v) for v in startup)} GradScaler start-up skips and "
                         f"{'/'.join(str(v) for v in _counts(runs, 'nonfinite_loss_steps'))} with a non-finite loss")
        n_u, n_s = counted
        if n_s or n_u:
            passes.append(n_u > 0 and n_s == 0)
    runs = train_rows(rows)
    fp16 = runs[runs["precision"] == "fp16"]
    looked = _looked_at(fp16)
    text = "; ".join(parts) + f" (looked at: {looked})"
    if passes:
        return Evidence(text, tuple(passes))
    std = pd.to_numeric(fp16.loc[fp16["scale"] == "none", "logit_std"], errors="coerce").max()
    return Evidence(text, undecided=(f"no fp16 run had a non-finite step beyond GradScaler's start-up at {looked} "
                                     f"(largest unscaled logit std at the end {std:.3g}); needs logits near "
                                     f"{FP16_MAX:g}: larger d_k or input std",))


@study_table(TRAINING, "Training runs per group, median over seeds (held-out loss at 25/50/75/100% of the steps, "
                       "final accuracy, steps to 90% batch accuracy, non-finite steps summed, the query row's logit std "
                       "and largest weight at the end, ms per step):")
def training_table(rows: pd.DataFrame) -> pd.DataFrame:
    runs = train_rows(rows)
    if runs.empty:
        return pd.DataFrame()
    out = []
    keys = ["device_label", "precision", "head_dim", "scale"]
    for (device, precision, d_k, scale), part in runs.groupby(keys, sort=True):
        med = part.median(numeric_only=True)
        reached = part["steps_to_target_acc"].dropna()
        losses = "/".join(f"{med[c]:.2f}" if math.isfinite(med[c]) else "nan"
                          for c in ("loss_at_25pct", "loss_at_50pct", "loss_at_75pct", "loss_final"))
        out.append({"device": device, "precision": precision, "d_k": number_text(float(d_k)),
                    "scale": "1/√d_k" if scale == "auto" else "none", "seeds": str(len(part)), "loss 25/50/75/100%": losses,
                    "final accuracy": f"{med['final_accuracy']:.2f}",
                    "steps to 90%": f"{len(reached)}/{len(part)} reached" + (f", median {reached.median():.0f}" if len(reached) else ""),
                    "non-finite steps": str(int(part["nonfinite_steps"].sum())),
                    "logit std": f"{med['logit_std']:.3g}", "largest weight": f"{med['max_weight']:.2f}",
                    "ms/step": f"{med['time_ms']:.1f}"})
    return pd.DataFrame(out)
