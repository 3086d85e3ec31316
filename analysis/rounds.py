"""A against B measured in interleaved rounds: the verdict from how the pairs vary between rounds.

`python -m runners.ab` runs A's sweep and B's sweep in alternating order, round after round, and writes
MANIFEST (rounds.csv: one line per side per round) beside the rounds' sweep folders; `python -m analysis.compare
FOLDER` reads it again. A row's own samples show how it scattered inside one timing window, not how a second run
lands (two sweeps of one command on a 2-core CPU differed by 0.54x-1.54x per point, each "significant" within its
samples). The two sweeps of a round run one right after the other, so they see nearly the same machine, and how
their ratio varies from round to round is the between-run variation a verdict must clear. Per matched point:

- a round's ratio: B's median time / A's in that round;
- a round counts for the point when both rows are ok and were measured alike (`left_out_reason`): both ran on the
  same number of threads (measure/threads.py falls back to one on a busy machine, point by point), and on a CPU
  other processes took about the same share of the machine during both timings (within BALANCE_LIMIT). The share
  catches the grossly lopsided rounds, not all of them: the rest are what the median and its interval absorb
  (numbers at BALANCE_LIMIT);
- ratio: the median of the counted rounds' ratios (of their logs: B/A and A/B give reciprocal medians); ratio_lo,
  ratio_hi: the distribution-free 95% interval of that median (the sign test's: the k-th smallest and k-th largest
  ratio, k the largest that keeps the coverage at CONFIDENCE or more: the extremes of 6-8 rounds, the second of
  9-11, the third of 12-14; a bootstrap over so few rounds gives a narrower interval than its stated 95% holds);
  p_value: the sign test's two-sided p that the median ratio is 1;
- verdict, with R the device's factor (analysis/ab.py's `min_ratio_for`: 1.1 on CUDA, 1.3 on a CPU):
  `slower` when the whole interval lies at or above R (the median round ratio is R or more, at 95% confidence),
  `faster` when it lies at or below 1/R; `same` when the median ratio lies inside (1/R, R): no change
  of R's size was found, asv's "insignificant" change (the interval says how closely that was measured); else
  `not significant` (a median beyond R whose interval reaches back inside: more rounds may decide). `noisy` when
  fewer than MIN_ROUNDS rounds counted because some were left out; `too few samples` when fewer than MIN_ROUNDS
  rounds measured the point.

A change is called only when the rounds' own variation clears the factor: a wrong `slower` between two runs of one
command needs every counted round but k-1 to come out R times slower. (`python -m runners.ab` looks at the interval
after every round from the sixth on and stops once it decides, so the 95% is nominal; the factor is what keeps a
busy machine's scatter from being called a change.) Reads only CSV files.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import ab
from analysis.repro import repro_command

MANIFEST = "rounds.csv"  # written by runners/ab.py
# its columns: round (1, 2, ...), side (A or B), order (1: ran first in its round), label, folder (the round's
# sweep folder, relative to the manifest's), exit_code, seconds, compared (`backend` when the two sides are two back
# ends, matched without the back end, else `sweep`: matched as two sweeps, analysis/ab.py), and where and how the
# sweep ran (cwd, command)
MANIFEST_COLUMNS = ("round", "side", "order", "label", "folder", "exit_code", "seconds", "compared", "cwd", "command")
READ_COLUMNS = MANIFEST_COLUMNS[:8]  # what the comparison needs of it
MIN_ROUNDS = 6  # the fewest rounds whose median has a 95% interval at all (6: the extremes, 96.9%)
CONFIDENCE = 0.95
# Others' share of the machine during A's and B's timings may differ by this much for a CPU round to count. In 234
# rounds of seven A/Bs on the shared 2-core VM (the same command twice and sdpa against a back end doing its work
# twice, 3 points x 6-12 rounds each, quiet and beside one spinning process per core), a round's ratio lay more than
# 1.3x from its point's median in 13 of the 180 rounds whose shares lay within 0.05, 13 of 42 within 0.05-0.15 and
# 7 of 12 beyond 0.15 (30 of those 33 strayed toward the side that saw the busier machine). A limit of 0.10 left 7
# of 12 rounds of one same-command point out (`noisy` after 12 rounds), and the rounds 0.05-0.10 apart strayed as
# often as those 0.10-0.15 apart; past 0.15 a round is more often lopsided than not.
BALANCE_LIMIT = 0.15
RULE = (f"over rounds of A and B alternating: slower/faster when the {CONFIDENCE:.0%} interval of the median "
        f"round ratio B/A lies beyond R ({ab.MIN_RATIO}x on CUDA, {ab.CPU_MIN_RATIO}x on a CPU), same when the "
        f"median lies within R, from at least {MIN_ROUNDS} rounds measured alike")


def is_rounds_folder(path: str | Path) -> bool:
    return (Path(path) / MANIFEST).is_file()


def interval_rank(rounds: int) -> int:
    """k: the k-th smallest and k-th largest of `rounds` values bound their median with CONFIDENCE or more
    (the sign test's interval: it misses when k or fewer values fall on one side). 0 when no k does."""
    best = 0
    for k in range(1, rounds // 2 + 1):
        missed = 2 * sum(math.comb(rounds, i) for i in range(k)) / 2 ** rounds
        if 1 - missed >= CONFIDENCE:
            best = k
    return best


def sign_test_p(ratios: np.ndarray) -> float:
    """The two-sided sign test's p-value that the median ratio is 1 (ratios of exactly 1 left out)."""
    above, below = int((ratios > 1).sum()), int((ratios < 1).sum())
    n = above + below
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(above, below) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def median_interval(ratios: np.ndarray) -> tuple[float, float, float]:
    """(median, lo, hi) of the round ratios; lo and hi NaN when too few rounds for an interval."""
    ordered = np.sort(np.asarray(ratios, dtype=np.float64))
    k = interval_rank(ordered.size)
    # the median of the logs: between the middle two of an even count, their geometric mean, so that B/A and A/B
    # give reciprocal answers (1.1 and 1/1.1 have the median 1)
    median = float(np.exp(np.median(np.log(ordered)))) if ordered.size else math.nan
    if k == 0:
        return median, math.nan, math.nan
    return median, float(ordered[k - 1]), float(ordered[ordered.size - k])


def verdict(median: float, lo: float, hi: float, counted: int, measured: int, min_ratio: float) -> str:
    """The module docstring's rule: `measured` rounds had the point on both sides, `counted` of them count."""
    if measured < MIN_ROUNDS:
        return "too few samples"
    if counted < MIN_ROUNDS or math.isnan(lo):
        return "noisy"
    if lo >= min_ratio:
        return "slower"
    if hi <= 1 / min_ratio:
        return "faster"
    if 1 / min_ratio < median < min_ratio:
        return "same"
    return "not significant"


def settled(matched: pd.DataFrame) -> pd.Series:
    """Per comparison row, whether more rounds could not change its verdict much: `slower` or `faster` (the
    interval already clears R), or `same` with the whole interval inside (1/R, R). `python -m runners.ab` stops
    once every point is settled (NVBench stops on the precision reached, in the same spirit): a `same` from a
    median just inside R over a wide interval gets more rounds, whose median moves less."""
    inside = (matched["ratio_lo"] > 1 / matched["min_ratio"]) & (matched["ratio_hi"] < matched["min_ratio"])
    return matched["verdict"].isin(["slower", "faster"]) | ((matched["verdict"] == "same") & inside)


def _number(value: object) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return number


def left_out_reason(a: pd.Series, b: pd.Series) -> str:
    """Why a round's pair of rows does not count ("" when it does): see the module docstring."""
    threads_a, threads_b = _number(a.get("num_threads")), _number(b.get("num_threads"))
    if not (math.isnan(threads_a) or math.isnan(threads_b)) and threads_a != threads_b:
        return "threads differed"
    others_a, others_b = _number(a.get("other_cpu_frac")), _number(b.get("other_cpu_frac"))
    if str(a.get("device")) != "cuda" and abs(others_a - others_b) > BALANCE_LIMIT:  # NaN (not measured): counts
        return "others' load differed"
    return ""


def read_manifest(folder: Path) -> pd.DataFrame:
    try:
        manifest = pd.read_csv(folder / MANIFEST, dtype={"side": str, "folder": str, "label": str, "compared": str})
    except (OSError, ValueError, pd.errors.EmptyDataError) as exc:
        raise ValueError(f"{folder / MANIFEST}: not readable ({exc})") from None
    missing = [c for c in READ_COLUMNS if c not in manifest]
    if missing:
        raise ValueError(f"{folder / MANIFEST}: no column {missing[0]!r} (written by `python -m runners.ab`?)")
    return manifest


@functools.lru_cache(maxsize=512)
def _round_rows(path: str, mtime_ns: int, size: int, side: str) -> pd.DataFrame:
    """One round's sweep, loaded (analysis/load.py) once per version of its file: `python -m runners.ab` judges
    the rounds again after each new one, and a finished round's file never changes."""
    return ab.load_side(path, side)


def _side_rows(folder: Path, manifest: pd.DataFrame, side: str) -> pd.DataFrame:
    """Every round's rows of one side, with a `round` column; a round whose sweep left no results.csv is absent."""
    frames = []
    for _, entry in manifest[manifest["side"] == side].iterrows():
        results = folder / str(entry["folder"]) / "results.csv"
        if results.is_file():
            stat = results.stat()
            rows = _round_rows(str(results.resolve()), stat.st_mtime_ns, stat.st_size, side)
            frames.append(rows.assign(round=int(entry["round"])))
    if not frames:
        raise ValueError(f"{side}: no round of {folder} wrote a results.csv")
    return pd.concat(frames, ignore_index=True)


def compare_rounds(path: str | Path) -> ab.Comparison:
    """The rounds of one `python -m runners.ab` folder, judged by the module docstring's rule."""
    folder = Path(path)
    manifest = read_manifest(folder)
    rows_a, rows_b = _side_rows(folder, manifest, "A"), _side_rows(folder, manifest, "B")
    if str(manifest["compared"].iloc[0]) == "backend":
        key = ab.BACKEND_KEY
    else:
        rows_a, rows_b = ab.shared_options(rows_a, rows_b)
        first = int(min(rows_a["round"].min(), rows_b["round"].min()))  # every round measured the same points
        key = ab.sweep_key(rows_a[rows_a["round"] == first], rows_b[rows_b["round"] == first])
    ok_a, ok_b = (rows[rows["status"] == "ok"] for rows in (rows_a, rows_b))
    ok_a, ok_b = (rows.assign(_key=ab.key_text(rows, key).values) for rows in (ok_a, ok_b))
    for rows, side in ((ok_a, "A"), (ok_b, "B")):
        for _, one_round in rows.groupby("round"):
            ab.one_per_key(one_round, key, side)
    shown = ab.varying(pd.concat([ok_a, ok_b]), key)
    pairs = ok_a.merge(ok_b, on=["_key", "round"], suffixes=("_a", "_b"))
    out = []
    for _, group in pairs.groupby("_key", sort=False):
        side_a = group[[c for c in group if c.endswith("_a")]].rename(columns=lambda c: c[:-2])
        side_b = group[[c for c in group if c.endswith("_b")]].rename(columns=lambda c: c[:-2])
        out.append(_judge_point(side_a.reset_index(drop=True), side_b.reset_index(drop=True), shown))
    matched = pd.DataFrame(out, columns=list(ab.COLUMNS))
    if not matched.empty:
        matched = matched.sort_values(["point", "seq_len"], kind="stable").reset_index(drop=True)
    only_a = sorted({ab.describe(r, shown) for _, r in ok_a[~ok_a["_key"].isin(ok_b["_key"])].iterrows()})
    only_b = sorted({ab.describe(r, shown) for _, r in ok_b[~ok_b["_key"].isin(ok_a["_key"])].iterrows()})
    labels = manifest.drop_duplicates("side").set_index("side")["label"]
    run = int(manifest["round"].max())
    note = (f"{run} round{'s' if run != 1 else ''}, A and B alternating (AB, BA, ...), each side's sweep its own "
            f"process: {folder / MANIFEST}")
    loose = int(((matched["verdict"] == "same") & ~settled(matched)).sum()) if not matched.empty else 0
    if loose:  # `same` by the median, but the interval does not yet rule a change of the factor's size out
        note += (f"\n{loose} of the `same` points have an interval reaching past the factor: no change of its size "
                 "was found, but none is ruled out yet (more rounds narrow it: --max-rounds)")
    return ab.Comparison(str(labels.get("A", "A")), str(labels.get("B", "B")), matched, only_a, only_b,
                         rule=RULE, note=note, interval=f"{CONFIDENCE:.0%} intervals of the median over rounds")


def _judge_point(a: pd.DataFrame, b: pd.DataFrame, shown: list[str]) -> dict:
    """One point's rounds (row i of `a` and of `b`: one round's pair) -> one comparison.csv row."""
    reasons = [left_out_reason(a.iloc[i], b.iloc[i]) for i in range(len(a))]
    counted = [i for i, reason in enumerate(reasons) if not reason]
    ratios = (b["time_ms"] / a["time_ms"]).to_numpy(dtype=np.float64)
    median, lo, hi = median_interval(ratios[counted])
    use = counted or list(range(len(a)))  # the sides' times: of the counted rounds, else of all
    first_a, first_b = a.iloc[use[0]], b.iloc[use[0]]
    min_ratio = ab.min_ratio_for(first_a.get("device"))
    left = pd.Series([r for r in reasons if r]).value_counts()
    noisy_a, noisy_b = (int(rows["noisy"].fillna(False).astype(bool).sum()) if "noisy" in rows else 0 for rows in (a, b))
    return {
        "point": ab.describe(first_a, [s for s in shown if s != "seq_len"]), "seq_len": int(first_a["seq_len"]),
        "time_ms_a": float(a["time_ms"].iloc[use].median()), "time_ms_b": float(b["time_ms"].iloc[use].median()),
        "ratio": median, "ratio_lo": lo, "ratio_hi": hi,
        "p_value": sign_test_p(ratios[counted]) if counted else math.nan,
        "samples_a": int(a["time_samples"].iloc[use].fillna(0).sum()) if "time_samples" in a else 0,
        "samples_b": int(b["time_samples"].iloc[use].fillna(0).sum()) if "time_samples" in b else 0,
        "min_ratio": min_ratio, "verdict": verdict(median, lo, hi, len(counted), len(a), min_ratio),
        "rel_rms_err_a": first_a.get("rel_rms_err"), "rel_rms_err_b": first_b.get("rel_rms_err"),
        "accuracy": ab.accuracy_verdict(_number(first_a.get("rel_rms_err")), _number(first_b.get("rel_rms_err")),
                                        str(first_a.get("precision"))),
        "noise_a": f"noisy in {noisy_a} of {len(a)} rounds" if noisy_a else "",
        "noise_b": f"noisy in {noisy_b} of {len(b)} rounds" if noisy_b else "",
        "point_id_a": str(first_a.get("point_id") or ""), "point_id_b": str(first_b.get("point_id") or ""),
        "repro_a": repro_command(first_a.to_dict()), "repro_b": repro_command(first_b.to_dict()),
        "rounds": len(counted), "rounds_run": len(a),
        "left_out": ", ".join(f"{reason} ({count})" for reason, count in left.items()),
    }
