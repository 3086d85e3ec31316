"""The cost family's numbers: per precision and device, one line per back end and mask,
a metric (time, memory, TFLOP/s) vs seq_len with its power-law fit; and a layer's two costs.

Figures 1-4, the exponent table and the cost claims (analysis.cost_claims) all read these, so a
number in the report is the number in the figure. The layer's claim sits beside layer_shares.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

import selfattn.backends as registry  # BACKEND_NAMES is a plain tuple: importing it does not import torch
from analysis.claim import Evidence, claim
from analysis.fit import PowerFit, fit_power_law
from analysis.growth import Growth, judge_growth
from analysis.slices import Slice, fix_axes, self_attention
from scipy.stats import theilslopes

# Where a line ends: the point ran out of memory or the budget guard skipped it (figures 1 and 2 mark them). Only
# these: an incorrect, timed-out or crashed row (analysis.judged) says nothing of where memory runs out; it is no
# point of the line, and analysis.judged names it apart from the facet's `slice_rows`, which hold every status.
LINE_END_STATUSES = ("oom", "skipped_budget")
# The axes a cost line holds fixed within one precision x device panel.
COST_FIXED = ("scope", "mode", "batch", "head_dim", "heads", "scale", "input_std")
COST_VARY = ("seq_len", "backend", "backend_options", "causal")


@dataclass
class Line:
    label: str  # the variant, plus its other options when one variant ran with several (variant_labels)
    backend: str  # the variant: the back end, "+compile" when compiled (variant_names)
    causal: bool
    points: pd.DataFrame  # seq_len, value, low, high (medians over seeds; low/high: p20/p80 for time)
    fit: PowerFit | None
    repeats: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)  # seq_len, value: every ok row
    metric: str = "time_ms"

    @functools.cached_property
    def growth(self) -> Growth:
        """Quadratic, linear or not decided (analysis.growth), judged once from every repeat of the line: time
        keeps each size's fastest repeat, as `points` does; other metrics the median."""
        return judge_growth(self.repeats["seq_len"].to_numpy(dtype=float), self.repeats["value"].to_numpy(dtype=float),
                            reduce="min" if self.metric == "time_ms" else "median")


@dataclass
class Facet:
    precision: str
    device_label: str
    slice_text: str
    lines: list[Line]
    failed: pd.DataFrame  # oom / skipped_budget rows of the slice, with `label`
    device_mem_bytes: float = math.nan
    device_peak_tflops: float = math.nan
    slice_rows: pd.DataFrame = field(default_factory=pd.DataFrame)  # every status (analysis.judged reads the judged)

    @property
    def title(self) -> str:
        return f"{self.precision} · {self.device_label}"


# A back end run with its `compile` option on is a variant of its own ("naive+compile"); the suffix is the
# registry's, so the runner's progress line spells it the same. Every table, figure and claim keys on it.
COMPILED_SUFFIX = registry.COMPILED_SUFFIX


def _options(text: str) -> dict | None:
    """The back end's options of a row (its backend_options JSON); None when not a JSON object."""
    try:
        options = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return None
    return options if isinstance(options, dict) else None


def compile_option(rows: pd.DataFrame) -> pd.Series:
    """Whether each row ran with the back end's `compile` option on (absent or false: eager)."""
    return rows["backend_options"].map(lambda text: bool((_options(text) or {}).get("compile", False)))


def variant_names(rows: pd.DataFrame) -> pd.Series:
    """'naive', or 'naive+compile' for a row with compile on: the back end as the figures and claims name it."""
    return rows["backend"].where(~compile_option(rows), rows["backend"] + COMPILED_SUFFIX)


def variant_order(name: str) -> tuple:
    """Sort key for variants in tables and legends: registry order, a compiled variant right after its back
    end, names the registry does not know last."""
    names = registry.BACKEND_NAMES  # read now: a back end registered later sorts in its place
    base = name[: -len(COMPILED_SUFFIX)] if name.endswith(COMPILED_SUFFIX) else name
    return (names.index(base) if base in names else len(names), base, name != base, name)


