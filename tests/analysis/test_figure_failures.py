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
    assert report.main([str(rows), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    failed = [line for line in err.splitlines() if line.startswith("report: figure ")]
    assert len(failed) >= 4  # figures 1-4 are the cost rows' (time, memory, throughput, causal)
    log = tmp_path / "out" / report.LOG_NAME
    assert all(line.endswith(f"RuntimeError: the disk is full (traceback in {log})") for line in failed), failed
    assert any("time_vs_seq_len" in line for line in failed)
    assert "no figure its rows call for could be drawn" in err
    assert "Traceback" not in err  # the tracebacks are in the log the lines name
    assert log.read_text().count("Traceback (most recent call last)") == len(failed)


def test_a_report_that_drew_its_figures_exits_0_and_names_no_failure(tmp_path, fabricate, capsys):
    # negative control: the same rows, nothing broken
    rows = _cost_rows(fabricate, tmp_path)
    assert report.main([str(rows), "--out", str(tmp_path / "out"), "--all-figures"]) == 0
    captured = capsys.readouterr()
    assert "report: figure " not in captured.err and "failed" not in captured.out
    assert "Traceback" not in captured.err


def test_one_failed_figure_among_drawn_ones_exits_0_unless_all_figures_are_asked_for(tmp_path, fabricate,
                                                                                    monkeypatch, capsys):
    rows = _cost_rows(fabricate, tmp_path)
    monkeypatch.setattr(causal, "save", _broken_save)
    args = [str(rows), "--out", str(tmp_path / "out")]
    assert report.main(args) == 0
    captured = capsys.readouterr()
    assert "1 of the " in captured.out and "its rows call for failed" in captured.out
    assert "report: figure causal_saving not drawn: RuntimeError: the disk is full (traceback in " in captured.err
    assert report.main(args + ["--all-figures"]) == 1


def test_rows_that_call_for_no_figure_are_not_a_failure(tmp_path, fabricate):
    one_point = fabricate()
    one_point.point(seq_len=256)
    rows = one_point.write(tmp_path / "results.csv")
    assert report.main([str(rows), "--out", str(tmp_path / "out"), "--all-figures"]) == 0


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


DATA = Path(__file__).parent / "data"


def _report_lines(capsys) -> tuple[str, str]:
    captured = capsys.readouterr()
    return captured.out, captured.err


def test_a_masks_sweep_without_memory_draws_its_figures_without_a_traceback(tmp_path, capsys):
    """A real sweep over window x causal x alibi x heads with `metrics=[accuracy]` (no memory column measured):
    figure 11's memory panel had only NaN on a log axis, and matplotlib's traceback ("Data cannot be log-scaled")
    reached the console. Now the figure is drawn, its memory panel saying what was not measured."""
    out_dir = tmp_path / "out"
    assert report.main([str(DATA / "masks_accuracy_only.csv"), "--out", str(out_dir), "--all-figures"]) == 0
    out, err = _report_lines(capsys)
    assert "Traceback" not in out + err and "not drawn" not in err
    assert (out_dir / "figures" / "fig11_masks.png").is_file()
    assert "peak_alloc_bytes not measured" in (out_dir / "report.md").read_text()


def test_an_absurd_tflops_is_no_fit_and_no_traceback(tmp_path, fabricate, capsys):
    """A cheating plugin's row with an absurd TFLOP/s made fit_power_law's prefactor overflow
    (`OverflowError: math range error` from figure 3): the line is drawn without a fitted law."""
    frame = fabricate().quadratic_cost(sizes=(256, 512, 1024, 2048, 4096)).frame()
    frame.loc[(frame["backend"] == "sdpa") & (frame["seq_len"] == 1024), "tflops"] = 1e300
    csv = tmp_path / "results.csv"
    frame.to_csv(csv, index=False)
    assert report.main([str(csv), "--out", str(tmp_path / "out"), "--all-figures"]) == 0
    out, err = _report_lines(capsys)
    assert "Traceback" not in out + err and "OverflowError" not in out + err
    assert (tmp_path / "out" / "figures" / "fig3_throughput_vs_seq_len.png").is_file()


def test_a_figure_that_cannot_be_drawn_says_why_in_one_line_and_logs_its_traceback(tmp_path, fabricate, monkeypatch,
                                                                                   capsys):
    """The line names the figure, the error and the log; the console shows no traceback (negative control of the
    two above: a figure that does raise)."""
    def log_axis_of_nothing(rows, ctx):
        from analysis.figures.common import plt

        fig, ax = plt.subplots()
        ax.set_yscale("log")
        ax.set_yticks([0.0, -1.0])  # matplotlib refuses: no tick of a log axis is <= 0
        ax.figure.canvas.draw()

    log_axis_of_nothing.__name__ = "masks_vs_density"
    rows = _cost_rows(fabricate, tmp_path)
    written = report.write_report([rows], tmp_path / "out", figures=[log_axis_of_nothing], warn=False)
    lines, none_drawn = report.figure_summary(written)
    assert none_drawn and len(lines) == 2
    assert lines[1].startswith("report: figure masks_vs_density not drawn: ") and "\n" not in lines[1]
    assert lines[1].endswith(f"(traceback in {tmp_path / 'out' / report.LOG_NAME})")
    assert "Traceback (most recent call last)" in (tmp_path / "out" / report.LOG_NAME).read_text()
    assert "Traceback" not in "".join(_report_lines(capsys))
    text = written.path.read_text()  # report.md names it where the figure would be, with the log to read
    assert "### 1. masks_vs_density" in text and f"(the traceback is in {report.LOG_NAME})" in text
