"""Findings of the studies beyond the default one, with computed verdicts like the chapter's claims.

Each entry takes the merged rows and returns its Claims, or none when its study's rows are
missing: the default report then shows no such section rather than a table of "not measured".
"""

from __future__ import annotations

from typing import Callable

import pandas as pd

from analysis.claims import Claim
from analysis.compiled import COMPILE_COST_CAPTION, compile_cost_table, compiled_findings
from analysis.decode import decode_findings
from analysis.masks import gqa_findings, mask_findings

# (section title, the function that reads its findings from the rows); add a study's line here
STUDIES: tuple[tuple[str, Callable[[pd.DataFrame], list[Claim]]], ...] = (
    ("Masks", mask_findings),
    ("Grouped-query attention", gqa_findings),
    ("Decoding and the KV-cache", decode_findings),
    ("Compiled back ends", compiled_findings),
)
# Tables under a study's findings: numbers worth reading that no robust rule could judge (a compile time
# on a loaded machine): (section title, caption, the function giving the table as text cells; empty
# when its rows are missing).
TABLES: tuple[tuple[str, str, Callable[[pd.DataFrame], pd.DataFrame]], ...] = (
    ("Compiled back ends", COMPILE_COST_CAPTION, compile_cost_table),
)


def study_findings(rows: pd.DataFrame) -> list[tuple[str, list[Claim]]]:
    """[(section title, its findings)] for every study whose rows are present."""
    found = []
    for title, read in STUDIES:
        claims = read(rows)
        if claims:
            found.append((title, claims))
    return found


def study_tables(rows: pd.DataFrame) -> dict[str, list[tuple[str, pd.DataFrame]]]:
    """{section title: [(caption, table)]} for every study table whose rows are present."""
    found: dict[str, list[tuple[str, pd.DataFrame]]] = {}
    for title, caption, read in TABLES:
        table = read(rows)
        if not table.empty:
            found.setdefault(title, []).append((caption, table))
    return found
