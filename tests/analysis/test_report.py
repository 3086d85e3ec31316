"""The report end to end: every figure from a default-sweep-like CSV, devices compared, the CLI's exits."""

import re

import pandas as pd
import pytest
from matplotlib.colors import to_hex

from analysis.compare import device_speedups, pick_baseline, speedup_table
from analysis.figures import FIGURES, Made, Skipped
from analysis.figures import causal as causal_module
from analysis.figures import cost as cost_module
from analysis.figures.causal import causal_saving
from analysis.figures.cost import time_vs_seq_len
from analysis.figures.devices import devices_compared
from analysis.figures.style import backend_color, backend_palette
from analysis.report import main, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="session")
def full_report(full_csv, tmp_path_factory):
    return write_report([full_csv], tmp_path_factory.mktemp("report"), formats=("png",), warn=False)


def test_every_single_device_figure_is_written_and_non_empty(full_report):
    made = {f.name: f for f in full_report.figures if isinstance(f, Made)}
    assert len(made) == 8, [f for f in full_report.figures if isinstance(f, Skipped)]
    for fig in made.values():
        (png,) = fig.files
        data = png.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 20_000, png
        assert fig.how_to_read and fig.notes  # a sentence to read it by and the slice it shows
    assert not any("grad_norm_logits not measured" in note for note in made["fig5_scaling_stability"].notes)


def test_report_embeds_figures_and_tables_and_names_the_missing_experiment(full_report):
    text = full_report.path.read_text()
    for fig in full_report.figures:
        if isinstance(fig, Made):
            assert f"](figures/{fig.name}.png)" in text
    # figures without rows (studies the sweep did not run) are not listed at all: nothing a reader cannot act on
    assert "Not drawn" not in text and "not drawn" not in text.split("## Figures")[1]
    skipped = [fig for fig in full_report.figures if isinstance(fig, Skipped)]
    assert skipped and all(fig.title not in text for fig in skipped)
    assert "### 9. Devices compared" not in text
    # the summary table of what was measured opens the report, before the claims
    assert text.index("## What was measured") < text.index("## The chapter's claims")
    assert "| seq_len |" in text and "rows: " in text
    # a rule part several claims share is printed once
    from analysis.cost_claims import GROWTH_RULE
    assert text.count(GROWTH_RULE) == 1 and text.count("judged by the growth rule, below") == 3
    assert "## Fitted exponents" in text
    header = next(line for line in text.splitlines() if line.startswith("| Device ") and "Mask" in line)
    assert [cell.strip() for cell in header.strip("|").split("|")][:4] == ["Device", "Precision", "Back end", "Mask"]
    assert "| 2.00 [" in text or "| 1.9" in text  # fits keep two decimals: tabulate does not re-parse numbers
    verdict_cells = re.findall(r"\| \*\*(holds|does not hold|not measured|not decided at these sizes[^*]*)\*\*", text)
    assert len(verdict_cells) == len(full_report.claims) >= 9
    for csv in ("claims.csv", "exponents.csv"):
        assert not pd.read_csv(full_report.path.parent / csv).empty


def test_exponent_table_recovers_the_synthetic_laws(full_report):
    table = full_report.exponents
    fp32 = table[(table["precision"] == "fp32") & ~table["causal"]].set_index("backend")
    assert abs(fp32.loc["naive", "time_exponent"] - 2.0) < 0.1
    assert abs(fp32.loc["naive", "mem_exponent"] - 2.0) < 0.1
    assert fp32.loc["chunked", "mem_exponent"] < 1.2