def variant_labels(rows: pd.DataFrame) -> pd.Series:
    """'chunked', 'chunked+compile' or, when one variant ran with several other option sets,
    'chunked (q_chunk=256)': the options whose values differ between those sets, not every option
    (a back end's rows spell all of theirs out, e.g. naive's eight)."""
    variants = variant_names(rows)
    labels = variants.copy()
    others = rows["backend_options"].map(other_options)  # `compile` is in the name already
    for variant, group in others.groupby(variants):
        if group.nunique() > 1:
            labels[group.index] = variant + " (" + group.map(_differing_text(group.unique())) + ")"
    return labels


def _differing_text(option_sets: Sequence[str]):
    """text -> 'key=value, ...' of the keys whose values differ between these option sets (their JSON)."""
    parsed = {text: _options(text) for text in option_sets}
    if any(options is None for options in parsed.values()):
        return _options_text
    keys = sorted({k for options in parsed.values() for k in options})
    varying = [k for k in keys if len({json.dumps(options.get(k), sort_keys=True) for options in parsed.values()}) > 1]
    return lambda text: ", ".join(f"{k}={parsed[text].get(k)}" for k in varying) if text in parsed else _options_text(text)


def other_options(text: str) -> str:
    """The options JSON without `compile` (so '{"compile": false}' and '{}' are one option set)."""
    options = _options(text)
    if options is None:
        return text
    return json.dumps({k: v for k, v in sorted(options.items()) if k != "compile"})


def _options_text(text: str) -> str:
    options = _options(text)
    if options is None:
        return text
    if not options:
        return "defaults"
    return ", ".join(f"{k}={v}" for k, v in sorted(options.items()))


# rows objects whose facets are remembered: the report's rows, the claims' when they differ, and the claims' with
# a judged kernel's rows read as results (analysis.claims asks whether a claim would have read them)
_FACETS_KEPT = 3
_facets_memo: list[tuple[pd.DataFrame, dict[str, list]]] = []  # rows -> {metric: facets, _SLICES: the slices}
_SLICES = "(slices)"  # never a column's name: the key of the slices every metric's facets are cut from


def cost_facets(rows: pd.DataFrame, metric: str) -> list[Facet]:
    """Per (precision, device): lines of `metric` vs seq_len; panels with no line of 2+ sizes are dropped.

    Remembered per rows object and metric: figures 1-4, the exponent table and the cost claims read the same
    lines, and fitting them (every line's cost model is bootstrapped) is computed once. Rows are read, never
    changed, by the analysis (as `analysis.claim.per_rows` relies on too); the facets must not be changed either."""
    for seen, by_metric in _facets_memo:
        if seen is rows:  # holding the rows keeps their id from being reused
            break
    else:
        by_metric = {}
        _facets_memo.insert(0, (rows, by_metric))
        del _facets_memo[_FACETS_KEPT:]
    if metric not in by_metric:
        by_metric[metric] = _cost_facets(rows, metric)
    return by_metric[metric]


def _cost_facets(rows: pd.DataFrame, metric: str) -> list[Facet]:
    facets: list[Facet] = []
    for precision, device, panel, chosen, part in _cost_slices(rows):
        ok = part[(part["status"] == "ok") & np.isfinite(part[metric]) & (part[metric] > 0)]
        lines: list[Line] = []
        for (label, causal), group in ok.groupby(["label", "causal"], sort=True):
            points = _points(group, metric)
            fit = fit_power_law(points["seq_len"].to_numpy(), points["value"].to_numpy())
            repeats = group[["seq_len", metric]].rename(columns={metric: "value"})
            lines.append(Line(label, group["variant"].iloc[0], bool(causal), points, fit, repeats, metric))
        if not any(len(line.points) >= 2 for line in lines):
            continue
        failed = part[part["status"].isin(LINE_END_STATUSES)]
        facets.append(Facet(
            precision=str(precision), device_label=str(device),
            slice_text=chosen.describe(always=("head_dim", "heads", "scale")),
            lines=lines, failed=failed,
            device_mem_bytes=float(panel["device_mem_bytes"].median()),
            device_peak_tflops=float(part["device_peak_tflops"].median()),
            slice_rows=part))
    return facets


