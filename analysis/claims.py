"""Every study's claims, checked against the measured rows.

A claim is one function in its study's module, registered with `@claim` (analysis.claim, where
the verdicts are defined); importing the modules below registers them. This index fixes the
report's order: studies as analysis.claim.STUDIES lists them, and within a study the modules in
the order here, each module's claims in the order they are written.
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from analysis import (additive, basics, compiled, cost, cost_claims, decode, fp8, masks, overflow, positions,
                      recurrence, stability, training, variants)
from analysis.judged import is_judged, left_out_text
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
    # A judged kernel's rows (incorrect, timeout, crashed) are no result: no claim reads them; a claim that would
    # have read them names them
    read = {True: _Judged(rows), False: _Judged(others)}  # True: the FP8 study's claims
    return [c for c in (read[spec.study == fp8.FP8].check(spec) for spec in specs) if c is not None]


class _Judged:
    """The rows a claim is judged on (`rows` less the judged kernel's rows, analysis.judged), and what it says of
    those left out.

    A claim names them when they would have changed it: judged again with them read as results (`ok`, their values
    as measured), its evidence or verdict differs (or it fails). So a stability claim that reads naive alone does not
    name a plugin's incorrect rows, and a cost claim over every back end does. Only when some row is judged: a sweep
    without any pays nothing; one with some pays a second pass of the claims (every experiment's fabricated rows,
    377 with 6 judged: 3.2 s -> 8.5 s on a loaded 2-core machine), for evidence that names a kernel only where it
    would have mattered instead of under every claim."""

    def __init__(self, rows: pd.DataFrame):
        judged = is_judged(rows)
        self.rows = rows[~judged] if judged.any() else rows
        self.as_results = rows.assign(status=rows["status"].where(~judged, "ok")) if judged.any() else None
        self.left_out = left_out_text(rows) if judged.any() else ""

    def check(self, spec: ClaimSpec) -> Claim | None:
        found = spec.check(self.rows)
        if self.as_results is None or not self._would_read(spec, found):
            return found
        if found is None:  # its study's rows were all judged: the claim still says why it has no facts
            found = Claim(spec.key, spec.statement, "no row that is a result", NOT_MEASURED, spec.rule,
                          spec.experiment, spec.study)
        return dataclasses.replace(found, evidence=f"{found.evidence}; not results, left out: {self.left_out}")

    def _would_read(self, spec: ClaimSpec, found: Claim | None) -> bool:
        try:
            counterfactual = spec.check(self.as_results)
        except Exception:  # noqa: BLE001  (a row with no value read as a result can break a claim: it reads them)
            return True
        def key(c: Claim | None):
            return None if c is None else (c.evidence, c.verdict)
        return key(counterfactual) != key(found)


def study_tables(rows: pd.DataFrame, study: str | None = None) -> list[tuple[str, str, pd.DataFrame]]:
    """(study, caption, table) of every registered study table (or only `study`'s) that has rows."""
    found = []
    for spec in TABLES:
        if study is None or spec.study == study:
            table = spec.read(rows)
            if not table.empty:
                found.append((spec.study, spec.caption, table))
    return found