def test_two_devices_give_the_comparison_figure_and_table(tmp_path, fabricate):
    fabricate().quadratic_cost(sizes=(512, 1024, 2048)).write(tmp_path / "cpu" / "results.csv")
    fabricate(device="cuda", device_name="NVIDIA H200", hostname="gpu1", speed=50.0, mem_bytes=141e9,
              seed=1).quadratic_cost(sizes=(512, 1024, 2048)).write(tmp_path / "h200" / "results.csv")
    report = write_report([tmp_path / "cpu", tmp_path / "h200"], tmp_path / "out", formats=("png",),
                          figures=(devices_compared,), warn=False)
    (fig9,) = report.figures
    assert isinstance(fig9, Made) and fig9.files[0].stat().st_size > 10_000
    table = report.devices.set_index("backend")
    assert set(report.devices["device"]) == {"NVIDIA H200"} and set(report.devices["baseline"]) == {"Fake CPU 9000"}
    assert (table["speedup_at_largest_n"] > 20).all() and (table["points"] >= 6).all()
    assert "## Devices compared" in report.path.read_text()

    rows = report.loaded.rows
    baseline, note = pick_baseline(rows, "h200")  # a substring of the name picks the baseline
    assert baseline == "NVIDIA H200" and note is None
    assert (speedup_table(device_speedups(rows, baseline))["geomean_speedup"] < 1).all()
    assert pick_baseline(rows, "TPU")[1].startswith("baseline_device: 'TPU' matches none")


def test_cli_writes_png_and_a_pdf_only_when_asked_and_skips_what_is_missing(tmp_path, fabricate, capsys):
    csv = fabricate().quadratic_cost(sizes=(256, 512, 1024)).write(tmp_path / "sweep" / "results.csv")
    assert main([str(csv.parent), "--out", str(tmp_path / "png")]) == 0
    assert (tmp_path / "png" / "figures" / "fig1_time_vs_seq_len.png").read_bytes().startswith(b"\x89PNG")
    assert not list((tmp_path / "png" / "figures").glob("*.pdf"))  # PNG is the default
    assert main([str(csv.parent), "--out", str(tmp_path / "out"), "--pdf"]) == 0
    assert "report.md" in capsys.readouterr().out
    assert (tmp_path / "out" / "figures" / "fig1_time_vs_seq_len.pdf").read_bytes().startswith(b"%PDF")
    text = (tmp_path / "out" / "report.md").read_text()
    assert "Scaling stability vs d_k" not in text  # a study these rows did not run: not listed


def test_cli_exits_non_zero_only_when_nothing_is_usable(tmp_path, capsys):
    bad = tmp_path / "results.csv"
    bad.write_text("status,backend\nok,naive\n")
    assert main([str(bad), str(tmp_path / "missing"), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert any(str(bad) in line and "missing required column" in line for line in err)
    assert any("missing: no results.csv found" in line for line in err)
    assert not (tmp_path / "out" / "report.md").exists()


def test_cli_rejects_unknown_formats(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path), "--out", str(tmp_path), "--formats", "png,gif"])
    assert exc.value.code == 2 and "--formats" in capsys.readouterr().err


def _legend_colors(fig) -> dict[str, str]:
    """{back end: colour} read off a drawn figure's legend entries ('naive, no mask: b=...', 'sdpa: ×1.2 ...')."""
    colors = {}
    for ax in fig.axes:
        legend = ax.get_legend()
        for handle, text in zip(legend.legend_handles if legend else [], legend.get_texts() if legend else []):
            name = text.get_text().split(",")[0].split(":")[0]
            if not name.startswith(("guide", "ideal", "no saving", "device", "oom", "skipped")):
                colors[name] = to_hex(handle.get_color())
    return colors