def _cost_slices(rows: pd.DataFrame) -> list[tuple[Any, Any, pd.DataFrame, Slice, pd.DataFrame]]:
    """Per (precision, device): its rows, the slice fix_axes keeps, and that slice's rows with their line labels.
    The same for every metric, so remembered beside the facets (cost_facets)."""
    for seen, by_metric in _facets_memo:
        if seen is rows and _SLICES in by_metric:
            return by_metric[_SLICES]
    slices = []
    for (precision, device), panel in self_attention(rows).groupby(["precision", "device_label"], sort=True):
        chosen = fix_axes(panel, COST_FIXED, COST_VARY)
        part = chosen.rows.assign(label=variant_labels(chosen.rows), variant=variant_names(chosen.rows))
        slices.append((precision, device, panel, chosen, part))
    for seen, by_metric in _facets_memo:
        if seen is rows:
            by_metric[_SLICES] = slices
    return slices


def memory_metric(rows: pd.DataFrame) -> str:
    """The memory column fits, claims and figure 2 use: the exact allocator peak where rows have it,
    else (CSVs written before it existed) the process's peak RSS."""
    ok = rows[rows["status"] == "ok"] if "status" in rows else rows
    if "peak_alloc_bytes" in ok and (ok["peak_alloc_bytes"] > 0).any():
        return "peak_alloc_bytes"
    return "peak_mem_bytes"


