"""The claim mechanism: a verdict from the facts, one registry, and a registered claim reaching the report."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis import claim as mechanism
from analysis.claim import CHAPTER, FAILS, HOLDS, NOT_DECIDED, NOT_MEASURED, STUDIES, Evidence, claim, verdict_of
from analysis.claims import check_claims
from analysis.load import load
from analysis.report import write_report


@pytest.mark.parametrize("evidence, verdict", [
    (Evidence("nothing"), NOT_MEASURED),
    (Evidence("all pass", passes=(True, True)), HOLDS),
    (Evidence("one fails", passes=(True, False)), FAILS),
    (Evidence("one fails, one undecided", passes=(False,), undecided=("chunked: needs n >= 6144",)), FAILS),
    (Evidence("passes, two undecided", passes=(True,), undecided=("chunked: needs n >= 6144", "naive: needs 4 sizes")),
     f"{NOT_DECIDED} (chunked: needs n >= 6144; naive: needs 4 sizes)"),
    (Evidence("only undecided", undecided=("chunked: needs n >= 6144",)), f"{NOT_DECIDED} (chunked: needs n >= 6144)"),
], ids=["not-measured", "holds", "fails", "fail-beats-undecided", "not-decided", "only-undecided"])
def test_verdict_of_each_state(evidence, verdict):
    assert verdict_of(evidence) == verdict


@pytest.fixture
def registry():
    """The registry as it was before the test: a claim a test registers is gone after it."""
    claims, tables = list(mechanism.CLAIMS), list(mechanism.TABLES)
    yield
    mechanism.CLAIMS[:] = claims
    mechanism.TABLES[:] = tables


def test_a_key_registers_once(registry):
    with pytest.raises(ValueError, match="memory_quadratic"):
        claim("memory_quadratic", "again", rule="r", experiment="e")(lambda rows: Evidence("x"))


def _lines(tmp_path, fabricate):
    """A small cost sweep's results.csv: the chapter's rows only."""
    return fabricate().quadratic_cost(sizes=(256, 512, 1024)).write(tmp_path / "in" / "results.csv")


def test_the_chapter_lists_every_claim_in_its_order_and_other_studies_need_their_rows(tmp_path, fabricate):
    rows = load([_lines(tmp_path, fabricate)], warn=False).rows
    chapter = check_claims(rows, study=CHAPTER)
    assert len(chapter) == sum(spec.study == CHAPTER for spec in mechanism.CLAIMS)  # never left out
    assert [c.key for c in chapter][:4] == ["memory_quadratic", "chunked_linear", "compute_quadratic", "causal_half"]
    assert [c.key for c in chapter][-5:] == ["layer_crossover", "dot_beats_additive", "positions_break_equivariance",
                                             "rope_relative", "rope_cost"]
    assert {spec.study for spec in mechanism.CLAIMS} <= set(STUDIES)
    assert check_claims(rows) == chapter  # no masks, GQA, decode or compiled rows: none of their claims


def test_a_registered_claim_is_checked_and_rendered_with_its_rule(registry, tmp_path, fabricate):
    @claim("test_more_rows_than_three", "A sweep measures more than three points",
           rule="more than 3 ok rows", experiment="quick", study="A test study")
    def more_rows_than_three(rows: pd.DataFrame) -> Evidence | None:
        ok = rows[rows["status"] == "ok"]
        if ok.empty:
            return None  # this study's rows are absent: the claim and its section drop out
        return Evidence(f"{len(ok)} ok rows", passes=(len(ok) > 3,))

    @claim("test_needs_larger_n", "Something only large n decides", rule="n >= 6144 decides it",
           experiment="quadratic_cost", study="A test study")
    def needs_larger_n(rows: pd.DataFrame) -> Evidence:
        return Evidence(f"largest n {rows['seq_len'].max():.0f}", undecided=("naive: needs n >= 6144",))

    csv = _lines(tmp_path, fabricate)
    rows = load([csv], warn=False).rows
    (found, undecided) = check_claims(rows, study="A test study")
    assert (found.key, found.verdict, found.rule, found.study) == ("test_more_rows_than_three", HOLDS,
                                                                   "more than 3 ok rows", "A test study")
    assert undecided.verdict == f"{NOT_DECIDED} (naive: needs n >= 6144)"
    text = write_report([csv], tmp_path / "out", formats=("png",), figures=(), warn=False).path.read_text()
    section = text[text.index("## A test study: findings"):text.index("## Fitted exponents")]
    assert "A sweep measures more than three points" in section and "| **holds** " in section
    assert f"**{NOT_DECIDED} (naive: needs n >= 6144)** (run `quadratic_cost`)" in section
    assert "1. more than 3 ok rows" in section and "2. n >= 6144 decides it" in section
    # its rows absent, the first claim returns None and is left out
    assert [c.key for c in check_claims(rows.assign(status="oom"), study="A test study")] == ["test_needs_larger_n"]


def test_a_study_without_rows_drops_out_of_the_report(registry, tmp_path, fabricate):
    @claim("test_absent", "Measured only by a study nobody ran", rule="r", experiment="e", study="An absent study")
    def absent(rows: pd.DataFrame) -> Evidence | None:
        return None

    text = write_report([_lines(tmp_path, fabricate)], tmp_path / "out", formats=("png",), figures=(),
                        warn=False).path.read_text()
    assert "## The chapter's claims, checked" in text  # the chapter's table always
    assert "An absent study" not in text and "## Masks" not in text and "## Compiled back ends" not in text
