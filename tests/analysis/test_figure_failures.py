"""A figure that fails is loud: the report names it with its reason on one line, exits 1 when none of the figures
its rows call for was drawn (and, with --all-figures, when any failed), and the sweep's end says so too."""

import subprocess
import sys
from pathlib import Path

import pytest

from analysis import report
from analysis.figures import accuracy, causal, cost  # imported first: each binds save from common once

REPO = Path(__file__).resolve().parents[2]


def _cost_rows(fabricate, tmp_path: Path) -> Path:
    return fabricate().quadratic_cost(sizes=(256, 512, 1024)).write(tmp_path / "results.csv")


def _broken_save(*_args, **_kwargs):
    raise RuntimeError("the disk is full")


def test_a_report_that_drew_none_of_its_figures_names_each_and_exits_1(tmp_path, fabricate, monkeypatch, capsys):
    rows = _cost_rows(fabricate, tmp_path)
    for module in (cost, causal, accuracy):  # the figures these rows call for
        monkeypatch.setattr(module, "save", _broken_save)
    assert report.main([str(rows), "--out", str(tmp_path / "out"), "--workers", "1"]) == 1
    err = capsys.readouterr().err
    failed = [line for line in err.splitlines() if line.startswith("report: figure ")]
    assert len(failed) >= 4  # figures 1-4 are the cost rows' (time, memory, throughput, causal)
    assert all(line.endswith("RuntimeError: the disk is full") for line in failed), failed
    assert any("time_vs_seq_len" in line for line in failed)
    assert "no figure its rows call for could be drawn" in err


def test_a_report_that_drew_its_figures_exits_0_and_names_no_failure(tmp_path, fabricate, capsys):
    # negative control: the same rows, nothing broken
    rows = _cost_rows(fabricate, tmp_path)
    assert report.main([str(rows), "--out", str(tmp_path / "out"), "--workers", "1", "--all-figures"]) == 0
    captured = capsys.readouterr()
    assert "report: figure " not in captured.err and "failed" not in captured.out


def test_one_failed_figure_among_drawn_ones_exits_0_unless_all_figures_are_asked_for(tmp_path, fabricate,
                                                                                    monkeypatch, capsys):
    rows = _cost_rows(fabricate, tmp_path)
    monkeypatch.setattr(causal, "save", _broken_save)
    args = [str(rows), "--out", str(tmp_path / "out"), "--workers", "1"]
    assert report.main(args) == 0
    captured = capsys.readouterr()
    assert "1 of the " in captured.out and "its rows call for failed" in captured.out
    assert "report: figure causal_saving not drawn: RuntimeError: the disk is full" in captured.err
    assert report.main(args + ["--all-figures"]) == 1


def test_rows_that_call_for_no_figure_are_not_a_failure(tmp_path, fabricate):
    one_point = fabricate()
    one_point.point(seq_len=256)
    rows = one_point.write(tmp_path / "results.csv")
    assert report.main([str(rows), "--out", str(tmp_path / "out"), "--workers", "1", "--all-figures"]) == 0


def _broken_canvas(tmp_path: Path) -> Path:
    """A folder whose sitecustomize breaks matplotlib's canvas draw in any interpreter that has it on its path."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import matplotlib.backends.backend_agg as agg\n"
        "def draw(self, *a, **k):\n    raise RuntimeError('no canvas')\n"
        "agg.FigureCanvasAgg.draw = draw\n")
    return site


@pytest.mark.slow
def test_the_command_line_exits_1_when_matplotlib_cannot_draw(tmp_path, fabricate):
    """Through `python -m analysis.report` in a subprocess: every figure's save raises (a sitecustomize breaks
    matplotlib's canvas draw), so the report exits 1 and names each figure."""
    rows = _cost_rows(fabricate, tmp_path)
    site = _broken_canvas(tmp_path)
    done = subprocess.run([sys.executable, "-m", "analysis.report", str(rows), "--out", str(tmp_path / "out")],
                          cwd=REPO, env={"PYTHONPATH": f"{site}:{REPO}", "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "report: figure time_vs_seq_len not drawn: RuntimeError: no canvas" in done.stderr


@pytest.mark.slow
def test_the_sweeps_end_says_when_no_figure_was_drawn(tmp_path, fabricate, monkeypatch, capfd):
    """The sweep's end runs the report as its own process (runners/report_process.py): its lines name the figure
    that failed, and the sweep's own line says that none of the figures its rows call for was drawn."""
    from runners import report_process

    rows = _cost_rows(fabricate, tmp_path)
    site = _broken_canvas(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(site))  # the child's: the checkout first, then this
    assert report_process.write_report(rows, tmp_path / "report", limit_s=300) is not None
    err = capfd.readouterr().err
    assert "report: figure time_vs_seq_len not drawn: RuntimeError: no canvas" in err
    assert "drew none of the figures its rows call for" in err
    monkeypatch.delenv("PYTHONPATH")
    assert report_process.write_report(rows, tmp_path / "report2", limit_s=300) is not None
    assert "drew none" not in capfd.readouterr().err  # negative control


_WRITE_REPORT = report.write_report


def _written(paths, out, *, broken: bool) -> report.Report:
    from analysis.figures import FIGURES

    figures = [f for f in FIGURES if f.__name__ == "time_vs_seq_len"]
    with pytest.MonkeyPatch.context() as patch:
        if broken:
            patch.setattr(cost, "save", _broken_save)
        return _WRITE_REPORT(paths, out, figures=figures, warn=False, workers=1)
