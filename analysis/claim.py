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
Pure pandas and the standard library: no study is imported here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, TypeVar

import pandas as pd

HOLDS, FAILS, NOT_MEASURED = "holds", "does not hold", "not measured"
NOT_DECIDED = "not decided at these sizes"

# The report's sections, in its order; a study registered under another name comes after these.
CHAPTER = "The chapter's claims"
STUDIES = (CHAPTER, "Masks", "Grouped-query attention", "Decoding and the KV-cache", "Compiled back ends",
           "Attention against recurrence", "Training with and without the scale")


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

    def check(self, rows: pd.DataFrame) -> Claim | None:
        """The claim judged on `rows`; None when its study's rows are absent."""
        evidence = self.read(rows)
        if evidence is None:
            return None
        return Claim(self.key, self.statement, evidence.text, verdict_of(evidence), self.rule,
                     evidence.experiment or self.experiment, self.study)


@dataclass(frozen=True)
class TableSpec:
    study: str
    caption: str
    read: Callable[[pd.DataFrame], pd.DataFrame]  # text cells; empty when its rows are absent


CLAIMS: list[ClaimSpec] = []  # every registered claim, in registration order
TABLES: list[TableSpec] = []  # numbers under a study's claims that no robust rule could judge (a compile time)


def claim(key: str, statement: str, *, rule: str, experiment: str, study: str = CHAPTER):
    """Register the decorated `(rows) -> Evidence | None` as the claim `key`; keys are unique."""
    def register(read: Callable[[pd.DataFrame], Evidence | None]):
        if any(spec.key == key for spec in CLAIMS):
            raise ValueError(f"claim {key!r} is already registered")
        CLAIMS.append(ClaimSpec(key, statement, rule, experiment, study, read))
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
