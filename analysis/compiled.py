"""The compiled back ends study read from rows: what torch.compile buys and costs (experiment=compiled).

Variants: the eager back ends (naive, chunked, sdpa), naive and chunked with their `compile` option
on ("naive+compile", "chunked+compile": analysis.cost.variant_names) and flex, which always compiles.
A row ran compiled code when its kernel label says so ("...-compiled", flex's "compiled") or it
asked for compile=true; `compile_s` is its first call, compilation included, timed apart from
time_ms. Its compilation cost counts only where `recompiled` is true: a first call that found code
compiled for an earlier point in the same process took just a call.

The question the study answers: does compiling naive attention stop materializing the n x n score
matrix? Its peak memory's exponent against n says: about 2 it still materializes, about 1 the
compiler fused it (inductor can rewrite softmax(QKᵀ)V into a fused attention kernel).
Its claims and table are rendered only when compiled rows exist.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.claim import Evidence, claim, per_rows, study_table
from analysis.cost import COMPILED_SUFFIX, memory_metric, other_options, variant_names, variant_order
from analysis.cost_claims import LINEAR_MAX, MAX_CI_HALF_WIDTH, MIN_FIT_SIZES, QUADRATIC_BAND
from analysis.fit import PowerFit, fit_power_law
from analysis.slices import fix_axes, matches, number_text, self_attention, window_label

# One panel of the study holds these axes at one value (chosen where the compiled rows are richest)...
COMPILED_FIXED = ("scope", "batch", "heads", "head_dim", "scale", "input_std")
# ...and varies these.
COMPILED_VARY = ("seq_len", "backend", "backend_options", "causal", "window", "mode")
# A back end that compiles without a `compile` option (flex) has no eager self; its compile time is
# weighed against the eager fused kernel it stands in for.
EAGER_REFERENCE = "sdpa"
MODES = ("fwd", "fwd_bwd")

COMPILED = "Compiled back ends"
COMPILE_COST_CAPTION = (
    "What compiling buys and costs, per mode and mask, at the largest n where the compiled variant and its eager "
    "counterpart (the back end without compile; sdpa for flex, which has no eager self) were both timed: time per "
    "call (fastest repeat), compiled / eager, the median first-call time of the points that compiled new code "
    "(recompiled; the count in brackets), flex's block-mask build at that n, and the calls after which compiling has paid "
    "for itself: the smallest k with compile_s + (k - 1) x t_compiled <= k x t_eager, i.e. k >= (compile_s - "
    "t_compiled) / (t_eager - t_compiled); never when the compiled call is not faster. Informational: a compile "
    "time on a loaded machine is no basis for a verdict.")


def compiled_code(rows: pd.DataFrame) -> pd.Series:
    """Whether each row ran compiled code: its kernel label says so ('-compiled', flex's 'compiled'), or it asked
    for compile=true (a row that failed before its label was set)."""
    kernel = rows["kernel"].str.endswith("compiled")
    return kernel | variant_names(rows).str.endswith(COMPILED_SUFFIX)


def mask_text(rows: pd.DataFrame) -> pd.Series:
    """'no mask', 'causal', 'causal window 256' or 'window 256'."""
    window = rows["window"]
    causal = rows["causal"].astype(bool)
    text = np.where(causal, "causal", "no mask")
    windowed = window.notna()
    text = np.where(windowed, np.where(causal, "causal window ", "window ")
                    + window.map(lambda w: window_label(w) if pd.notna(w) else ""), text)
    return pd.Series(text, index=rows.index)


def mask_order(mask: str) -> tuple:
    """Sort key: no mask, causal, then windows by size."""
    words = mask.split()
    return (mask != "no mask", mask != "causal", float(words[-1]) if words[-1].isdigit() else 0.0, mask)  # a pair: by text


def mode_order(mode: str) -> int:
    return MODES.index(mode) if mode in MODES else len(MODES)


def _eager_of(variant: str) -> str:
    return variant[: -len(COMPILED_SUFFIX)] if variant.endswith(COMPILED_SUFFIX) else EAGER_REFERENCE


def compiled_study(rows: pd.DataFrame) -> pd.DataFrame:
    """Self-attention rows (every status) of the slices where compiled variants ran, per device and precision,
    with `variant`, `compiled` (ran compiled code), `mask`, `panel` (device · precision), `slice` (its fixed
    axes) and numeric `compile_s`, `block_mask_s`; empty when no row ran compiled code.

    Each device x precision keeps the fixed axes (heads, d_k, batch, ...) where its compiled rows cover the
    most, the eager rows at those axes beside them, and only the (mode, mask) pairs a compiled variant ran;
    each variant keeps its most measured option set (other options are other experiments)."""
    rows = self_attention(rows, vary=COMPILED_VARY)  # the other ablation axes at their plain value
    if rows.empty:
        return rows
    rows = rows.assign(variant=variant_names(rows), compiled=compiled_code(rows))
    if not rows["compiled"].any():
        return rows.iloc[0:0]
    frames = []
    for (precision, device), part in rows.groupby(["precision", "device_label"], sort=True):
        if not part["compiled"].any():
            continue
        chosen = fix_axes(part[part["compiled"]], COMPILED_FIXED, COMPILED_VARY)
        for axis, value in chosen.fixed.items():
            part = part[matches(part[axis], value)]
        part = part.assign(mask=mask_text(part), panel=f"{precision} · {device}",
                           slice=chosen.describe(always=("heads", "head_dim", "batch")))
        ran = set(zip(part.loc[part["compiled"], "mode"], part.loc[part["compiled"], "mask"]))
        part = part[[pair in ran for pair in zip(part["mode"], part["mask"])]]
        others = part["backend_options"].map(other_options)
        usual = others.groupby(part["variant"]).agg(lambda s: s.value_counts().sort_index().idxmax())
        frames.append(part[others == part["variant"].map(usual)])
    if not frames:
        return rows.iloc[0:0]
    return pd.concat(frames)  # compile_s, block_mask_s and recompiled arrive typed (analysis.load)


def points(study: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One value per (panel, mode, mask, variant, seq_len) of ok rows: the fastest repeat for time (load only
    adds time, as analysis.cost takes it), the median otherwise."""
    ok = study[(study["status"] == "ok")]
    ok = ok[np.isfinite(ok[metric]) & (ok[metric] > 0)]
    keys = ["device_label", "precision", "panel", "slice", "mode", "mask", "variant", "compiled", "seq_len"]
    return ok.groupby(keys, sort=True)[metric].agg("min" if metric == "time_ms" else "median").rename(
        "value").reset_index()


def compile_costs(study: pd.DataFrame) -> pd.DataFrame:
    """Per (panel, mode, mask, variant): the median compile_s of its recompiled rows and how many there were."""
    paid = study[(study["status"] == "ok") & study["recompiled"] & study["compile_s"].notna()]
    keys = ["panel", "mode", "mask", "variant"]
    return paid.groupby(keys, sort=True)["compile_s"].agg(["median", "size"]).rename(
        columns={"median": "compile_s", "size": "compiles"}).reset_index()


def _memory_fits(study: pd.DataFrame, masked: bool = False) -> dict[tuple[str, str, str], PowerFit | None]:
    """{(panel, mode, variant): the no-mask peak-memory fit against n}; masked: {(panel, mode · mask,
    variant): the fit of each mask's rows}."""
    metric = memory_metric(study)
    mem = points(study, metric)
    mem = mem[mem["mask"] != "no mask"] if masked else mem[mem["mask"] == "no mask"]
    mem = mem.assign(mode=mem["mode"] + " · " + mem["mask"]) if masked else mem
    return {(panel, mode, variant): fit_power_law(part["seq_len"].to_numpy(), part["value"].to_numpy(),
                                                   min_points=MIN_FIT_SIZES)
            for (panel, mode, variant), part in mem.groupby(["panel", "mode", "variant"], sort=True)}


def _counted(fit: PowerFit | None) -> bool:
    return (fit is not None and fit.n_points >= MIN_FIT_SIZES
            and (fit.ci_high - fit.ci_low) / 2 <= MAX_CI_HALF_WIDTH)


def _fit_text(fit: PowerFit | None) -> str:
    if fit is None:
        return "no fit"
    text = f"{fit.label()} over n={number_text(fit.n_min)}–{number_text(fit.n_max)}"
    return text if _counted(fit) else text + " (CI too wide or too few sizes, not counted)"


def _reading(b: float) -> str:
    if b <= LINEAR_MAX:
        return "fused: no n×n matrix"
    if b >= QUADRATIC_BAND[0]:
        return "still materializes the n×n matrix"
    return "neither n nor n²"


@per_rows
def _fits(rows: pd.DataFrame) -> tuple[dict, dict] | None:
    """(no-mask fits, per-mask fits) of the study's peak memory (_memory_fits); None when no row ran compiled code."""
    study = compiled_study(rows)
    if study.empty:
        return None
    return _memory_fits(study), _memory_fits(study, masked=True)


def _naive_evidence(fits: dict) -> Evidence | None:
    passes, parts = [], []
    keys = sorted({(p, m) for p, m, v in fits if v == "naive" + COMPILED_SUFFIX},
                  key=lambda k: (k[0], mode_order(k[1].split(" · ")[0]), k[1]))
    for panel, mode in keys:
        fit = fits[(panel, mode, "naive" + COMPILED_SUFFIX)]
        text = f"{panel} {mode}: naive {_fit_text(fits.get((panel, mode, 'naive')))}; naive+compile {_fit_text(fit)}"
        if fit is not None:
            text += f" → {_reading(fit.exponent)}"
        if _counted(fit):
            passes.append(fit.exponent <= LINEAR_MAX)
        parts.append(text)
    return Evidence("; ".join(parts), tuple(passes)) if parts else None


@claim("compiled_naive_fused", "torch.compile fuses naive attention: compiled, it no longer materializes the n×n "
       "score matrix (peak memory grows as n, not n²)",
       rule=f"no mask, per device, precision and mode: naive+compile's peak-memory exponent b <= {LINEAR_MAX} (fused: "
            f"no n x n matrix); b >= {QUADRATIC_BAND[0]} reads as still materializing, between as neither. Memory is "
            "the allocator's exact peak (peak_alloc_bytes; peak RSS for CSVs without it); Theil-Sen fits over >= "
            f"{MIN_FIT_SIZES} of the largest sizes with a 95% CI no wider than ±{MAX_CI_HALF_WIDTH} count (wider ones "
            "are listed, not counted); eager naive's exponent is shown beside it",
       metrics=("memory",), experiment="compiled (more seq_len values)", study=COMPILED)
def compiled_naive_fused(rows: pd.DataFrame) -> Evidence | None:
    fits = _fits(rows)
    return _naive_evidence(fits[0]) if fits else None


@claim("compiled_naive_fused_masked", "With a mask (causal, sliding window) too, compiled naive attention no longer "
       "materializes the n×n matrix",
       rule="as the rule above, for each mask the rows ran with (causal, windows), per device, precision and mode: "
            f"naive+compile's peak-memory exponent b <= {LINEAR_MAX}. The mask is part of the compiled steps (built "
            "inside from each query's key interval), so a compiler that fuses attention with a mask removes it too",
       metrics=("memory",), experiment="compiled (more seq_len values)", study=COMPILED)
def compiled_naive_fused_masked(rows: pd.DataFrame) -> Evidence | None:
    fits = _fits(rows)
    return _naive_evidence(fits[1]) if fits else None


@claim("compiled_fused_linear", "Compiled fused kernels (chunked+compile, flex_attention) keep memory linear in n",
       rule=f"no mask, per device, precision and mode: the peak-memory exponent b of chunked+compile and flex <= "
            f"{LINEAR_MAX} (same fit rule)",
       metrics=("memory",), experiment="compiled (more seq_len values)", study=COMPILED)
def compiled_fused_linear(rows: pd.DataFrame) -> Evidence | None:
    fits = _fits(rows)
    if not fits:
        return None
    passes, parts = [], []
    variants = ("chunked" + COMPILED_SUFFIX, "flex")
    for (panel, mode, variant), fit in sorted(fits[0].items(), key=lambda kv: (kv[0][0], mode_order(kv[0][1]), kv[0][2])):
        if variant not in variants:
            continue
        if _counted(fit):
            passes.append(fit.exponent <= LINEAR_MAX)
        parts.append(f"{panel} {mode}: {variant} {_fit_text(fit)}")
    return Evidence("; ".join(parts), tuple(passes)) if parts else None


def break_even_calls(compile_s: float, t_compiled_ms: float, t_eager_ms: float) -> float:
    """Calls after which compiling has paid off: the smallest k with compile_s + (k-1) t_c <= k t_e; inf when the
    compiled call is not faster, 1 when the first call (compilation included) already beats an eager call."""
    t_c, t_e = t_compiled_ms / 1e3, t_eager_ms / 1e3
    if not (math.isfinite(compile_s) and t_e > t_c):
        return math.inf
    return float(max(1, math.ceil((compile_s - t_c) / (t_e - t_c))))


def compile_cost_rows(study: pd.DataFrame) -> pd.DataFrame:
    """One row per (panel, mode, mask, compiled variant): times at the largest n both it and its eager
    counterpart were timed, the time ratio, compile_s, block_mask_s and the break-even calls (numbers)."""
    times = points(study, "time_ms")
    costs = compile_costs(study).set_index(["panel", "mode", "mask", "variant"])
    flex_mask = study[(study["status"] == "ok") & study["block_mask_s"].notna()]
    flex_mask = flex_mask.groupby(["panel", "mode", "mask", "variant", "seq_len"])["block_mask_s"].median()
    out = []
    for (panel, mode, mask), part in times.groupby(["panel", "mode", "mask"], sort=True):
        by_variant = {v: g.set_index("seq_len")["value"] for v, g in part.groupby("variant")}
        for variant in sorted(part.loc[part["compiled"], "variant"].unique()):
            eager = _eager_of(variant)
            if eager not in by_variant:
                continue
            both = by_variant[variant].index.intersection(by_variant[eager].index)
            if both.empty:
                continue
            n = float(both.max())
            t_c, t_e = float(by_variant[variant][n]), float(by_variant[eager][n])
            key = (panel, mode, mask, variant)
            compile_s = float(costs.loc[key, "compile_s"]) if key in costs.index else math.nan
            out.append(dict(panel=panel, mode=mode, mask=mask, variant=variant, eager=eager, seq_len=n,
                            time_ms=t_c, eager_time_ms=t_e, ratio=t_c / t_e, compile_s=compile_s,
                            compiles=int(costs.loc[key, "compiles"]) if key in costs.index else 0,
                            block_mask_s=float(flex_mask.get((*key, n), math.nan)),
                            break_even=break_even_calls(compile_s, t_c, t_e) if math.isfinite(compile_s) else math.nan))
    frame = pd.DataFrame(out, columns=["panel", "mode", "mask", "variant", "eager", "seq_len", "time_ms",
                                       "eager_time_ms", "ratio", "compile_s", "compiles", "block_mask_s", "break_even"])
    keys = {"mode": mode_order, "mask": mask_order, "variant": variant_order}
    return frame.sort_values(["panel", "mode", "mask", "variant"], key=lambda s: s.map(keys[s.name])
                             if s.name in keys else s).reset_index(drop=True)


def _seconds(s: float) -> str:
    return "—" if not math.isfinite(s) else f"{s:.3g} s"


def _calls(k: float) -> str:
    if math.isnan(k):
        return "— (no recompiled row)"
    return "never (not faster)" if math.isinf(k) else f"{k:,.0f}"


@study_table(COMPILED, COMPILE_COST_CAPTION)
def compile_cost_table(rows: pd.DataFrame) -> pd.DataFrame:
    """compile_cost_rows as the report's text table; empty when no row ran compiled code."""
    study = compiled_study(rows)
    table = compile_cost_rows(study) if not study.empty else pd.DataFrame()
    if table.empty:
        return table
    return pd.DataFrame({
        "Device": table["panel"], "Mode": table["mode"], "Mask": table["mask"],
        "Compiled vs eager": table["variant"] + " vs " + table["eager"], "n": table["seq_len"].map(number_text),
        "ms / call (compiled / eager)": [f"{c:.3g} / {e:.3g}" for c, e in zip(table["time_ms"], table["eager_time_ms"])],
        "time ×": table["ratio"].map(lambda r: f"{r:.2f}"),
        "compile_s (recompiled rows)": [f"{_seconds(s)} ({k})" for s, k in zip(table["compile_s"], table["compiles"])],
        "block mask": table["block_mask_s"].map(_seconds),
        "break-even calls": table["break_even"].map(_calls)})
