"""A real results.csv from `python -m runners.sweep` (the quick study on this repo's 2-core CPU VM, the run
behind docs/report.md, copied here) loads cleanly and gives the verdicts of that run: every claim holds."""

from pathlib import Path

from analysis.claims import CHAPTER, HOLDS, NOT_MEASURED, check_claims
from analysis.figures import Made
from analysis.figures.cost import memory_vs_seq_len, time_vs_seq_len
from analysis.figures.stability import scaling_stability
from analysis.load import load
from analysis.report import write_report

REAL = Path(__file__).parent / "data" / "quick_cpu_results.csv"


def test_real_sweep_csv_loads_without_problems():
    loaded = load([REAL], warn=False)
    assert not loaded.problems and len(loaded.rows) == 198
    assert set(loaded.rows["backend"]) == {"naive", "sdpa", "chunked"}
    assert loaded.rows["grad_norm_logits"].notna().any()


# Claims added after this run was recorded: its rows hold none of their points (additive scores, encodings).
ADDED_SINCE = ("dot_beats_additive", "positions_break_equivariance", "rope_relative", "rope_cost")


def test_every_claim_of_the_real_run_holds():
    claims = check_claims(load([REAL], warn=False).rows, study=CHAPTER)
    measured = [c for c in claims if c.key not in ADDED_SINCE]
    assert len(measured) == 14 and len(claims) == 14 + len(ADDED_SINCE)
    assert {c.key: c.verdict for c in measured} == {c.key: HOLDS for c in measured}, [c.evidence for c in measured]
    assert {c.verdict for c in claims if c.key in ADDED_SINCE} == {NOT_MEASURED}


def test_real_csv_draws_cost_and_stability_figures(tmp_path):
    report = write_report([REAL], tmp_path, formats=("png",),
                          figures=(time_vs_seq_len, memory_vs_seq_len, scaling_stability), warn=False)
    assert all(isinstance(f, Made) and f.files[0].stat().st_size > 20_000 for f in report.figures)
    assert not any("grad_norm_logits not measured" in note for note in report.figures[2].notes)
