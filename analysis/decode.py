"""The decode study read from rows: the roofline, decode steps, generation with and without the cache.

Every row with `flops` and `bytes_moved` has an arithmetic intensity (FLOPs per byte) and sits on
its device's roofline: achieved TFLOP/s under min(matmul peak, intensity x bandwidth peak). A
decode step (a few queries against a long K/V cache) does ~1 FLOP per byte, far left of the
ridge point: memory-bound. Generation rows (scope=generate) give the cost of one more token
against the context: linear with the KV-cache, quadratic without (each step recomputes every
query of the prefix). The claims here are rendered only when their rows exist (experiment=decode).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.claim import Evidence, claim
from analysis.fit import fit_power_law
from analysis.slices import number_text, plain_rows

DECODE_MAX_Q = 16  # a core row with q_len <= this and < seq_len is a decode step (1, or a speculative few)
CACHE_EXPONENT = (0.7, 1.3)  # fitted exponent of the time per token vs the context, with the cache
NO_CACHE_EXPONENT = (1.6, 2.4)  # and without it
FIT_POINTS = 4  # the fit uses each series' largest contexts: fixed per-step costs bend the small end
MEMORY_BOUND_FRACTION = 0.3  # a decode step's gbps / the device's copy bandwidth, for its best back end
GQA_TIME_TOLERANCE = 0.5  # time(kv=heads) / time(kv=1) within this factor of heads / kv_heads (best back end)

DECODE = "Decoding and the KV-cache"
# The ablation axis the decode steps and generation loops vary; the others stay at their plain value (the
# roofline places every row, whatever it measured).
DECODE_AXES = ("kv_heads",)


def _ok(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[rows["status"] == "ok"]


def phase(rows: pd.DataFrame) -> pd.Series:
    """'generate', 'decode' (a few queries against a longer cache) or 'prefill' (everything else)."""
    scope = rows["scope"] if "scope" in rows else pd.Series("core", index=rows.index)
    decode = (rows["q_len"] < rows["seq_len"]) & (rows["q_len"] <= DECODE_MAX_Q)
    return pd.Series(np.where(scope == "generate", "generate", np.where(decode, "decode", "prefill")), index=rows.index)


def roofline_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """ok rows with a measured time, FLOPs and bytes: `intensity` (FLOPs/byte), `achieved_tflops`, `phase`."""
    need = ("flops", "bytes_moved", "time_ms")
    if any(c not in rows for c in need):
        return rows.iloc[0:0]
    ok = _ok(rows)
    ok = ok[ok["flops"].notna() & ok["bytes_moved"].notna() & (ok["bytes_moved"] > 0) & (ok["time_ms"] > 0)]
    return ok.assign(intensity=ok["flops"] / ok["bytes_moved"], achieved_tflops=ok["flops"] / (ok["time_ms"] * 1e9),
                     phase=phase(ok))


def ceilings(part: pd.DataFrame) -> tuple[float | None, float | None]:
    """(matmul peak TFLOP/s, copy bandwidth GB/s) of one device's rows: the best measured in any
    process, raised to the best any row achieved (a peak measured while other processes loaded a
    shared CPU can fall below what a later row reaches, and a ceiling below a point is no ceiling)."""
    def best(peak: str, achieved: str) -> float | None:
        if peak not in part or part[peak].isna().all():
            return None
        reached = part[achieved].max() if achieved in part and part[achieved].notna().any() else 0.0
        return float(max(part[peak].max(), reached))

    return best("device_peak_tflops", "achieved_tflops"), best("device_peak_gbps", "gbps")


def decode_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """ok forward decode steps of the core with `ms_per_step`."""
    ok = roofline_rows(plain_rows(rows, vary=DECODE_AXES))
    ok = ok[(ok["phase"] == "decode") & (ok["mode"] == "fwd")]
    return ok.assign(ms_per_step=ok["time_ms"])


def generate_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """ok scope=generate rows with `ms_per_token` and `context` (the mean context of the loop's steps)."""
    if "scope" not in rows or "new_tokens" not in rows:
        return rows.iloc[0:0]
    ok = _ok(plain_rows(rows, vary=DECODE_AXES))
    ok = ok[ok["scope"] == "generate"]
    if ok.empty:
        return ok
    cache = ok["kv_cache"].map(lambda v: str(v).strip().lower() in ("true", "1", "1.0"))
    return ok.assign(kv_cache=cache, ms_per_token=ok["time_ms"] / ok["new_tokens"],
                     context=ok["seq_len"] + (ok["new_tokens"] + 1) / 2)


def context_series(gen: pd.DataFrame) -> pd.DataFrame:
    """Per (device, back end, cache): ms per token against the context, at the new_tokens most prompts share."""
    if gen.empty:
        return gen
    keys = ["device_label", "backend", "precision", "kv_cache", "batch", "heads"]  # an FP8 cache is its own series
    counts = gen.groupby(keys + ["new_tokens"])["seq_len"].nunique().rename("prompts").reset_index()
    best = counts.sort_values("prompts").groupby(keys).tail(1)[keys + ["new_tokens"]]
    out = gen.merge(best, on=keys + ["new_tokens"])
    return out.groupby(keys + ["context"], as_index=False)["ms_per_token"].median()


def fitted_exponents(gen: pd.DataFrame) -> pd.DataFrame:
    """Per (device, back end, cache): the log-log slope of ms per token against context over its FIT_POINTS largest."""
    series = context_series(gen)
    out = []
    for (device, backend, precision, cache, _, _), part in series.groupby(
            ["device_label", "backend", "precision", "kv_cache", "batch", "heads"]):
        part = part.sort_values("context").tail(FIT_POINTS)
        if len(part) < 3:
            continue
        # the project's one fit: Theil-Sen on log-log, so one step slowed by load moves it little
        fit = fit_power_law(part["context"].to_numpy(), part["ms_per_token"].to_numpy(), min_points=len(part))
        if fit is None:
            continue
        out.append(dict(device_label=device, backend=backend, precision=precision, kv_cache=cache, exponent=fit.exponent,
                        lo=fit.n_min, hi=fit.n_max))
    return pd.DataFrame(out)


def _exponent(rows: pd.DataFrame, cache: bool, band: tuple[float, float]) -> Evidence | None:
    fits = fitted_exponents(generate_rows(rows))
    part = fits[fits["kv_cache"] == cache] if not fits.empty else fits
    if part.empty:
        return None
    evidence = "; ".join(f"{r['device_label']} {r['backend']}"
                         + (f" {r['precision']}" if str(r["precision"]).startswith("fp8") else "") + f": {r['exponent']:.2f} "
                         f"(context {number_text(r['lo'])}-{number_text(r['hi'])})" for _, r in part.iterrows())
    return Evidence(evidence, tuple(bool(b) for b in part["exponent"].between(*band)))


@claim("cache_linear", "With the KV-cache, one more token costs time linear in the context (exponent ~1)",
       rule=f"with the cache: exponent of ms per new token against the mean context, fitted over each back end's "
            f"{FIT_POINTS} largest prompts, within [{CACHE_EXPONENT[0]}, {CACHE_EXPONENT[1]}]",
       experiment="decode", study=DECODE)
def cache_linear(rows: pd.DataFrame) -> Evidence | None:
    return _exponent(rows, True, CACHE_EXPONENT)


@claim("no_cache_quadratic", "Without it, one more token costs time quadratic in the context (exponent ~2): each "
       "step recomputes every query of the prefix",
       rule=f"without the cache: the same exponent within [{NO_CACHE_EXPONENT[0]}, {NO_CACHE_EXPONENT[1]}]",
       experiment="decode", study=DECODE)
def no_cache_quadratic(rows: pd.DataFrame) -> Evidence | None:
    return _exponent(rows, False, NO_CACHE_EXPONENT)


def _largest(part: pd.DataFrame, col: str) -> pd.DataFrame:
    return part[part[col] == part[col].max()]


@claim("decode_memory_bound", "A decode step is memory-bound: little arithmetic per byte, and its speed is a large "
       "fraction of the device's bandwidth",
       rule="q_len=1, kv_heads=heads, at the largest cache: every row's FLOPs/byte < the ridge point (matmul peak / "
            f"copy bandwidth), and the best back end's gbps >= {MEMORY_BOUND_FRACTION} x device_peak_gbps",
       metrics=("traffic",), experiment="decode", study=DECODE)
def decode_memory_bound(rows: pd.DataFrame) -> Evidence | None:
    dec, roof = decode_rows(rows), roofline_rows(rows)
    # Multi-head rows (kv_heads = heads): GQA raises a step's intensity by heads / kv_heads, toward the ridge.
    one = dec[(dec["q_len"] == 1) & (dec["kv_heads"] == dec["heads"])]
    if one.empty or "device_peak_gbps" not in one or one["device_peak_gbps"].isna().all():
        return None
    parts, passes = [], []
    for device, part in one.groupby("device_label"):
        peak_tflops, peak_gbps = ceilings(roof[roof["device_label"] == device])
        if not peak_tflops or not peak_gbps:
            continue
        ridge = peak_tflops * 1e12 / (peak_gbps * 1e9)
        part = _largest(part, "seq_len")
        fraction = part.groupby("backend")["gbps"].max() / peak_gbps
        left = bool((part["intensity"] < ridge).all())
        passes.append(left and float(fraction.max()) >= MEMORY_BOUND_FRACTION)
        parts.append(f"{device}, cache {number_text(float(part['seq_len'].max()))}: {part['intensity'].max():.2f} FLOPs/byte "
                     f"vs ridge {ridge:.1f}; gbps / peak {peak_gbps:.3g} GB/s: "
                     + ", ".join(f"{b} {f:.2f}" for b, f in fraction.sort_values(ascending=False).items()))
    if not passes:
        return None
    return Evidence("; ".join(parts), tuple(passes))


@claim("gqa_divides_decode", "GQA divides the KV-cache and the decode time by about heads / kv_heads",
       rule="q_len=1, largest cache and batch: kv_cache_bytes(kv=heads)/kv_cache_bytes(kv=1) = heads, and the best "
            f"back end's time ratio within x{GQA_TIME_TOLERANCE}..x{1 / GQA_TIME_TOLERANCE:g} of it",
       experiment="decode", study=DECODE)
def gqa_divides_decode(rows: pd.DataFrame) -> Evidence | None:
    dec = decode_rows(rows)
    one = dec[(dec["q_len"] == 1) & (dec["kv_heads"].notna())]
    parts, passes = [], []
    for device, part in one.groupby("device_label"):
        part = _largest(_largest(part, "seq_len"), "batch")
        heads = float(part["heads"].iloc[0])
        full, single = part[part["kv_heads"] == heads], part[part["kv_heads"] == 1]
        if full.empty or single.empty:
            continue
        cache_ratio = float(full["kv_cache_bytes"].median() / single["kv_cache_bytes"].median())
        times = (full.groupby("backend")["time_ms"].median() / single.groupby("backend")["time_ms"].median()).dropna()
        if times.empty:
            continue
        best = float(times.max())
        passes.append(abs(cache_ratio - heads) < 1e-9
                      and heads * GQA_TIME_TOLERANCE <= best <= heads / GQA_TIME_TOLERANCE)
        parts.append(f"{device}, cache {number_text(float(part['seq_len'].max()))}, batch {number_text(float(part['batch'].max()))}: "
                     f"cache ÷{cache_ratio:g}, time ÷ " + ", ".join(f"{b} {t:.2f}" for b, t in times.sort_values(ascending=False).items())
                     + f" (heads / kv_heads = {heads:g})")
    if not passes:
        return None
    return Evidence("; ".join(parts), tuple(passes))