def test_a_back_end_has_one_colour_in_every_figure_whatever_the_drawing_order(tmp_path, fabricate, monkeypatch):
    fab = fabricate().quadratic_cost(sizes=(256, 512, 1024))
    for n in (256, 512, 1024):  # a back end the registry does not know, with and without a mask
        fab.point(backend="mystery", seq_len=n)
        fab.point(backend="mystery", seq_len=n, causal=True)
    csv = fab.write(tmp_path / "results.csv")
    drawn = []

    def keep(fig, ctx, name):  # look at the figure instead of writing it
        colors = _legend_colors(fig)
        lines = {to_hex(line.get_color()) for ax in fig.axes for line in ax.lines}
        assert set(colors.values()) <= lines, name  # the legend's colours are the drawn lines' colours
        drawn.append((name, colors))
        return []

    monkeypatch.setattr(cost_module, "save", keep)
    monkeypatch.setattr(causal_module, "save", keep)
    for order in ((time_vs_seq_len, causal_saving), (causal_saving, time_vs_seq_len)):  # in this process: `keep` sees
        write_report([csv], tmp_path / "out", formats=("png",), figures=order, warn=False)
    assert len(drawn) == 4
    for name, colors in drawn:
        assert set(colors) == {"naive", "sdpa", "chunked", "mystery"}, (name, colors)
        assert colors == {b: to_hex(backend_color(b)) for b in colors}, name
    assert len(set(drawn[0][1].values())) == 4  # four back ends, four colours


def test_known_back_ends_take_the_registry_colours_and_unknown_ones_a_stable_one():
    from selfattn.backends import BACKEND_NAMES

    known = [backend_color(name) for name in BACKEND_NAMES]
    assert len(set(known)) == len(known)
    assert backend_palette(reversed(BACKEND_NAMES)) == backend_palette(BACKEND_NAMES)
    # An unknown name's colour depends on its name alone: not on what else is drawn, nor on the order
    # (it is a digest of the name, so it is the same in a new process too), and never a known one's.
    alone = backend_palette(["chunked (q_chunk=256)"])["chunked (q_chunk=256)"]
    among = backend_palette(["sdpa", "chunked (q_chunk=256)", "naive"])["chunked (q_chunk=256)"]
    assert alone == among == backend_color("chunked (q_chunk=256)") and alone not in known
    # Two unknown names in one figure never share a colour, even when their digests pick the same one
    # (as many names as there are colours left over by the registry).
    from analysis.figures import style

    names = [f"variant {i}" for i in range(len(style._COLORS) - len(BACKEND_NAMES))]
    palette = backend_palette(names + list(BACKEND_NAMES))
    assert len(set(palette.values())) == len(palette)


def test_importing_the_report_loads_no_plotting_library():
    # figures import their module when first called: the report's own import stays light (a subprocess, since
    # this test session has imported them already); the negative control is a figure module, which does
    import subprocess
    import sys

    probe = ("import sys, importlib; importlib.import_module(sys.argv[1]); "
             "print(','.join(m for m in ('matplotlib', 'seaborn', 'torch') if m in sys.modules))")
    loaded = {module: subprocess.run([sys.executable, "-c", probe, module], capture_output=True, text=True,
                                     check=True).stdout.strip()
              for module in ("analysis.report", "analysis.figures.cost")}
    assert loaded["analysis.report"] == ""
    assert {"matplotlib", "seaborn"} <= set(loaded["analysis.figures.cost"].split(","))  # the figures draw with seaborn


def test_figures_without_rows_create_no_figure_and_share_one_line(tmp_path, fabricate, monkeypatch):
    import matplotlib.figure

    created = []
    init = matplotlib.figure.Figure.__init__

    def counting(self, *args, **kwargs):
        created.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "__init__", counting)
    one_point = fabricate()
    one_point.point(seq_len=256)
    report = write_report([one_point.write(tmp_path / "results.csv")], tmp_path / "out", warn=False)
    assert all(isinstance(fig, Skipped) for fig in report.figures)
    assert created == []  # no figure was made only to be thrown away
    text = report.path.read_text()
    assert "## Figures" in text and "### " not in text.split("## Figures")[1]
    # negative control: rows that draw figure 4 make figures
    lines = fabricate().quadratic_cost(sizes=(256, 512, 1024)).write(tmp_path / "cost.csv")
    write_report([lines], tmp_path / "out2", figures=[f for f in FIGURES if f.__name__ == "causal_saving"], warn=False)
    assert len(created) == 1
