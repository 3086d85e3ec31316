"""The attention variants study (selfattn/variants.py): what each variant adds per back end, and two claims.

Rows of the `variants` experiment: the plain call and each variant (a window pair, soft-capping, ALiBi, a sink
logit) per back end and n; what a back end cannot express is an `unsupported` row naming the variant. Figure 22
draws `variant_ratios`: each variant's time and memory over the plain call's at the same n.

The claims:
- a window of w keys makes time grow as n (time ∝ n·w) in the back ends that skip the key blocks it hides,
  judged by the cost model's n² share as the chapter's cost claims (analysis.growth). Beside it, naive with the
  same window is the control: it computes every score and masks them, so its n² term must show at the same
  sizes, or these sizes (fixed costs, a busy machine) cannot tell n from n².
- soft-capping bounds every logit by the cap, so at the fp16 points where unscaled logits overflow (claim 9's
  overflow grid: naive forms Q Kᵀ in fp16) the capped twin's output stays finite: tanh(±inf / c)·c = ±c. The
  uncapped twins are the control: where none overflowed, nothing was tested.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.claim import Evidence, claim, per_rows, study_table
from analysis.cost import COMPILED_SUFFIX, memory_metric, variant_labels, variant_names
from analysis.cost_claims import LINEAR_MAX, MAX_CI_HALF_WIDTH
from analysis.growth import LINEAR, MIN_MODEL_SIZES, NEGLIGIBLE_SHARE, QUADRATIC, SUB_QUADRATIC, judge_growth
from analysis.slices import calls, fix_axes, number_text, plain, plain_rows, window_label

VARIANTS = "Attention variants"
EXPERIMENT = "variants"
# Back ends that skip the key blocks a mask hides (chunked's block plan, flex's block mask, the Triton kernel's
# key range per query block); naive and sdpa's CPU kernels compute every score and mask it.
BLOCK_SKIPPING = ("chunked", "flex", "triton")
CONTROL = "naive"
PLAIN = "plain"
# The score transforms: soft-capping, ALiBi and the sink logit change what every score is (a window pair is a mask).
TRANSFORMS = ("softcap", "alibi", "sink")
# The axes one figure or table holds fixed; what it varies: back end, variant (window, causal, transforms), n.
VARIANT_FIXED = ("device_label", "precision", "scope", "mode", "batch", "heads", "head_dim", "scale", "input_std")
VARIANT_VARY = ("backend", "backend_options", "seq_len", "causal", "window", "softcap", "alibi", "sink")
WINDOW_FIXED = ("scope", "mode", "batch", "heads", "head_dim", "scale", "input_std")
# One overflow point (analysis.overflow's key) and the naive options: the capped and uncapped twins match on these.
TWIN_KEY = ["device_label", "precision", "scope", "mode", "batch", "heads", "seq_len", "head_dim", "causal",
            "input_std", "seed", "backend_options"]
SOFTCAP_EXPERIMENT = "variants (its softcap_overflow grid: naive fp16 unscaled, input_std 32..64)"


def variant_kind(row: pd.Series) -> str:
    """'plain', 'causal', 'window [127, 0]', 'causal window 128', 'softcap 50', 'ALiBi', 'sink 0.5', or several
    joined by ' + '."""
    parts = []
    window = row.get("window")
    has_window = window is not None and not (isinstance(window, float) and math.isnan(window))
    if has_window:
        parts.append(("causal window " if row.get("causal") else "window ") + window_label(window))
    elif row.get("causal"):
        parts.append("causal")
    if pd.notna(row.get("softcap")):
        parts.append(f"softcap {number_text(float(row['softcap']))}")
    if bool(row.get("alibi", False)):
        parts.append("ALiBi")
    if pd.notna(row.get("sink")):
        parts.append(f"sink {number_text(float(row['sink']))}")
    return " + ".join(parts) or PLAIN


def uses_variant(rows: pd.DataFrame) -> pd.Series:
    """Rows that use a variant of selfattn/variants.py: a window pair (a text cell), a cap, ALiBi or a sink."""
    used = pd.Series(False, index=rows.index)
    if "window" in rows:
        used |= rows["window"].map(lambda w: isinstance(w, str))
    for axis in TRANSFORMS:
        used |= ~plain(rows, axis)
    return used


def variant_study(rows: pd.DataFrame) -> pd.DataFrame:
    """Core forward self-attention rows of the plain call and every variant, ok or not, at one value of the other
    axes, with `variant` (variant_kind), `backend_label` (variant_labels) and `name` (variant_names); empty when
    no row uses a variant."""
    rows = plain_rows(calls(rows), vary=VARIANT_VARY)
    rows = rows[(rows["q_len"] == rows["seq_len"]) & (rows["status"] != "invalid")]
    if rows.empty or not uses_variant(rows).any():
        return rows.iloc[0:0]
    rows = fix_axes(rows, VARIANT_FIXED, VARIANT_VARY).rows
    if rows.empty:
        return rows
    return rows.assign(variant=rows.apply(variant_kind, axis=1), backend_label=variant_labels(rows),
                       name=variant_names(rows))


@per_rows
def variant_ratios(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (back end, variant, n): the median time and memory over seeds of its ok rows, and over the plain
    call's at the same n (`time_ratio`, `memory_ratio`; NaN without a plain row); a variant with no ok row keeps
    its failed rows' status (`status`: 'ok', 'unsupported', ...) and `error` (the reason)."""
    study = variant_study(rows)
    if study.empty:
        return pd.DataFrame()
    memory = memory_metric(study)
    keys = ["backend_label", "variant", "seq_len"]
    records = []
    for key, group in study.groupby(keys, sort=False):
        ok = group[group["status"] == "ok"]
        failed = group[group["status"] != "ok"]
        records.append({**dict(zip(keys, key)), "name": group["name"].iloc[0],
                        "status": "ok" if len(ok) else str(failed["status"].mode().iloc[0]),
                        "error": "" if len(ok) else str(failed["error"].iloc[0]),
                        "time_ms": ok["time_ms"].median() if len(ok) else math.nan,
                        "memory_bytes": ok[memory].median() if len(ok) else math.nan})
    table = pd.DataFrame.from_records(records)
    base = table.loc[(table["variant"] == PLAIN) & (table["status"] == "ok"),
                     ["backend_label", "seq_len", "time_ms", "memory_bytes"]]
    joined = table.merge(base.rename(columns={"time_ms": "time_ms_plain", "memory_bytes": "memory_bytes_plain"}),
                         on=["backend_label", "seq_len"], how="left")
    return joined.assign(time_ratio=joined["time_ms"] / joined["time_ms_plain"],
                         memory_ratio=joined["memory_bytes"] / joined["memory_bytes_plain"],
                         memory_metric=memory)


