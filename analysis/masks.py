"""The masks and GQA studies read from rows: which mask each row ran, and their claims with verdicts.

Masks: at the largest seq_len each back end measured, time (per sequence: the padding grid runs
two sequences of unequal length) against the mask density, the fraction of (query, key) pairs
the mask leaves. A back end that skips hidden work should approach "time proportional to
density"; one that materializes every score (naive) cannot. GQA: time against kv_heads at a
fixed number of query heads; the FLOPs do not change, the K/V bytes shrink by heads/kv_heads.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.claim import Evidence, claim, per_rows
from analysis.cost import variant_labels, variant_names
from analysis.slices import fix_axes, number_text, self_attention, window_label
from selfattn.point import ELEMENT_BYTES

MASKS_FIXED = ("device_label", "precision", "heads", "head_dim", "scale", "input_std")
MASK_AXES = ("window", "pad_frac", "documents")  # what the masks study varies (causal besides)
GQA_FIXED = ("device_label", "precision", "heads", "head_dim", "scale", "input_std", "causal", "batch")
CHUNKED_SLACK = 0.3  # chunked's time ratio may exceed the density by this much (blocks on a boundary, their masks)
NAIVE_NO_SAVING = 0.8  # naive's time ratio at or above this for every mask: it saves nothing
BOOL_MASK_COST = 1.1  # SDPA with an explicit boolean causal mask at least this much slower than is_causal
GQA_SAME_TIME = (0.75, 1.33)  # time(kv_heads=1) / time(kv_heads=heads): the FLOPs are the same


def mask_kind(row: pd.Series) -> str:
    """'none', 'causal', 'window 256' (causal or not), 'window [63, 0]' (a pair), 'padding', 'documents' or a
    combination."""
    parts = []
    if row.get("causal") and pd.isna(row.get("window")):
        parts.append("causal")
    if pd.notna(row.get("window")):
        parts.append(f"window {window_label(row['window'])}")
    if (row.get("pad_frac") or 0) > 0:
        parts.append("padding")
    if pd.notna(row.get("documents")):
        parts.append("documents")
    return " + ".join(parts) or "none"


def mask_study(rows: pd.DataFrame) -> pd.DataFrame:
    """ok forward rows of the core, plain K/V heads, at each (device, precision, variant)'s largest
    seq_len, with `mask`, `variant` (the back end, '+compile' when compiled), `label` (variant and options)
    and per-sequence `time_per_seq_ms`, `alloc_per_seq_bytes`."""
    ok = self_attention(rows, vary=MASK_AXES)
    ok = ok[(ok["status"] == "ok") & (ok["scope"] == "core") & (ok["mode"] == "fwd")]
    if ok.empty or "mask_density" not in ok or ok["mask_density"].isna().all():
        return ok.iloc[0:0]
    ok = ok.assign(mask=ok.apply(mask_kind, axis=1))
    # One slice: rows of other studies (another head count, d_k, precision) never mix into it.
    ok = fix_axes(ok, MASKS_FIXED, ("mask", "backend", "seq_len", "batch", *MASK_AXES)).rows
    ok = ok.assign(label=variant_labels(ok), variant=variant_names(ok))
    # A mask study varies the classic masks (the quick study only causal on/off); window pairs join one, but do
    # not make one: the variants study's pairs beside its plain call answer that study's questions
    classic = ok["mask"][~ok["window"].map(lambda w: isinstance(w, str))]
    if classic.nunique() < 3:
        return ok.iloc[0:0]
    memory = ok["peak_alloc_bytes"] if "peak_alloc_bytes" in ok and ok["peak_alloc_bytes"].notna().any() else ok["peak_mem_bytes"]
    ok = ok.assign(time_per_seq_ms=ok["time_ms"] / ok["batch"], alloc_per_seq_bytes=memory / ok["batch"])
    # The largest n at which the variant also ran without a mask: the baseline every ratio needs (a compiled
    # variant is other code: its baseline is its own).
    keys = ["device_label", "precision", "variant"]
    unmasked = ok[ok["mask"] == "none"].groupby(keys)["seq_len"].max().rename("largest")
    ok = ok.join(unmasked, on=keys)
    return ok[ok["seq_len"] == ok["largest"]].drop(columns="largest")


def baseline_ms(study: pd.DataFrame) -> pd.Series:
    """Per (device, precision, variant): its time per sequence without a mask (other options at their defaults)."""
    keys = ["device_label", "precision", "variant"]
    return study[study["mask"] == "none"].groupby(keys)["time_per_seq_ms"].median().rename("base_ms")


def _ratios(study: pd.DataFrame) -> pd.DataFrame:
    """Per (device, precision, variant, mask): time per sequence / the variant's time without a mask."""
    keys = ["device_label", "precision", "variant"]
    out = study.join(baseline_ms(study), on=keys)
    out = out[out["base_ms"].notna() & (out["mask"] != "none")]
    return out.assign(ratio=out["time_per_seq_ms"] / out["base_ms"])


MASKS = "Masks"
GQA = "Grouped-query attention"


