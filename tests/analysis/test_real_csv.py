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


# The rows of one `python -m runners.sweep -m experiment=quick` (2026-12-06, 219 points) and what their report
# draws: the same ten figures the report drew from them before the figures moved to seaborn (at 2cf21de).
DEFAULT_SWEEP = Path(__file__).parent / "data" / "default_sweep_results.csv"
DEFAULT_SWEEP_FIGURES = [
    "fig1_time_vs_seq_len", "fig2_memory_vs_seq_len", "fig3_throughput_vs_seq_len", "fig4_causal_saving",
    "fig5_scaling_stability", "fig6_low_precision_overflow", "fig7_accuracy_vs_seq_len", "fig8_heads",
    "fig10_layer_share", "fig18_path_length",
]


def test_the_default_sweeps_report_draws_its_figures_and_lists_no_other(tmp_path):
    report = write_report([DEFAULT_SWEEP], tmp_path, formats=("png",), warn=False)
    drawn = [f.name for f in report.figures if isinstance(f, Made)]
    assert drawn == DEFAULT_SWEEP_FIGURES
    assert all(f.files[0].stat().st_size > 20_000 for f in report.figures if isinstance(f, Made))
    log = tmp_path / "report.log"  # warnings may land there (a library's deprecations), never a failure
    assert not log.exists() or "Traceback" not in log.read_text()
    text = report.path.read_text()
    assert text.count("](figures/fig") == len(DEFAULT_SWEEP_FIGURES) and "not drawn" not in text.lower()