@study_table(VARIANTS, "What each variant adds at the largest n with a plain call: its time and memory over the "
             "plain call's (×1.00: nothing), per back end; `unsupported` where the back end cannot express it.")
def variant_cost_table(rows: pd.DataFrame) -> pd.DataFrame:
    ratios = variant_ratios(rows)
    if ratios.empty or not ratios["time_ms_plain"].notna().any():
        return pd.DataFrame()
    largest = ratios[ratios["time_ms_plain"].notna()].groupby("backend_label")["seq_len"].max()
    part = ratios[ratios["seq_len"] == ratios["backend_label"].map(largest)]
    part = part[part["variant"] != PLAIN]
    if part.empty:
        return pd.DataFrame()

    def cell(r: pd.Series) -> str:
        if r["status"] != "ok":
            return r["status"]
        memory = "memory not measured" if math.isnan(r["memory_ratio"]) else f"×{r['memory_ratio']:.2f} memory"
        return f"×{r['time_ratio']:.2f} time, {memory}"
    table = part.assign(cell=part.apply(cell, axis=1)).pivot(index="variant", columns="backend_label", values="cell")
    columns = list(dict.fromkeys(part["backend_label"]))
    table = table[columns].fillna("—").rename(columns={c: f"{c} (n={number_text(float(largest[c]))})" for c in columns})
    return table.reset_index()


# --- a window makes time linear in n where blocks are skipped ----------------------------------------------

