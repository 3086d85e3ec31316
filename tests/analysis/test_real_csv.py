"""A real results.csv from `python -m runners.sweep` (the quick study on this repo's 2-core CPU VM)
loads cleanly and gives the physics claims that do not depend on timing noise."""

from pathlib import Path

from analysis.claims import HOLDS, check_claims
from analysis.figures import Made
from analysis.figures.cost import memory_vs_seq_len
from analysis.figures.stability import scaling_stability
from analysis.load import load
from analysis.report import write_report

REAL = Path(__file__).parent / "data" / "quick_cpu_results.csv"


def test_real_sweep_csv_loads_without_problems():
    loaded = load([REAL], warn=False)
    assert not loaded.problems and len(loaded.rows) >= 30
    assert set(loaded.rows["backend"]) == {"naive", "sdpa", "chunked"}


def test_real_stability_claims_hold():
    claims = {c.key: c for c in check_claims(load([REAL], warn=False).rows)}
    for key in ("scaled_std_one", "unscaled_std_sqrt", "unscaled_saturates"):
        assert claims[key].verdict == HOLDS, claims[key].evidence
    # This CSV predates grad_norm_logits: the gradient claim falls back to ‖∂L/∂Q‖ and says so
    assert "‖∂L/∂Q‖ rule" in claims["unscaled_grad_vanishes"].evidence


def test_real_csv_draws_cost_and_stability_figures(tmp_path):
    report = write_report([REAL], tmp_path, formats=("png",), figures=(memory_vs_seq_len, scaling_stability),
                          warn=False)
    assert all(isinstance(f, Made) and f.files[0].stat().st_size > 20_000 for f in report.figures)
    assert any("gradient panel shows ‖∂loss/∂Q‖" in note for note in report.figures[1].notes)