@per_rows
def _study_ratios(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(mask_study, its _ratios): what the mask claims read; both empty when the rows hold no mask study."""
    study = mask_study(rows)
    return study, (_ratios(study) if not study.empty else study)


def _saving(rows: pd.DataFrame, backend: str, passes_fn) -> Evidence | None:
    study, ratios = _study_ratios(rows)
    if study.empty:
        return None
    part = ratios[ratios["variant"] == backend]  # the eager back end; a compiled variant is other code
    if part.empty:
        return None
    evidence = "; ".join(f"{r['mask']}: ×{r['ratio']:.2f} at density {r['mask_density']:.2f}"
                         for _, r in part.sort_values("mask_density").iterrows())
    n = number_text(float(part["seq_len"].max()))
    return Evidence(f"n={n}, time per sequence vs no mask — {evidence}", tuple(bool(p) for p in passes_fn(part)))


@claim("chunked_mask_saving", "A block-skipping back end (chunked) saves in proportion to what the mask hides",
       rule="at the largest n, for every mask: chunked's time per sequence / its time without a mask <= the mask "
            f"density + {CHUNKED_SLACK}",
       experiment="masks", study=MASKS)
def chunked_mask_saving(rows: pd.DataFrame) -> Evidence | None:
    return _saving(rows, "chunked", lambda r: r["ratio"] <= r["mask_density"] + CHUNKED_SLACK)


@claim("naive_mask_no_saving", "The materialized back end (naive) saves nothing from a mask: it computes all n² "
       "scores and adds -inf",
       rule=f"at the largest n, for every mask: naive's time ratio >= {NAIVE_NO_SAVING}",
       experiment="masks", study=MASKS)
def naive_mask_no_saving(rows: pd.DataFrame) -> Evidence | None:
    return _saving(rows, "naive", lambda r: r["ratio"] >= NAIVE_NO_SAVING)


@claim("sdpa_bool_mask_cost", "SDPA's is_causal beats the same causal mask passed as a boolean attn_mask",
       rule=f"at the largest n: SDPA with the causal mask as a boolean attn_mask / SDPA with is_causal >= "
            f"{BOOL_MASK_COST}",
       experiment="masks", study=MASKS)
def sdpa_bool_mask_cost(rows: pd.DataFrame) -> Evidence | None:
    study, _ = _study_ratios(rows)
    if study.empty:
        return None
    sdpa = study[(study["backend"] == "sdpa") & (study["mask"] == "causal")]
    if sdpa["label"].nunique() < 2:
        return None
    bool_rows = sdpa[sdpa["backend_options"].str.contains('"bool_mask": true')]
    flag_rows = sdpa[~sdpa["backend_options"].str.contains('"bool_mask": true')]
    if not len(bool_rows) or not len(flag_rows):
        return None
    ratio = float(bool_rows["time_per_seq_ms"].median() / flag_rows["time_per_seq_ms"].median())
    return Evidence(f"n={number_text(float(sdpa['seq_len'].max()))}: boolean mask "
                    f"{bool_rows['time_per_seq_ms'].median():.3g} ms vs is_causal "
                    f"{flag_rows['time_per_seq_ms'].median():.3g} ms (×{ratio:.2f})", (ratio >= BOOL_MASK_COST,))


def gqa_study(rows: pd.DataFrame) -> pd.DataFrame:
    """ok core rows that vary kv_heads at a fixed number of query heads, with `label` and `kv_bytes`."""
    ok = self_attention(rows, vary=("kv_heads",))
    ok = ok[(ok["status"] == "ok") & (ok["scope"] == "core")]
    if ok.empty:
        return ok
    varied = ok.groupby(["device_label", "heads", "seq_len", "backend"])["kv_heads"].transform("nunique")
    ok = ok[varied >= 2]
    if ok.empty:
        return ok
    ok = fix_axes(ok, GQA_FIXED, ("kv_heads", "backend", "seq_len", "mode")).rows
    element = ok["precision"].map(ELEMENT_BYTES)
    kv_bytes = 2 * ok["batch"] * ok["kv_heads"] * ok["seq_len"] * ok["head_dim"] * element
    return ok.assign(label=variant_labels(ok), kv_bytes=kv_bytes)


@claim("gqa_same_prefill_time", "Fewer K/V heads leave prefill time about the same (the FLOPs do not change; "
       "the K/V bytes shrink by heads / kv_heads)",
       rule=f"forward, largest n: time(kv_heads=1) / time(kv_heads=heads) within [{GQA_SAME_TIME[0]}, "
            f"{GQA_SAME_TIME[1]}] for every back end",
       experiment="gqa", study=GQA)
def gqa_same_prefill_time(rows: pd.DataFrame) -> Evidence | None:
    study = gqa_study(rows)
    fwd = study[study["mode"] == "fwd"] if not study.empty else study
    if fwd.empty:
        return None
    fwd = fwd[fwd["seq_len"] == fwd.groupby("backend")["seq_len"].transform("max")]
    parts, passes = [], []
    for label, group in fwd.groupby("label"):
        by_kv = group.groupby("kv_heads")["time_ms"].median()
        heads = float(group["heads"].iloc[0])
        if heads not in by_kv.index or by_kv.index.min() == heads:
            continue
        ratio = float(by_kv[by_kv.index.min()] / by_kv[heads])
        parts.append(f"{label}: ×{ratio:.2f} (kv_heads {number_text(float(by_kv.index.min()))} vs {number_text(heads)})")
        passes.append(GQA_SAME_TIME[0] <= ratio <= GQA_SAME_TIME[1] and math.isfinite(ratio))
    if not parts:
        return None
    return Evidence(f"n={number_text(float(fwd['seq_len'].max()))}, forward — " + "; ".join(parts), tuple(passes))


def ideal_line(study: pd.DataFrame) -> pd.DataFrame:
    """Per variant: its time without a mask x density, the 'time proportional to density' line."""
    densities = np.linspace(0.0, 1.0, 21)
    frames = [pd.DataFrame({"device_label": dev, "precision": prec, "variant": variant, "mask_density": densities,
                            "ideal_ms": t * densities})
              for (dev, prec, variant), t in baseline_ms(study).items()]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