@per_rows
def _window_lines(rows: pd.DataFrame) -> dict[tuple, pd.DataFrame]:
    """{(device, precision, variant name, label, window cell, causal): its ok forward time rows} for windowed
    rows of plain scores, at one value of the other axes per device and precision."""
    rows = plain_rows(calls(rows), vary=("window",))
    ok = rows[(rows["status"] == "ok") & (rows["q_len"] == rows["seq_len"]) & rows["time_ms"].notna()
              & rows["window"].notna()]
    lines: dict[tuple, pd.DataFrame] = {}
    for (device, precision), part in ok.groupby(["device_label", "precision"], sort=True):
        part = fix_axes(part, WINDOW_FIXED, ("backend", "backend_options", "seq_len", "window", "causal")).rows
        part = part.assign(name=variant_names(part), label=variant_labels(part),
                           window_key=part["window"].map(window_label))
        for (name, label, window, causal), line in part.groupby(["name", "label", "window_key", "causal"], sort=True):
            lines[(device, precision, name, label, window, bool(causal))] = line
    return lines


def _growth(line: pd.DataFrame):
    return judge_growth(line["seq_len"].to_numpy(dtype=float), line["time_ms"].to_numpy(dtype=float), reduce="min")


def _window_text(window: str, causal: bool) -> str:
    return ("causal window " if causal else "window ") + window


@claim("window_linear_time", "A window of w keys makes time grow as n (time ∝ n·w) in the back ends that skip the "
       "blocks it hides",
       rule=f"per device and precision, every windowed time line of a block-skipping back end "
            f"({', '.join(BLOCK_SKIPPING)}) measured at >= {MIN_MODEL_SIZES} sizes grows as n: linear by the growth "
            f"rule (the cost model fixed + linear·n + quadratic·n² follows the rows and its n² term stays below "
            f"{NEGLIGIBLE_SHARE:.0%} of the time at the largest n, upper end of its interval), or its exponent over "
            f"the larger sizes b <= {LINEAR_MAX} with a 95% CI no wider than ±{MAX_CI_HALF_WIDTH} (as chunked_linear "
            f"judges memory); does not hold where one is quadratic or sub-quadratic. The control: {CONTROL} with the "
            f"same window (it computes every score), at >= {MIN_MODEL_SIZES} sizes up to the line's largest n, must "
            f"be quadratic, else the line is not decided (these sizes cannot tell n from n²). Each size's time is "
            f"the faster of its repeats",
       experiment=EXPERIMENT, study=VARIANTS)
def window_linear_time(rows: pd.DataFrame) -> Evidence | None:
    lines = _window_lines(rows)
    judged = {key: line for key, line in lines.items()  # a compiled variant ("chunked+compile") skips as its back end
              if key[2].removesuffix(COMPILED_SUFFIX) in BLOCK_SKIPPING and line["seq_len"].nunique() >= MIN_MODEL_SIZES}
    if not judged:
        if not uses_variant(calls(rows)).any():
            return None  # no variants study here (a masks study's windows are not this claim's points)
        return Evidence(f"no windowed line of a block-skipping back end at >= {MIN_MODEL_SIZES} sizes")
    parts, passes, undecided = [], [], []
    for (device, precision, name, label, window, causal), line in judged.items():
        where = f"{device} {precision} {label}, {_window_text(window, causal)}"
        growth = _growth(line)
        control = lines.get((device, precision, CONTROL, CONTROL, window, causal))
        # the control's sizes within the line's: a back end computing every score would show its n² there too
        control = control[control["seq_len"] <= line["seq_len"].max()] if control is not None else None
        text = f"{where}: {growth.text()}"
        if control is None or control["seq_len"].nunique() < MIN_MODEL_SIZES:
            parts.append(text + f"; no control ({CONTROL} with the window at {MIN_MODEL_SIZES} sizes up to its largest n)")
            undecided.append(f"{where}: needs {CONTROL} with the same window at {MIN_MODEL_SIZES} sizes up to "
                             f"n={number_text(float(line['seq_len'].max()))}")
            continue
        control_growth = _growth(control)
        fit = growth.fit
        # as chunked_linear judges memory: the model's verdict, or the larger sizes' exponent, precise and low
        by_exponent = bool(fit and (fit.ci_high - fit.ci_low) / 2 <= MAX_CI_HALF_WIDTH and fit.exponent <= LINEAR_MAX)
        low = growth.kind == LINEAR or by_exponent
        if low and growth.kind != LINEAR:  # the evidence names what decided, never a judgement the verdict overrules
            text = (f"{where}: {fit.label()}" + (f"; {growth.model.label()}" if growth.model else "")
                    + f": at most linear by its exponent (b <= {LINEAR_MAX}, CI ±{MAX_CI_HALF_WIDTH} or narrower)")
        parts.append(text + f"; control {CONTROL}: {control_growth.text()}")
        if control_growth.kind != QUADRATIC:
            undecided.append(f"{where}: the control {CONTROL} is {control_growth.kind} here, so these sizes cannot "
                             f"tell n from n² (needs larger n or steadier timing)")
        elif low:
            passes.append(True)
        elif growth.kind in (QUADRATIC, SUB_QUADRATIC):
            passes.append(False)
        else:
            undecided.append(f"{where}: {growth.need_text()}")
    return Evidence("; ".join(parts), tuple(passes), tuple(undecided))


