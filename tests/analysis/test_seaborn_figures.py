"""The figures' panels through seaborn (analysis/figures/common.line_grid is `sns.relplot(kind="line")`): the median
over seeds with its p20-p80 band, one line per hue x style level with its colour, dashes and marker, panels keyed as
the figures read them; every figure module draws with seaborn; and none reaches into a private name of matplotlib,
seaborn or scipy."""

import ast
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection

from analysis.figures import FIGURES, common
from analysis.figures.common import plt

FIGURES_DIR = Path(common.__file__).parent


def _seeds() -> pd.DataFrame:
    """Two back ends x two masks, three seeds at n=64 and 128, one at n=256."""
    rows = []
    for backend in ("naive", "sdpa"):
        for mask in ("no mask", "causal"):
            for n, values in ((64, [1.0, 2.0, 9.0]), (128, [4.0, 5.0, 6.0]), (256, [7.0])):
                rows += [{"backend": backend, "mask": mask, "seq_len": n, "time_ms": v, "panel": backend}
                         for v in values]
    return pd.DataFrame(rows)


def test_lines_are_the_median_over_seeds_with_their_p20_p80_band():
    data = _seeds().query("backend == 'naive' and mask == 'causal'")
    g = common.line_grid(data, x="seq_len", y="time_ms", hue="backend", palette={"naive": "#ff0000"},
                         panel_width=3, panel_height=2)
    ax = g.axes.flat[0]
    (line,) = ax.lines
    assert list(line.get_xdata()) == [64, 128, 256] and list(line.get_ydata()) == [2.0, 5.0, 7.0]
    (band,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
    vertices = band.get_paths()[0].vertices
    for n, seeds in ((64, [1, 2, 9]), (128, [4, 5, 6])):  # each size's p20 and p80 over its seeds
        at_n = sorted(set(np.round(vertices[vertices[:, 0] == n][:, 1], 9)))
        assert at_n == pytest.approx([np.percentile(seeds, 20), np.percentile(seeds, 80)])
    plt.close(g.figure)
    g = common.line_grid(data, x="seq_len", y="time_ms", hue="backend", palette={"naive": "#ff0000"}, errorbar=None,
                         estimator="min", panel_width=3, panel_height=2)
    ax = g.axes.flat[0]
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]  # negative control: no interval asked
    assert list(ax.lines[0].get_ydata()) == [1.0, 4.0, 7.0]
    plt.close(g.figure)


def test_lines_one_per_hue_and_style_with_their_colour_dashes_and_marker():
    palette = {"naive": "#ff0000", "sdpa": "#0000ff"}
    g = common.line_grid(_seeds(), x="seq_len", y="time_ms", hue="backend", palette=palette, style="mask",
                         panel_width=3, panel_height=2)
    ax = g.axes.flat[0]
    assert len(ax.lines) == 4
    drawn = {(line.get_color(), line.get_marker(), line.get_linestyle()) for line in ax.lines}
    assert drawn == {("#ff0000", "o", "-"), ("#ff0000", "s", "--"), ("#0000ff", "o", "-"), ("#0000ff", "s", "--")}
    plt.close(g.figure)


