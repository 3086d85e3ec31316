"""Findings of the studies beyond the default one, with computed verdicts like the chapter's claims.

Each entry takes the merged rows and returns its Claims, or none when its study's rows are
missing: the default report then shows no such section rather than a table of "not measured".
"""

from __future__ import annotations

from typing import Callable

import pandas as pd

from analysis.claims import Claim
from analysis.decode import decode_findings
from analysis.masks import gqa_findings, mask_findings

# (section title, the function that reads its findings from the rows); add a study's line here
STUDIES: tuple[tuple[str, Callable[[pd.DataFrame], list[Claim]]], ...] = (
    ("Masks", mask_findings),
    ("Grouped-query attention", gqa_findings),
    ("Decoding and the KV-cache", decode_findings),
)


def study_findings(rows: pd.DataFrame) -> list[tuple[str, list[Claim]]]:
    """[(section title, its findings)] for every study whose rows are present."""
    found = []
    for title, read in STUDIES:
        claims = read(rows)
        if claims:
            found.append((title, claims))
    return found