# --- soft-capping keeps overflowing fp16 logits finite ----------------------------------------------------------

def softcap_twins(rows: pd.DataFrame) -> pd.DataFrame:
    """Soft-capped naive fp16 unscaled rows beside their uncapped twin (`uncapped_frac`: its non-finite
    fraction), ok rows with a measured non-finite fraction, plain otherwise (no ALiBi, sink, padding, ...)."""
    rows = plain_rows(calls(rows), vary=("softcap",))
    part = rows[(rows["status"] == "ok") & (rows["backend"] == "naive") & (rows["precision"] == "fp16")
                & (rows["scale"] == "none") & (rows["q_len"] == rows["seq_len"]) & rows["nonfinite_frac"].notna()]
    capped, uncapped = part[part["softcap"].notna()], part[part["softcap"].isna()]
    if capped.empty:
        return capped
    twins = uncapped.groupby(TWIN_KEY, dropna=False)["nonfinite_frac"].max().rename("uncapped_frac").reset_index()
    return capped.merge(twins, on=TWIN_KEY, how="left")


@claim("softcap_bounds_overflow", "Soft-capping bounds every logit by the cap, so fp16 logits that overflow unscaled "
       "stay finite with a cap",
       rule="naive fp16, unscaled (Q Kᵀ formed in fp16, claim 9's overflow points): wherever the uncapped point has "
            "non-finite outputs, its soft-capped twin (all else equal) has none (non-finite fraction 0); not decided "
            "where no uncapped twin overflowed (the control: without it nothing was tested)",
       metrics=("accuracy",), experiment=SOFTCAP_EXPERIMENT, study=VARIANTS)
def softcap_bounds_overflow(rows: pd.DataFrame) -> Evidence | None:
    twins = softcap_twins(rows)
    if twins.empty:
        return None
    tested = twins[twins["uncapped_frac"] > 0]
    untested = twins[~(twins["uncapped_frac"] > 0)]
    caps = ", ".join(number_text(float(c)) for c in sorted(twins["softcap"].unique()))
    if tested.empty:
        why = ("no uncapped twin measured" if twins["uncapped_frac"].isna().all()
               else f"none of the {int(twins['uncapped_frac'].notna().sum())} uncapped twins overflowed")
        return Evidence(f"{len(twins)} capped points (cap {caps}): {why}",
                        undecided=(f"{why}: needs larger input_std or d_k",))
    finite = tested["nonfinite_frac"] == 0
    first = tested.sort_values(["input_std", "head_dim"]).iloc[0]
    text = (f"cap {caps}: at the {len(tested)} points where uncapped naive fp16 overflows (up to "
            f"{tested['uncapped_frac'].max():.2f} of outputs non-finite, from d_k={number_text(float(first['head_dim']))}, "
            f"s={number_text(float(first['input_std']))}), the capped twin is finite at {int(finite.sum())} of "
            f"{len(tested)} (max non-finite fraction {tested['nonfinite_frac'].max():.2f})")
    if "rel_rms_err" in tested and tested["rel_rms_err"].notna().any():
        text += f", relative RMS error vs float64 at most {tested['rel_rms_err'].max():.2g}"
    if len(untested):
        text += f"; {len(untested)} capped points whose uncapped twin stayed finite (or was not measured) not counted"
    return Evidence(text, tuple(bool(ok) for ok in finite))