def _points(group: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One point per seq_len: the median over seeds, with the p20/p80 band where there is one.

    Time takes the fastest of the repeats instead: a call's time does not depend on the inputs' values,
    and load from other processes only ever adds time, so the faster of two passes measured minutes
    apart is the one a burst did not hit (quick.yaml times the cost grid twice for this).

    In numpy rather than a pandas groupby: a line holds a few rows, and the groupby's fixed cost was most of the
    time fitting the cost lines took. The values are pandas' (NaN skipped; NaN where a size has none).
    """
    sizes, inverse = np.unique(group["seq_len"].to_numpy(), return_inverse=True)
    if metric == "time_ms":
        columns, reduce = {"value": metric, "low": "time_ms_p20", "high": "time_ms_p80"}, np.min
    else:
        columns, reduce = {"value": metric}, np.median
    points = {"seq_len": sizes}
    for name, column in columns.items():
        values = group[column].to_numpy(dtype=float)
        points[name] = np.array([skipna(reduce, values[inverse == i]) for i in range(len(sizes))])
    if "low" not in points:
        points["low"] = points["value"]
        points["high"] = points["value"]
    return pd.DataFrame(points)


def skipna(reduce, values: np.ndarray) -> float:
    """`reduce` (np.min, np.median) of the values that are not NaN, NaN when none is: what pandas' reductions give."""
    values = values[~np.isnan(values)]
    return float(reduce(values)) if len(values) else math.nan


def causal_ratios(facet: Facet) -> pd.DataFrame:
    """time(no mask) / time(causal) per back end and seq_len, where both were measured."""
    out = []
    by_key = {(line.label, line.causal): line for line in facet.lines}
    for (label, causal), line in by_key.items():
        if causal or (label, True) not in by_key:
            continue
        masked = by_key[(label, True)].points.set_index("seq_len")["value"]
        full = line.points.set_index("seq_len")["value"]
        both = full.index.intersection(masked.index)
        for n in both:
            out.append({"label": label, "backend": line.backend, "seq_len": float(n),
                        "ratio": float(full[n] / masked[n])})
    return pd.DataFrame(out, columns=["label", "backend", "seq_len", "ratio"])


def ideal_causal_ratio(n: np.ndarray | float) -> np.ndarray | float:
    """n^2 / (n(n+1)/2): the saving if a kernel computed only the unmasked scores."""
    return 2.0 * np.asarray(n, dtype=float) / (np.asarray(n, dtype=float) + 1.0)


def exponent_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Fitted time and memory exponents per device, precision, back end and mask, with each line's cost model
    (its n² share at the largest n, the interval, and whether the model follows the rows)."""
    records: dict[tuple, dict] = {}
    for metric, prefix in (("time_ms", "time"), (memory_metric(rows), "mem")):
        for facet in cost_facets(rows, metric):
            for line in facet.lines:
                key = (facet.device_label, facet.precision, line.label, line.causal)
                rec = records.setdefault(key, {
                    "device": facet.device_label, "precision": facet.precision, "backend": line.label,
                    "causal": line.causal, "slice": facet.slice_text})
                fit = line.fit
                rec[f"{prefix}_exponent"] = fit.exponent if fit else math.nan
                rec[f"{prefix}_ci_low"] = fit.ci_low if fit else math.nan
                rec[f"{prefix}_ci_high"] = fit.ci_high if fit else math.nan
                rec[f"{prefix}_sizes"] = (f"{fit.n_min:.0f}–{fit.n_max:.0f} ({fit.n_points})" if fit else "")
                if prefix == "mem" and fit:
                    rec["mem_ratio_4k_128k"] = fit.ratio(4096, 131072)[0]
                model = line.growth.model
                rec[f"{prefix}_n2_share"] = model.share if model else math.nan
                rec[f"{prefix}_n2_share_low"] = model.share_low if model else math.nan
                rec[f"{prefix}_n2_share_high"] = model.share_high if model else math.nan
                rec[f"{prefix}_model_residual"] = model.residual if model else math.nan
                rec[f"{prefix}_model_fits"] = bool(model and model.fits)
    columns = ["device", "precision", "backend", "causal", "time_exponent", "time_ci_low", "time_ci_high",
               "time_sizes", "time_n2_share", "time_n2_share_low", "time_n2_share_high", "time_model_residual",
               "time_model_fits", "mem_exponent", "mem_ci_low", "mem_ci_high", "mem_sizes", "mem_ratio_4k_128k",
               "mem_n2_share", "mem_n2_share_low", "mem_n2_share_high", "mem_model_residual", "mem_model_fits", "slice"]
    table = pd.DataFrame(list(records.values()))
    for col in columns:
        if col not in table:
            table[col] = ("" if col in ("time_sizes", "mem_sizes", "slice")
                          else False if col.endswith("_fits") else math.nan)
    return table[columns].sort_values(["device", "precision", "backend", "causal"]).reset_index(drop=True)


# A layer's two costs, per the chapter's table: the projections' 8·n·d_model² FLOPs (Q, K, V, O:
# four n x d_model by d_model x d_model products) and the attention core's 4·n²·d_model (QKᵀ and AV).
LAYER_MATCH = ("device_label", "precision", "backend", "backend_options", "mode", "batch", "heads", "head_dim",
               "causal", "scale", "input_std", "seq_len")


def flop_core_share(n: np.ndarray | float, d_model: float) -> np.ndarray:
    """The attention core's share of a layer's FLOPs: 4n²d / (8nd² + 4n²d) = n / (n + 2d); 1/2 at n = 2·d_model."""
    n = np.asarray(n, dtype=float)
    return n / (n + 2.0 * d_model)


def layer_shares(rows: pd.DataFrame) -> pd.DataFrame:
    """Per back end and n: the median time of the core alone / of the whole layer (core + projections),
    where both were measured at the same point (self-attention, every other axis equal)."""
    rows = self_attention(rows)
    ok = rows[(rows["status"] == "ok") & (rows["time_ms"] > 0)]
    keys = list(LAYER_MATCH)
    # The fastest repeat of each, as for the cost lines (_points): load only adds time.
    core = ok[ok["scope"] == "core"].groupby(keys, dropna=False)["time_ms"].min().rename("core_ms")
    layer = ok[ok["scope"] == "layer"].groupby(keys, dropna=False)["time_ms"].min().rename("layer_ms")
    both = pd.concat([core, layer], axis=1, join="inner").reset_index()
    columns = [*keys, "core_ms", "layer_ms", "d_model", "share", "flop_share"]
    if both.empty:
        return pd.DataFrame(columns=columns)
    both["d_model"] = both["heads"] * both["head_dim"]
    both["share"] = both["core_ms"] / both["layer_ms"]
    both["flop_share"] = flop_core_share(both["seq_len"], both["d_model"])
    return both[columns].sort_values([*keys[:-1], "seq_len"]).reset_index(drop=True)


def crossover_n(seq_len: np.ndarray, share: np.ndarray) -> float:
    """The n where the share first rises through 1/2, interpolated in log n; NaN when it never does."""
    n = np.asarray(seq_len, dtype=float)
    y = np.asarray(share, dtype=float)
    for i in range(1, len(n)):
        if y[i - 1] < 0.5 <= y[i]:
            t = (0.5 - y[i - 1]) / (y[i] - y[i - 1])
            return float(np.exp(np.log(n[i - 1]) + t * (np.log(n[i]) - np.log(n[i - 1]))))
    return math.nan


CROSSOVER_FACTOR = 4.0  # measured n where the core takes half the layer's time, within this factor of 2·d_model
LAYER_EXPERIMENT = "quick (grid layer: scope=core,layer)"


@claim("layer_crossover", "In a layer, the projections cost 8·n·d_model² and attention 4·n²·d_model: attention "
       "dominates beyond n ≈ 2·d_model",
       rule="scope=layer vs scope=core at the same points: per back end, the core's share of the layer's time rises "
            "with n (Theil-Sen slope > 0) and crosses 1/2 within the measured n, within a factor "
            f"{CROSSOVER_FACTOR:g} of the FLOP crossover n = 2·d_model",
       experiment=LAYER_EXPERIMENT)
def layer_crossover(rows: pd.DataFrame) -> Evidence:
    shares = layer_shares(rows)
    keys = ["device_label", "precision", "backend", "backend_options", "d_model"]
    groups = [(k, g) for k, g in shares.groupby(keys, sort=True) if g["seq_len"].nunique() >= 3] if len(shares) else []
    if not groups:
        return Evidence("no back end timed with scope=layer and scope=core at 3 or more n")
    passes, parts = [], []
    for (device, precision, backend, _options, d_model), g in groups:
        slope = theilslopes(g["share"].to_numpy(), np.log(g["seq_len"].to_numpy(dtype=float)), method="separate")[0]
        cross = crossover_n(g["seq_len"].to_numpy(), g["share"].to_numpy())
        theory = 2.0 * float(d_model)
        near = bool(np.isfinite(cross) and theory / CROSSOVER_FACTOR <= cross <= theory * CROSSOVER_FACTOR)
        passes += [slope > 0, near]
        shown = ", ".join(f"{int(n)}: {v:.2f}" for n, v in zip(g["seq_len"], g["share"]))
        where = f"crosses 1/2 at n≈{cross:.0f}" if np.isfinite(cross) else "never crosses 1/2 in the measured n"
        parts.append(f"{backend} ({precision}, d_model={int(d_model)}): core share of layer time {shown}; {where} "
                     f"(FLOP crossover {theory:.0f})")
    return Evidence("; ".join(parts), tuple(bool(p) for p in passes))
