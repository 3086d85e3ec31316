"""Attention against recurrence, read from rows: path length (sensitivity vs distance) and achieved FLOP/s.

The chapter's comparison table: an RNN connects two tokens k steps apart through k serial steps (path
length O(n)), attention through one (O(1)). Every scope=layer, lstm and gru row carries the measured
sensitivity of the last position's output to the token at distance k (`grad_by_distance`, float64 at
init, selfattn/measure/path_length.py) and `grad_far_near_ratio` (k = n-1 over k = 1). Distance 0, the
token itself, is drawn in the figure but never judged: in attention it also enters through its own query.
The claims are rendered only when their rows exist (quick's recurrence grids, experiment=rnn_vs_attention).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from analysis.claim import Evidence, claim
from analysis.slices import number_text, plain_rows
from selfattn.scopes import SCOPES

RECURRENCE = "Attention against recurrence"
EXPERIMENT = "rnn_vs_attention"
RNN_SCOPES: tuple[str, ...] = tuple(name for name, scope in SCOPES.items() if scope.gates)
PATH_SCOPES: tuple[str, ...] = ("layer", *RNN_SCOPES)
RNN_MAX_RATIO = 1e-2  # an RNN's far/near sensitivity ratio below this at every n: "much less than 1"
ATTENTION_RATIO_FACTOR = 4.0  # attention's ratio within [1/this, this] at every n: "a factor of a few of 1"
FLOPS_FAR_BELOW = 0.5  # an RNN's achieved TFLOP/s at most this share of the layer's at the same point
MATCH = ("device_label", "precision", "mode", "batch", "d_model", "seq_len")  # what "the same point" means here
# The sensitivity does not depend on mode or the timing: one value per module, size and seed.
PATH_KEY = ("device_label", "scope", "d_model", "heads", "kv_heads", "causal", "scale", "input_std", "seq_len")


def path_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """ok rows of scope layer (the plain one: no encoding, no GQA, ...), lstm, gru that carry a far/near ratio, one
    per PATH_KEY (the median over seeds)."""
    if "grad_far_near_ratio" not in rows or "scope" not in rows:
        return rows.iloc[0:0]
    ok = plain_rows(rows[(rows["status"] == "ok") & rows["scope"].isin(PATH_SCOPES) & rows["grad_far_near_ratio"].notna()])
    if ok.empty:
        return ok
    keys = [k for k in PATH_KEY if k in ok]
    return ok.groupby(keys, as_index=False, dropna=False)["grad_far_near_ratio"].median()


def sensitivity_by_distance(rows: pd.DataFrame) -> pd.DataFrame:
    """Tidy: one row per (ok row, distance) with `distance` and `sensitivity`, then the median over rows of
    one PATH_KEY (mode and seed), for the figure."""
    if "grad_by_distance" not in rows or "scope" not in rows:
        return pd.DataFrame()
    ok = plain_rows(rows[(rows["status"] == "ok") & rows["scope"].isin(PATH_SCOPES)])
    ok = ok[ok["grad_by_distance"].fillna("").astype(str).str.startswith("[")]
    out = []
    keys = [k for k in PATH_KEY if k in ok]
    for _, row in ok.iterrows():
        for distance, value in json.loads(row["grad_by_distance"]):
            out.append({**{k: row[k] for k in keys}, "distance": int(distance),
                        "sensitivity": math.nan if value is None else float(value)})
    if not out:
        return pd.DataFrame()
    tidy = pd.DataFrame(out)
    return tidy.groupby(keys + ["distance"], as_index=False, dropna=False)["sensitivity"].median()


def _label(scope: str, device: str, d_model) -> str:
    return f"{device} {scope} d_model={number_text(d_model)}"


def _falls(ratios: list[float]) -> bool | None:
    """Whether the ratio is lower at each larger n where float64 can tell: a 0 (float64's underflow) is below
    any positive ratio, and two zeros are not compared; None when no pair could be compared (all zeros)."""
    compared = False
    for before, now in zip(ratios, ratios[1:]):
        if before == 0 and now == 0:
            continue
        if not now < before:
            return False
        compared = True
    return True if compared else None


@claim("rnn_path_decays", "An RNN's sensitivity to a token decays with its distance: the gradient of the last "
       "output w.r.t. the farthest token is a vanishing fraction of that w.r.t. the previous one, and falls with n",
       rule=f"per LSTM/GRU and d_model: grad_far_near_ratio (distance n-1 over distance 1, float64, at init) "
            f"< {RNN_MAX_RATIO:g} at every n, and lower at each larger n where float64 can tell (0, its underflow, is "
            f"below any positive ratio; two zeros are not compared)",
       metrics=("path_length",), experiment=EXPERIMENT, study=RECURRENCE)
def rnn_path_decays(rows: pd.DataFrame) -> Evidence | None:
    paths = path_rows(rows)
    rnn = paths[paths["scope"].isin(RNN_SCOPES)] if not paths.empty else paths
    if rnn.empty:
        return None
    parts, passes, undecided = [], [], []
    for (device, scope, d_model), part in rnn.groupby(["device_label", "scope", "d_model"]):
        part = part.groupby("seq_len", as_index=False)["grad_far_near_ratio"].median().sort_values("seq_len")
        ns, ratios = part["seq_len"].tolist(), part["grad_far_near_ratio"].tolist()
        label = _label(scope, device, d_model)
        parts.append(f"{label}: " + ", ".join(f"n={number_text(n)} {r:.2g}" for n, r in zip(ns, ratios)))
        small = all(r < RNN_MAX_RATIO for r in ratios)
        if len(ns) < 2:
            if not small:
                passes.append(False)
            else:
                undecided.append(f"{label}: falling with n needs two or more n")
            continue
        falls = _falls(ratios)
        if falls is None and small:
            undecided.append(f"{label}: the ratio underflowed float64 to 0 at every n; falling needs smaller n")
            continue
        passes.append(small and bool(falls))
    return Evidence("; ".join(parts), tuple(passes), tuple(undecided))


@claim("attention_path_flat", "Attention's sensitivity to a token does not depend on its distance: every token is "
       "one step from the output",
       rule=f"per d_model: scope=layer's grad_far_near_ratio within [1/{ATTENTION_RATIO_FACTOR:g}, "
            f"{ATTENTION_RATIO_FACTOR:g}] at every n (distance 0 is not compared: the token's own query adds to it)",
       metrics=("path_length",), experiment=EXPERIMENT, study=RECURRENCE)
def attention_path_flat(rows: pd.DataFrame) -> Evidence | None:
    paths = path_rows(rows)
    layer = paths[paths["scope"] == "layer"] if not paths.empty else paths
    if layer.empty:
        return None
    parts, passes = [], []
    for (device, d_model), part in layer.groupby(["device_label", "d_model"]):
        part = part.groupby("seq_len", as_index=False)["grad_far_near_ratio"].median().sort_values("seq_len")
        ratios = part["grad_far_near_ratio"]
        passes.extend(bool(1 / ATTENTION_RATIO_FACTOR <= r <= ATTENTION_RATIO_FACTOR) for r in ratios)
        parts.append(f"{_label('layer', device, d_model)}: " + ", ".join(
            f"n={number_text(n)} {r:.2f}" for n, r in zip(part["seq_len"], ratios)))
    return Evidence("; ".join(parts), tuple(passes))


def flops_pairs(rows: pd.DataFrame) -> pd.DataFrame:
    """Each RNN point beside the layer's at the same MATCH: `rnn_tflops`, `layer_tflops` (each its best over
    seeds: load only ever slows a call), their `ratio`, and each one's share of the device's measured peak."""
    need = ("tflops", "scope", "d_model")
    if any(c not in rows for c in need):
        return pd.DataFrame()
    ok = plain_rows(rows[(rows["status"] == "ok") & rows["tflops"].notna() & rows["scope"].isin(PATH_SCOPES)])
    if ok.empty or not ok["scope"].isin(RNN_SCOPES).any() or not (ok["scope"] == "layer").any():
        return pd.DataFrame()
    keys = list(MATCH)
    peak = ok.groupby("device_label")["device_peak_tflops"].max().rename("peak_tflops")
    best = ok.groupby(keys + ["scope"], as_index=False, dropna=False)["tflops"].max()
    layer = best[best["scope"] == "layer"].drop(columns="scope").rename(columns={"tflops": "layer_tflops"})
    rnn = best[best["scope"].isin(RNN_SCOPES)].rename(columns={"tflops": "rnn_tflops"})
    pairs = rnn.merge(layer, on=keys).merge(peak, left_on="device_label", right_index=True, how="left")
    return pairs.assign(ratio=pairs["rnn_tflops"] / pairs["layer_tflops"])


# Why the largest d_model decides: at d_model 128 an LSTM's step weights (4 x 128 x 128 fp32, 256 KB) stay
# in a core's cache, and its serial (1 x d_model) products come near the layer's FLOP/s, so the verdict
# would rest on the layer's second thread, which a busy machine takes away. At d_model 512 each step reads
# its 4 MB of weights again, nothing reused across steps (the serial steps cannot be batched into one
# product), and the recurrence stays far below the layer, quiet or busy (docs/studies.md has the figures).
@claim("rnn_flops_below", "An RNN's achieved FLOP/s stays far below attention's at the same d_model and n: its n "
       "steps run one after the other",
       rule=f"per LSTM/GRU and mode, against the layer (sdpa) at the same device, precision, batch, d_model and n, "
            f"at the largest d_model both ran and its largest n (smaller calls are mostly fixed costs, and at a "
            f"small d_model a step's weights stay in a CPU core's cache): the RNN's TFLOP/s <= {FLOPS_FAR_BELOW:g} x "
            f"the layer's (each its best over seeds); every d_model and n is quoted",
       experiment=EXPERIMENT, study=RECURRENCE)
def rnn_flops_below(rows: pd.DataFrame) -> Evidence | None:
    pairs = flops_pairs(rows)
    if pairs.empty:
        return None
    parts, passes = [], []
    for (device, scope, mode), group in pairs.groupby(["device_label", "scope", "mode"]):
        largest = group["d_model"].max()
        for d_model, part in group.groupby("d_model"):
            part = part.sort_values("seq_len")
            judged = d_model == largest
            if judged:
                passes.append(bool(part["ratio"].iloc[-1] <= FLOPS_FAR_BELOW))
            peak = part["peak_tflops"].iloc[0]
            share = "" if not np.isfinite(peak) or peak <= 0 else (
                f" (of the peak {peak:.3g} TFLOP/s: {scope} {part['rnn_tflops'].max() / peak:.1%}, "
                f"layer {part['layer_tflops'].max() / peak:.1%} at best)")
            parts.append(f"{_label(scope, device, d_model)} {mode}: RNN/layer " + ", ".join(
                f"n={number_text(n)} {r:.2f}" for n, r in zip(part["seq_len"], part["ratio"])) + share
                + ("" if judged else " (quoted, not judged)"))
    return Evidence("; ".join(parts), tuple(passes))
