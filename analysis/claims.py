"""Every study's claims, checked against the measured rows.

A claim is one function in its study's module, registered with `@claim` (analysis.claim, where
the verdicts are defined); importing the modules below registers them. This index fixes the
report's order: studies as analysis.claim.STUDIES lists them, and within a study the modules in
the order here, each module's claims in the order they are written.
"""

from __future__ import annotations

import pandas as pd

from analysis import (additive, basics, compiled, cost, cost_claims, decode, fp8, masks, overflow, positions,
                      recurrence, stability, training, variants)
from selfattn.fp8_formats import FORMAT_OF
from analysis.claim import (  # noqa: F401  (re-exported: the verdicts and the record of a claim)
    CHAPTER, CLAIMS, FAILS, HOLDS, NOT_DECIDED, NOT_DECIDED_BUSY, NOT_MEASURED, TABLES, Claim, ClaimSpec, Evidence, claims_frame,
    studies_in_order,
)

# cost.py holds the chapter's cost claims' last (layer_crossover, beside layer_shares), then additive scores and
# positions; masks.py both the Masks and the GQA studies.
MODULES = tuple(m.__name__ for m in (cost_claims, stability, overflow, basics, cost, additive, positions, masks, decode,
                                     compiled, recurrence, training, fp8, variants))


def _order(spec: ClaimSpec) -> tuple[int, int, int]:
    studies, module = studies_in_order(), spec.read.__module__
    return (studies.index(spec.study), MODULES.index(module) if module in MODULES else len(MODULES),
            CLAIMS.index(spec))


def check_claims(rows: pd.DataFrame, study: str | None = None) -> list[Claim]:
    """Every registered claim judged on `rows` (or only `study`'s), in the report's order; a claim whose
    study's rows are absent is left out (the chapter's claims never are: they read "not measured")."""
    specs = sorted((s for s in CLAIMS if study is None or s.study == study), key=_order)
    # FP8 rows answer the FP8 study's questions only: the other studies' claims (stability, permutation, cost)
    # were stated for the fp64..fp16 precisions, and an FP8 row's rounding or its overflow grid would decide them
    fp8_rows = rows["precision"].isin(list(FORMAT_OF)) if "precision" in rows else None
    # the same object when nothing is left out: the figures' cost lines (analysis.cost.cost_facets) are reused
    others = rows[~fp8_rows] if fp8_rows is not None and fp8_rows.any() else rows
    return [c for c in (spec.check(rows if spec.study == fp8.FP8 else others) for spec in specs) if c is not None]


def study_tables(rows: pd.DataFrame, study: str | None = None) -> list[tuple[str, str, pd.DataFrame]]:
    """(study, caption, table) of every registered study table (or only `study`'s) that has rows."""
    found = []
    for spec in TABLES:
        if study is None or spec.study == study:
            table = spec.read(rows)
            if not table.empty:
                found.append((spec.study, spec.caption, table))
    return found
