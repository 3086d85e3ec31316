"""How a claim is made: one function beside the study it reads, registered with its statement and rule.

    @claim("causal_half", "A causal mask needs only n(n+1)/2 of the n² scores, saving about half",
           rule=f"... >= {CAUSAL_MIN_RATIO} ...", experiment="causal_mask")
    def causal_half(rows: pd.DataFrame) -> Evidence | None:
        ...
        return Evidence("; ".join(parts), passes=tuple(passes))

The function returns what it measured (the evidence text) and one pass/fail fact per measured
group; the verdict is computed from those facts (`verdict_of`), never written. It returns None
when its study's rows are absent: the claim is left out, so a study's section disappears when
nothing of it was measured. The chapter's claims never return None: an Evidence with no passes
reads "not measured", so the chapter's table always lists every one of them.

`analysis.claims` imports every study module (so their claims are registered) and checks them.
A claim whose evidence rests on the times of noisy rows (analysis/noise.py: their timing passed a limit of
selfattn/measure/noise.py) is not decided: "not decided (3 of 48 points measured on a busy machine)", instead
of a verdict that may flip between two runs (`busy_points` says how that is found). Rows without a noisy one
are judged as before.

Pure pandas and the standard library (and selfattn.metrics, pure Python): no study is imported here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, TypeVar

import numpy as np
import pandas as pd

from analysis.noise import busy_text, noisy_mask
from selfattn.metrics import METRICS, ran_metrics

HOLDS, FAILS, NOT_MEASURED = "holds", "does not hold", "not measured"
NOT_DECIDED = "not decided at these sizes"
NOT_DECIDED_BUSY = "not decided"  # + "(3 of 48 points measured on a busy machine)": its evidence rests on noisy rows
METRIC_OFF = f"{NOT_MEASURED}: metric off"  # the rows it reads left out a metric it needs (selfattn/metrics.py)

# The report's sections, in its order; a study registered under another name comes after these.
CHAPTER = "The chapter's claims"
STUDIES = (CHAPTER, "Masks", "Grouped-query attention", "Decoding and the KV-cache", "Compiled back ends",
           "Attention against recurrence", "Training with and without the scale",
           "FP8 attention", "Attention variants")


@dataclass(frozen=True)
class Evidence:
    text: str  # the measured numbers, generated from the rows
    passes: tuple[bool, ...] = ()  # one pass/fail fact per measured group
    undecided: tuple[str, ...] = ()  # groups these rows cannot decide, each saying what it needs ("chunked: needs n >= 6144")
    experiment: str | None = None  # what to run next, when it differs from the registered hint


def verdict_of(e: Evidence) -> str:
    """not measured (no fact at all), does not hold (any group fails), not decided (...) (any group
    undecided, none failing), else holds."""
    if not e.passes and not e.undecided:
        return NOT_MEASURED
    if not all(e.passes):
        return FAILS
    if e.undecided:
        return f"{NOT_DECIDED} ({'; '.join(e.undecided)})"
    return HOLDS


@dataclass(frozen=True)
class Claim:
    key: str
    claim: str  # the statement
    evidence: str  # the measured numbers, generated from the rows
    verdict: str  # holds | does not hold | not measured | not decided at these sizes (...)
    rule: str  # how the verdict is computed, thresholds included
    experiment: str  # what to run when it is not measured or not decided
    study: str  # the report section it belongs to


@dataclass(frozen=True)
class ClaimSpec:
    key: str
    statement: str
    rule: str
    experiment: str
    study: str
    read: Callable[[pd.DataFrame], Evidence | None]
    metrics: tuple[str, ...] = ()  # the metrics whose columns it reads (selfattn/metrics.py); () = time and the point

    def check(self, rows: pd.DataFrame) -> Claim | None:
        """The claim judged on `rows`; None when its study's rows are absent.

        It reads only the rows that measured every metric it needs (an ok row that left one out has
        empty cells there, which must not count as a value); when that leaves it no fact and some ok
        row was left out for it, its verdict is "not measured: metric off (...)" instead."""
        usable, off = with_metrics(rows, self.metrics)
        evidence = self.read(usable)
        if evidence is None:
            return None
        verdict = verdict_of(evidence)
        if verdict == NOT_MEASURED and off:
            verdict = f"{METRIC_OFF} ({', '.join(off)})"
        busy = busy_points(usable, evidence, self.read)
        if busy is not None and verdict in (HOLDS, FAILS):
            verdict = f"{NOT_DECIDED_BUSY} ({busy_text(*busy)})"
        return Claim(self.key, self.statement, evidence.text, verdict, self.rule,
                     evidence.experiment or self.experiment, self.study)


# The time columns a noisy row's evidence may rest on: the times (+1) and the rates computed from them (-1).
_TIME_COLUMNS = {"time_ms": 1, "time_ms_p20": 1, "time_ms_p80": 1, "tflops": -1, "gbps": -1, "tokens_per_s": -1}
_moved: list = [None, None]  # [rows, the same rows with their noisy rows' times moved]


def busy_points(rows: pd.DataFrame, evidence: Evidence,
                read: Callable[[pd.DataFrame], Evidence | None]) -> tuple[int, int] | None:
    """(noisy points, timed points) when the claim's evidence rests on noisy rows' times, else None.

    A claim rests on them when moving their times changes its evidence: each noisy row's time is multiplied by
    its own seeded factor between 1/2 and 2 (its rates divided by it), as a busy machine moves them: unequal
    factors, so a claim on ratios or slopes moves too (one factor for all would leave a growth exponent
    where it was). A memory or accuracy claim never moves, nor one that reads other rows, so only the
    claims that read a noisy row's time are withheld. The counts are the ok timed rows it was given, and the
    noisy ones."""
    noisy = noisy_mask(rows)
    if not noisy.any():
        return None
    if _moved[0] is not rows:
        moved_rows = rows.copy()
        factors = np.exp(np.random.default_rng(0).uniform(-np.log(2), np.log(2), int(noisy.sum())))
        for column, power in _TIME_COLUMNS.items():
            if column in moved_rows:
                moved_rows.loc[noisy, column] = moved_rows.loc[noisy, column].to_numpy() * factors ** power
        _moved[:] = [rows, moved_rows]
    moved = read(_moved[1])
    if moved is not None and moved.text == evidence.text and moved.passes == evidence.passes:
        return None
    timed = int(((rows["status"] == "ok") & rows["time_ms"].notna()).sum()) if "time_ms" in rows else int(noisy.sum())
    return int(noisy.sum()), timed


_usable: dict[tuple[str, ...], tuple[pd.DataFrame, pd.DataFrame, tuple[str, ...]]] = {}


def with_metrics(rows: pd.DataFrame, metrics: tuple[str, ...]) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """(rows less the ok rows that did not measure all of `metrics`, the metrics some ok row left out).

    A failed row stays (claims count them); a row without a `metrics` value (written before the key
    existed) measured all of them. The same frame comes back for the same rows and metrics, so the claims
    of one study still share what `per_rows` remembers."""
    if not metrics or "metrics" not in rows:
        return rows, ()
    key = tuple(sorted(metrics))
    cached = _usable.get(key)
    if cached is not None and cached[0] is rows:
        return cached[1], cached[2]
    ran = rows["metrics"].map(ran_metrics)
    ok = rows["status"] == "ok"
    lacking = {m: ok & ~ran.map(lambda r, m=m: m in r) for m in key}
    dropped = pd.Series(False, index=rows.index)
    for mask in lacking.values():
        dropped |= mask
    usable = rows[~dropped] if dropped.any() else rows
    off = tuple(m for m in metrics if lacking[m].any())
    _usable[key] = (rows, usable, off)  # holding the rows keeps their id from being reused
    return usable, off


@dataclass(frozen=True)
class TableSpec:
    study: str
    caption: str
    read: Callable[[pd.DataFrame], pd.DataFrame]  # text cells; empty when its rows are absent


CLAIMS: list[ClaimSpec] = []  # every registered claim, in registration order
TABLES: list[TableSpec] = []  # numbers under a study's claims that no robust rule could judge (a compile time)


SHARED_RULES: dict[str, str] = {}  # name -> a rule text several claims end with (the report prints it once)


def shared_rule(name: str, text: str) -> str:
    """Register `text` as a part several claims' rules share, under `name` ("the growth rule"); returns the text,
    for the rules to include. The report prints it once under the claims that use it, naming it in their rules."""
    SHARED_RULES[name] = text
    return text


def claim(key: str, statement: str, *, rule: str, experiment: str, study: str = CHAPTER,
          metrics: tuple[str, ...] = ()):
    """Register the decorated `(rows) -> Evidence | None` as the claim `key`; keys are unique.

    `metrics`: the metrics (selfattn.metrics.METRICS) whose columns it reads; it is given only rows that
    measured them, and says "not measured: metric off" when the rows left one out."""
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"claim {key!r}: unknown metric {unknown[0]!r} (known: {', '.join(METRICS)})")

    def register(read: Callable[[pd.DataFrame], Evidence | None]):
        if any(spec.key == key for spec in CLAIMS):
            raise ValueError(f"claim {key!r} is already registered")
        CLAIMS.append(ClaimSpec(key, statement, rule, experiment, study, read, tuple(metrics)))
        return read
    return register


def study_table(study: str, caption: str):
    """Register the decorated `(rows) -> DataFrame` (text cells, empty when its rows are absent) as a table
    under `study`'s claims."""
    def register(read: Callable[[pd.DataFrame], pd.DataFrame]):
        TABLES.append(TableSpec(study, caption, read))
        return read
    return register


def studies_in_order() -> list[str]:
    """STUDIES, then any other study a claim or table was registered under, in registration order."""
    extra = [spec.study for spec in [*CLAIMS, *TABLES] if spec.study not in STUDIES]
    return [*STUDIES, *dict.fromkeys(extra)]


T = TypeVar("T")


def per_rows(compute: Callable[[pd.DataFrame], T]) -> Callable[[pd.DataFrame], T]:
    """`compute(rows)` remembered for the last rows object it was given: the claims of one study share an
    intermediate (cost lines, stability points) without recomputing it once per claim. Rows are read, never
    changed, by the analysis; a frame changed in place needs a copy to be read afresh."""
    last: list = [None, None]  # [rows, result]; holding the rows keeps their id from being reused

    @functools.wraps(compute)
    def remembered(rows: pd.DataFrame) -> T:
        if last[0] is not rows:
            last[:] = [rows, compute(rows)]
        return last[1]
    return remembered


def claims_frame(claims: list[Claim]) -> pd.DataFrame:
    columns = ["key", "claim", "evidence", "verdict", "rule", "experiment", "study"]
    return pd.DataFrame([c.__dict__ for c in claims], columns=columns)
