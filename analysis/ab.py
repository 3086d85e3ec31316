"""A against B, point by point: is B faster, slower or the same, and did it get less exact?

    python -m analysis.compare BEFORE/ AFTER/ --out cmp/              # two sweeps: commits, machines, torch versions
    python -m analysis.compare SWEEP/ --backends sdpa chunked --out cmp/    # one sweep, two back ends
    python -m analysis.compare BEFORE/ AFTER/ --fail-on slower        # CI: exit 1 when any point is slower
    python -m analysis.compare AB/ --out cmp/                         # the rounds of `python -m runners.ab`

A folder of `python -m runners.ab` (A and B measured interleaved in rounds, with its rounds.csv) is judged by
the rounds' rule of analysis/rounds.py: how the pairs vary from round to round. Everything else (two finished
sweeps, one sweep's two back ends) was measured once per side, and this module's rule below judges it from each
row's own samples, which cannot show how a second run lands: the output says so (`ONE_RUN_NOTE`).

Only `ok` rows compare. Points match by every point field but the compared one: two sweeps match on all of
them but `device` (a merged side holding several devices keeps `device` in the key and matches by it), a back
end's options on those both sides know (one added between two commits is left out); two back ends match on
all but `backend` and its options. Per matched point (the rule, in the spirit of asv's
`asv compare`):

- ratio = B's median time / A's (time_ms); its 95% interval: a bootstrap (BOOTSTRAP draws, seeded) of the
  ratio of medians from the two rows' samples (`time_samples_ms`);
- p_value: a two-sided Mann-Whitney U test of the two rows' samples (`scipy.stats.mannwhitneyu`);
- verdict (MIN_RATIO here is the device's factor: 1.1 on CUDA, CPU_MIN_RATIO 1.3 on a CPU, see below):
  `slower` when p < ALPHA and ratio >= MIN_RATIO, `faster` when p < ALPHA and ratio <= 1/MIN_RATIO,
  `same` when the ratio is within MIN_RATIO either way (significant or not: asv's "insignificant" change),
  `not significant` when it is beyond MIN_RATIO but p >= ALPHA (a change the samples cannot tell from chance,
  never called the same); `too few samples` when the two sample sizes cannot reach p < ALPHA at all (or a row kept
  none: an older file); `noisy` when either row's timing was flagged noisy (selfattn/measure/noise.py): its
  samples say how it varied within its own window, not how much a busy machine moved it between the two runs
  (on a loaded 2-core machine one point's median moved 100x from one sweep to the next, each interval narrow),
  so a noisy pair is never called faster, slower or the same;
- accuracy: B is `less exact` when its rel_rms_err > ACCURACY_FACTOR x A's + the precision's epsilon
  (`more exact` the other way), else `same`.

Points only one side has are listed. Writes comparison.csv (one row per matched point, with each side's
point_id and the command that measures it again) and comparison.png (the ratios and their intervals against
seq_len); prints the table and the reproduction commands of the points it names (slower, faster, less exact).
Reads only CSV files.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from analysis.load import NoUsableResults, load
from analysis.repro import repro_command
from selfattn.point import FIELD_NAMES

ALPHA = 0.002  # asv's significance level
MIN_RATIO = 1.1  # asv's default factor: smaller changes are `same` however significant (CUDA rows)
# A CPU row's factor. Its samples come from one process in one window, so the rank test sees the window's scatter,
# not how a second run of the same command lands: two quiet runs of one sdpa sweep on the project's 2-core CPU VM,
# one after the other, differed by 0.88x, 1.12x and 1.22x at n = 384, 768, 1536, every one "significant". So on a
# CPU a change must pass 1.3x to be called, and a smaller one is `same` (asv measures in several processes for the
# same reason).
CPU_MIN_RATIO = 1.3


def min_ratio_for(device: object) -> float:
    """The factor a change must pass on `device` (a row's `device` cell): MIN_RATIO on CUDA, CPU_MIN_RATIO else."""
    return MIN_RATIO if str(device) == "cuda" else CPU_MIN_RATIO


BOOTSTRAP = 2000  # bootstrap draws of the ratio of medians
SEED = 0  # the bootstrap's: the same rows give the same interval
ACCURACY_FACTOR = 2.0
EPSILON = {"fp64": 2.2e-16, "fp32": 1.2e-7, "tf32": 9.8e-4, "fp16": 9.8e-4, "bf16": 7.8e-3}
FP8_EPSILON = 0.125  # e4m3's; e5m2's is 0.25
VERDICTS = ("faster", "slower", "same", "not significant", "noisy", "too few samples")
FAIL_ON = ("slower", "faster", "not_significant", "noisy", "less_exact")
# comparison.csv's columns; the last three are the rounds' (analysis/rounds.py), empty for one run per side
COLUMNS = ("point", "seq_len", "time_ms_a", "time_ms_b", "ratio", "ratio_lo", "ratio_hi", "p_value", "samples_a",
           "samples_b", "min_ratio", "verdict", "rel_rms_err_a", "rel_rms_err_b", "accuracy", "noise_a", "noise_b",
           "point_id_a", "point_id_b", "repro_a", "repro_b", "rounds", "rounds_run", "left_out")
ONE_RUN_RULE = (f"slower/faster: p < {ALPHA} in a Mann-Whitney U test and B/A beyond {MIN_RATIO}x on CUDA, "
                f"{CPU_MIN_RATIO}x on a CPU")
# Said under every comparison of rows measured once per side: their samples show how each row scattered inside its
# own timing window, not how far a second run of the same command lands (two sweeps of one command on a 2-core CPU
# differed by 0.54x-1.54x per point, each "significant").
ONE_RUN_NOTE = ("A and B were measured once each, not interleaved in rounds (between two machines they cannot be): "
                "each verdict sees only the two rows' own samples, not how a second run lands. On one machine, "
                "`python -m runners.ab` measures A and B in alternating rounds and judges by the rounds.")


@dataclass
class Comparison:
    label_a: str
    label_b: str
    matched: pd.DataFrame  # COLUMNS, one row per matched point
    only_a: list[str]  # points only A has (their descriptions)
    only_b: list[str]
    rule: str = ONE_RUN_RULE  # the verdict's rule in a line, after the counts
    note: str = ONE_RUN_NOTE  # how A and B were measured, under the table
    interval: str = "95% bootstrap intervals"  # what the figure's bars are


def samples_of(cell: object) -> np.ndarray:
    """A row's `time_samples_ms` cell as an array ([] when the row kept none)."""
    if not isinstance(cell, str) or not cell.strip():
        return np.empty(0)
    try:
        return np.asarray(json.loads(cell), dtype=np.float64)
    except (TypeError, ValueError):
        return np.empty(0)


def _median_ratio(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(b, axis=axis) / np.median(a, axis=axis)


def ratio_interval(a: np.ndarray, b: np.ndarray, draws: int = BOOTSTRAP, seed: int = SEED) -> tuple[float, float]:
    """The bootstrap 95% (percentile) interval of median(b) / median(a), each side resampled with replacement
    (`scipy.stats.bootstrap`); a side of one sample has no spread to resample: the ratio itself."""
    if min(a.size, b.size) < 2:
        ratio = float(_median_ratio(a, b))
        return ratio, ratio
    found = stats.bootstrap((a, b), _median_ratio, n_resamples=draws, method="percentile", vectorized=True,
                            confidence_level=0.95, random_state=np.random.default_rng(seed))
    return float(found.confidence_interval.low), float(found.confidence_interval.high)


def p_value_of(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Mann-Whitney U test of the two samples (scipy's method "auto": exact on small untied samples)."""
    return float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)


def min_p_value(n1: int, n2: int) -> float:
    """The smallest two-sided p-value samples of these sizes can give: scipy's test of two completely separated,
    untied samples of these sizes (a rank test on 3 against 3 never goes below 0.1)."""
    if n1 == 0 or n2 == 0:
        return 1.0
    return p_value_of(np.arange(n1, dtype=float), np.arange(n2, dtype=float) + n1)


def verdict(ratio: float, lo: float, hi: float, p_value: float, reachable: bool, noisy: bool,
            min_ratio: float = MIN_RATIO) -> str:
    """The rule of the module docstring, with `min_ratio` the device's factor (min_ratio_for)."""
    if not reachable:
        return "too few samples"
    if noisy:
        return "noisy"
    if p_value < ALPHA and ratio >= min_ratio:
        return "slower"
    if p_value < ALPHA and ratio <= 1 / min_ratio:
        return "faster"
    return "same" if 1 / min_ratio < ratio < min_ratio else "not significant"


def accuracy_verdict(err_a: float, err_b: float, precision: str) -> str:
    if not (np.isfinite(err_a) and np.isfinite(err_b)):
        return "not measured" if (pd.isna(err_a) or pd.isna(err_b)) else ("less exact" if not np.isfinite(err_b) else "same")
    eps = EPSILON.get(precision, FP8_EPSILON if str(precision).startswith("fp8") else 1.2e-7)
    if err_b > ACCURACY_FACTOR * err_a + eps:
        return "less exact"
    if err_a > ACCURACY_FACTOR * err_b + eps:
        return "more exact"
    return "same"


def key_text(rows: pd.DataFrame, key: Sequence[str]) -> pd.Series:
    return rows[list(key)].apply(lambda column: column.map(str)).agg("|".join, axis=1)


def describe(row: pd.Series, axes: Sequence[str]) -> str:
    parts = []
    for name in axes:
        value = row.get(name)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        parts.append(f"{name}={str(value).lower() if isinstance(value, bool) else value}")
    return " ".join(parts) or "-"  # nothing but seq_len tells the points apart


def varying(rows: pd.DataFrame, key: Sequence[str]) -> list[str]:
    """The key's fields that take more than one value: what tells the points apart in a table."""
    implied = {"q_len": "seq_len", "kv_heads": "heads"}  # null: equal to that axis, so a copy of it
    shown = [name for name in key if name != "backend_options" and rows[name].map(str).nunique() > 1
             and not (name in implied and (rows[name] == rows[implied[name]]).all())]
    return shown or [name for name in ("seq_len",) if name in key]


def one_per_key(rows: pd.DataFrame, key: Sequence[str], side: str) -> pd.DataFrame:
    duplicated = key_text(rows, key).duplicated(keep=False)
    if duplicated.any():
        example = rows[duplicated].iloc[0]
        raise ValueError(f"{side}: {int(duplicated.sum())} ok rows share a point once the compared axis is left out "
                         f"(e.g. backend={example['backend']} options={example['backend_options']}); give each side "
                         "one back end's rows with one set of options")
    return rows


def match(rows_a: pd.DataFrame, rows_b: pd.DataFrame, key: Sequence[str], label_a: str, label_b: str) -> Comparison:
    """Pair A's and B's ok rows by `key` and compare each pair (the module docstring's rule)."""
    a = one_per_key(rows_a[rows_a["status"] == "ok"], key, label_a)
    b = one_per_key(rows_b[rows_b["status"] == "ok"], key, label_b)
    a = a.assign(_key=key_text(a, key).values)
    b = b.assign(_key=key_text(b, key).values)
    both = pd.concat([a, b])
    shown = varying(both, key)
    pairs = a.merge(b, on="_key", suffixes=("_a", "_b"))
    out = []
    for _, pair in pairs.iterrows():
        side_a = pd.Series({c[:-2]: v for c, v in pair.items() if c.endswith("_a")})
        side_b = pd.Series({c[:-2]: v for c, v in pair.items() if c.endswith("_b")})
        out.append(_compare_pair(side_a, side_b, shown))
    matched = pd.DataFrame(out, columns=list(COLUMNS))
    if not matched.empty:
        matched = matched.sort_values(["point", "seq_len"], kind="stable").reset_index(drop=True)
    only_a = sorted(describe(r, shown) for _, r in a[~a["_key"].isin(b["_key"])].iterrows())
    only_b = sorted(describe(r, shown) for _, r in b[~b["_key"].isin(a["_key"])].iterrows())
    return Comparison(label_a, label_b, matched, only_a, only_b)


def _compare_pair(a: pd.Series, b: pd.Series, shown: Sequence[str]) -> dict:
    samples_a, samples_b = samples_of(a.get("time_samples_ms")), samples_of(b.get("time_samples_ms"))
    ratio = float(b["time_ms"] / a["time_ms"]) if a["time_ms"] > 0 else math.nan
    reachable = min_p_value(samples_a.size, samples_b.size) < ALPHA
    lo = hi = p_value = math.nan
    if samples_a.size and samples_b.size:
        lo, hi = ratio_interval(samples_a, samples_b)
        p_value = p_value_of(samples_a, samples_b)
    noisy = bool(a.get("noisy") is True or b.get("noisy") is True)
    return {
        "point": describe(a, [s for s in shown if s != "seq_len"]), "seq_len": int(a["seq_len"]),
        "time_ms_a": float(a["time_ms"]), "time_ms_b": float(b["time_ms"]), "ratio": ratio,
        "ratio_lo": lo, "ratio_hi": hi, "p_value": p_value,
        "samples_a": int(samples_a.size), "samples_b": int(samples_b.size),
        "min_ratio": min_ratio_for(a.get("device")),
        "verdict": verdict(ratio, lo, hi, p_value, reachable, noisy, min_ratio_for(a.get("device"))),
        "rel_rms_err_a": a.get("rel_rms_err"), "rel_rms_err_b": b.get("rel_rms_err"),
        "accuracy": accuracy_verdict(float(a.get("rel_rms_err", math.nan)), float(b.get("rel_rms_err", math.nan)),
                                     str(a.get("precision"))),
        "noise_a": str(a.get("noise") or ""), "noise_b": str(b.get("noise") or ""),
        "point_id_a": str(a.get("point_id") or ""), "point_id_b": str(b.get("point_id") or ""),
        "repro_a": repro_command(a.to_dict()), "repro_b": repro_command(b.to_dict()),
    }


def shared_options(rows_a: pd.DataFrame, rows_b: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both sides with `backend_options` cut to the options both know, per back end: an option added (or removed)
    between two commits is in one side's rows only, at its default, and must not keep every point from matching."""
    def parsed(rows: pd.DataFrame) -> list[dict]:
        out = []
        for cell in rows["backend_options"]:
            try:
                out.append(json.loads(cell) if isinstance(cell, str) and cell else {})
            except ValueError:
                out.append({"": cell})  # not JSON: kept whole, so it matches only itself
        return out

    options_a, options_b = parsed(rows_a), parsed(rows_b)
    known: dict[str, set[str]] = {}
    for rows, options in ((rows_a, options_a), (rows_b, options_b)):
        side: dict[str, set[str]] = {}
        for backend, opts in zip(rows["backend"], options):
            side.setdefault(backend, set()).update(opts)
        for backend, names in side.items():
            known[backend] = known[backend] & names if backend in known else names

    def cut(rows: pd.DataFrame, options: list[dict]) -> pd.DataFrame:
        cells = [json.dumps({k: v for k, v in opts.items() if k in known.get(backend, ())}, sort_keys=True)
                 for backend, opts in zip(rows["backend"], options)]
        return rows.assign(backend_options=cells)
    return cut(rows_a, options_a), cut(rows_b, options_b)


def sweep_key(rows_a: pd.DataFrame, rows_b: pd.DataFrame) -> list[str]:
    """Two sweeps' match key: every point field but `device`, or with it when a side (a merge of several machines'
    folders) measured one point on several devices, so that they match device by device."""
    key = [name for name in FIELD_NAMES if name != "device"]
    if any(key_text(r[r["status"] == "ok"], key).duplicated().any() for r in (rows_a, rows_b)):
        key = list(FIELD_NAMES)
    return key


BACKEND_KEY = [name for name in FIELD_NAMES if name not in ("backend", "backend_options")]  # two back ends' key


def compare_sweeps(path_a: str, path_b: str) -> Comparison:
    """Two sweeps (or results.csv files): matched on every point field; `device` too when a side holds several;
    the back ends' options on those both sides know (`shared_options`)."""
    rows_a, rows_b = shared_options(load_side(path_a, "A"), load_side(path_b, "B"))
    return match(rows_a, rows_b, sweep_key(rows_a, rows_b), str(path_a), str(path_b))


def compare_backends(path: str, backend_a: str, backend_b: str) -> Comparison:
    """One sweep's two back ends (by name), matched on every point field but the back end and its options."""
    rows = load_side(path, "A")
    names = sorted(set(rows["backend"]))
    for name in (backend_a, backend_b):
        if name not in names:
            raise ValueError(f"--backends: {name!r} is not a back end of {path} (it has {', '.join(names)})")
    return match(rows[rows["backend"] == backend_a], rows[rows["backend"] == backend_b], BACKEND_KEY, backend_a,
                 backend_b)


def load_side(path: str, side: str) -> pd.DataFrame:
    try:
        return load([path], warn=False).rows
    except NoUsableResults as exc:
        raise ValueError(f"{side}: {exc}") from None


def _present(value: object) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value)) and value != ""


def table_text(cmp: Comparison) -> str:
    """The terminal's table: a line per matched point, then the counts, how A and B were measured, and the points
    only one side has. Rounds (analysis/rounds.py) show how many counted instead of the p-value."""
    m = cmp.matched
    lines = [f"A = {cmp.label_a}", f"B = {cmp.label_b}", ""]
    if m.empty:
        lines.append("no point measured ok on both sides")
    else:
        by_rounds = bool(m["rounds"].map(_present).any())
        cells = [["point", "seq_len", "A ms", "B ms", "B/A [95%]", "rounds" if by_rounds else "p", "verdict", "accuracy"]]
        for _, r in m.iterrows():
            interval = "" if math.isnan(r["ratio_lo"]) else f" [{r['ratio_lo']:.2f}, {r['ratio_hi']:.2f}]"
            if by_rounds:
                third = f"{int(r['rounds'])}/{int(r['rounds_run'])}"
            else:
                third = "—" if math.isnan(r["p_value"]) else f"{r['p_value']:.2g}"
            ratio = "—" if math.isnan(r["ratio"]) else f"{r['ratio']:.3f}{interval}"
            cells.append([r["point"], str(r["seq_len"]), f"{r['time_ms_a']:.4g}", f"{r['time_ms_b']:.4g}", ratio,
                          third, r["verdict"], r["accuracy"]])
        widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
        lines += ["  ".join(c.ljust(w) if i in (0, 6, 7) else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
                  for row in cells]
        counts = m["verdict"].value_counts()
        lines += ["", f"{len(m)} points matched: " + ", ".join(f"{counts[v]} {v}" for v in VERDICTS if v in counts)
                  + f" ({cmp.rule})"]
        less = m[m["accuracy"] == "less exact"]
        if len(less):
            lines.append(f"less exact: {cmp.label_b} at {len(less)} of {len(m)} points (rel_rms_err above "
                         f"{ACCURACY_FACTOR:g}x {cmp.label_a}'s + the precision's epsilon)")
        left = m[m["left_out"].map(_present)] if by_rounds else m.iloc[0:0]
        for _, r in left.iterrows():
            lines.append(f"rounds left out at {r['point']} seq_len={r['seq_len']}: {r['left_out']}")
    if cmp.note:
        lines += ["", cmp.note]
    if not m.empty:
        named = m[m["verdict"].isin(["slower", "faster"]) | (m["accuracy"] == "less exact")]
        if len(named):
            lines += ["", "to measure them again (A, then B):"]
            for _, r in named.iterrows():
                lines += [f"  {r['point']} seq_len={r['seq_len']} ({r['verdict']}):", f"    {r['repro_a']}", f"    {r['repro_b']}"]
    for label, only in ((cmp.label_a, cmp.only_a), (cmp.label_b, cmp.only_b)):
        if only:
            lines += ["", f"only in {label} ({len(only)}): " + "; ".join(only)]
    return "\n".join(lines)


def ratio_figure(cmp: Comparison, path: Path) -> Path | None:
    """B/A against seq_len, one line per point (its other axes), the 95% intervals as bars, 1 and the
    MIN_RATIO band marked. None when nothing matched."""
    m = cmp.matched.dropna(subset=["ratio"])
    if m.empty:
        return None
    import matplotlib

    matplotlib.use("Agg")  # files only (as analysis/figures/common.py; not imported here: the figures import compare)
    import matplotlib.pyplot as plt

    from matplotlib.ticker import FuncFormatter, NullFormatter

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for point, group in m.groupby("point", sort=True):
        group = group.sort_values("seq_len")
        low = (group["ratio"] - group["ratio_lo"]).clip(lower=0).fillna(0)
        high = (group["ratio_hi"] - group["ratio"]).clip(lower=0).fillna(0)
        bars = ax.errorbar(group["seq_len"], group["ratio"], yerr=[low, high], marker="o", capsize=3,
                           label=point if point != "-" else "B / A")
        noisy = group[group["verdict"] == "noisy"]  # hollow: not decided (a noisy row)
        ax.scatter(noisy["seq_len"], noisy["ratio"], s=60, facecolors="white", edgecolors=bars.lines[0].get_color(),
                   zorder=3, label="noisy: not decided" if len(noisy) and point == m["point"].min() else None)
    ax.axhline(1.0, color="black", linewidth=0.8)
    band = float(m["min_ratio"].max())
    ax.axhspan(1 / band, band, color="grey", alpha=0.15, label=f"within {band}x: same")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    sizes = sorted(m["seq_len"].unique())
    ax.set_xticks(sizes, [str(n) for n in sizes])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: f"{y:g}" if f"{y:.2g}"[0] in "25" else ""))
    ax.set_xlabel("seq_len (n)")
    ax.set_ylabel("time B / time A")
    ax.set_title(f"B = {cmp.label_b} against A = {cmp.label_a}\n({cmp.interval})", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def fail_on_words(text: str) -> list[str]:
    """`--fail-on`'s comma-separated words (spaces as underscores); ValueError naming the first unknown one."""
    words = [w.strip().replace(" ", "_") for w in text.split(",") if w.strip()]
    bad = [w for w in words if w not in FAIL_ON]
    if bad:
        raise ValueError(f"--fail-on: expected some of {', '.join(FAIL_ON)}, got {bad[0]!r}")
    return words


def finish(cmp: Comparison, out: Path, fail_on: Sequence[str]) -> int:
    """Write comparison.csv and comparison.png into `out`, print the table; 1 when a `fail_on` word was found."""
    out.mkdir(parents=True, exist_ok=True)
    cmp.matched.to_csv(out / "comparison.csv", index=False)
    figure = ratio_figure(cmp, out / "comparison.png")
    print(table_text(cmp))
    print(f"\ncomparison: {out / 'comparison.csv'}" + (f", {figure}" if figure else ""))
    m = cmp.matched
    failing = [w for w in fail_on
               if ((m["accuracy"] == "less exact").any() if w == "less_exact" else (m["verdict"] == w.replace("_", " ")).any())]
    if failing:
        print(f"compare: failing on {', '.join(failing)} (--fail-on)", file=sys.stderr)
        return 1
    return 0