def test_line_grid_keys_its_panels_as_the_figures_read_them_and_hides_empty_ones():
    data = _seeds()
    g = common.line_grid(data, x="seq_len", y="time_ms", hue="backend", palette={"naive": "r", "sdpa": "b"},
                         style="mask", col="panel", col_order=["naive", "sdpa", "none"], col_wrap=2,
                         panel_width=3, panel_height=2)
    assert list(g.axes_dict) == ["naive", "sdpa", "none"] and g.axes.shape == (3,)
    assert g.axes_dict["none"].axison is False and g.axes_dict["naive"].axison
    assert len(g.axes_dict["naive"].lines) == 2  # that panel's rows only
    plt.close(g.figure)
    g = common.line_grid(data, x="seq_len", y="time_ms", hue="mask", palette={"no mask": "r", "causal": "b"},
                         row="backend", col="mask", panel_width=3, panel_height=2)
    assert set(g.axes_dict) == {(b, m) for b in ("naive", "sdpa") for m in ("no mask", "causal")}
    assert g.axes.shape == (2, 2)
    assert g.axes[1, 0].get_xlabel() == "seq_len" and g.axes[0, 0].get_xlabel() == ""  # outer labels only
    plt.close(g.figure)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names} | {
        f"{node.module}.{alias.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names}


def test_every_figure_module_draws_with_seaborn():
    modules = {f.module.rsplit(".", 1)[-1] for f in FIGURES} | {"attention_maps"}
    for name in sorted(modules):
        imports = _imports(FIGURES_DIR / f"{name}.py")
        assert "seaborn" in imports or "analysis.figures.common.line_grid" in imports, name
    assert "seaborn" in _imports(FIGURES_DIR / "common.py")
    assert not (FIGURES_DIR / "grid.py").exists() and not (FIGURES_DIR / "draw.py").exists()


def test_one_theme_set_through_seaborn():
    import matplotlib

    assert matplotlib.rcParams["font.size"] == common.RC["font.size"]  # sns.set_theme(rc=RC) at import
    assert matplotlib.rcParams["xtick.direction"] == "out"  # seaborn's "ticks" style


def _private_uses(path: Path) -> list[str]:
    """Attribute reads and writes of an underscore name on anything but self, and sys.modules assignments."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            if owner not in ("self", "cls") and not (owner or "").startswith("_") and owner not in _OWN_MODULES:
                found.append(f"{path.name}:{node.lineno}: .{node.attr}")
        if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "sys.modules":
            found.append(f"{path.name}:{node.lineno}: sys.modules[...]")
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("get_figure") and node.keywords:
            found.append(f"{path.name}:{node.lineno}: get_figure(...)")  # root= exists only from matplotlib 3.10
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("hasattr", "getattr", "setattr") \
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
                and str(node.args[1].value).startswith("_"):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node.func)}(..., {node.args[1].value!r})")
    return found


# the project's own modules, whose underscore names are the project's to use
_OWN_MODULES = {"common", "style", "made"}
ANALYSIS_DIR = FIGURES_DIR.parent


def _private_imports(path: Path) -> list[str]:
    """Imports of an underscore name (or module) of seaborn, scipy or matplotlib."""
    return [name for name in _imports(path) if name.split(".")[0] in ("seaborn", "scipy", "matplotlib")
            and any(part.startswith("_") and not part.startswith("__") for part in name.split("."))]


def test_no_analysis_module_uses_a_private_name_of_matplotlib_seaborn_or_scipy():
    for node_path in sorted([*FIGURES_DIR.glob("*.py"), *ANALYSIS_DIR.glob("*.py")]):
        assert _private_imports(node_path) == [], node_path.name
        if node_path.parent == FIGURES_DIR:
            assert _private_uses(node_path) == [], node_path.name


def test_the_private_name_check_sees_one(tmp_path):
    # negative control: the uses the figures had before are found
    probe = tmp_path / "probe.py"
    probe.write_text("import sys\nimport matplotlib.text as mtext\nsys.modules['scipy.stats'] = None\n"
                     "mtext.Text._get_layout = None\nx = text.get_figure(root=True).dpi\nhasattr(ax, '_colorbar')\n")
    assert len(_private_uses(probe)) == 4
    probe.write_text("from seaborn._core.plot import Plot\nfrom scipy.stats._mannwhitneyu import _mwu_choose_method\n")
    assert len(_private_imports(probe)) == 2


def _cost_rows(fabricate, tmp_path, **flag):
    from analysis.load import load

    frame = fabricate().quadratic_cost(sizes=(256, 512, 1024, 2048)).frame()
    frame["noisy"], frame["num_threads"] = False, 2
    at = (frame["backend"] == "sdpa") & (frame["seq_len"] == 1024) & ~frame["causal"].astype(bool)
    for column, value in flag.items():
        frame.loc[at, column] = value
    frame.to_csv(tmp_path / "results.csv", index=False)
    return load([tmp_path / "results.csv"], warn=False).rows


def _hollow_markers(fig) -> list:
    return [line for ax in fig.axes for line in ax.lines
            if line.get_markerfacecolor() in ("white", "w", (1.0, 1.0, 1.0, 1.0)) and line.get_xdata().size == 1]


@pytest.mark.parametrize("flag", [{"noisy": True}, {"num_threads": 1}, {}], ids=["noisy", "fewer-threads", "none"])
def test_noisy_and_fewer_thread_rows_are_hollow_with_a_legend_entry(tmp_path, fabricate, monkeypatch, flag):
    from analysis.figures import causal, cost
    from analysis.figures.made import Context

    drawn = {}
    for module in (cost, causal):
        monkeypatch.setattr(module, "save", lambda fig, ctx, name: drawn.setdefault(name, fig) and [])
    rows = _cost_rows(fabricate, tmp_path, **flag)
    for make in (cost.time_vs_seq_len, cost.throughput_vs_seq_len, causal.causal_saving):
        made = make(rows, Context(tmp_path / "figures"))
        fig = drawn[made.name]
        legend_texts = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
        if flag:
            assert len(_hollow_markers(fig)) == 1, made.name  # the one flagged row, over its line
            assert common.UNSURE_LABEL in legend_texts and "Hollow markers" in made.how_to_read
        else:  # negative control: nothing flagged, nothing hollow, no legend entry for it
            assert _hollow_markers(fig) == [] and common.UNSURE_LABEL not in legend_texts
        plt.close(fig)


def test_sizes_and_bytes_read_in_one_style():
    assert [common.size_text(n) for n in (512, 1024, 1536, 2048, 2816, 131072)] == \
        ["512", "1K", "1.5K", "2K", "2.75K", "128K"]
    assert [common.bytes_text(b) for b in (512, 1536, 2**20, 3 * 2**30)] == ["512 B", "1.5 KiB", "1 MiB", "3 GiB"]
