"""The figures' panels in plain matplotlib (analysis/figures/grid.py): the median over seeds with its p20-p80 band,
one line per hue x style level with its colour, dashes and marker, panels keyed as the figures read them; and no
figure module reaches into matplotlib's or seaborn's private names."""

import ast
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection

from analysis.figures import common, grid
from analysis.figures.common import plt

FIGURES_DIR = Path(grid.__file__).parent


def _seeds() -> pd.DataFrame:
    """Two back ends x two masks, three seeds at n=64 and 128, one at n=256."""
    rows = []
    for backend in ("naive", "sdpa"):
        for mask in ("no mask", "causal"):
            for n, values in ((64, [1.0, 2.0, 9.0]), (128, [4.0, 5.0, 6.0]), (256, [7.0])):
                rows += [{"backend": backend, "mask": mask, "seq_len": n, "time_ms": v, "panel": backend}
                         for v in values]
    return pd.DataFrame(rows)


def test_aggregate_takes_the_median_and_the_seeds_percentile_interval():
    part = _seeds().query("backend == 'naive' and mask == 'causal'")
    out = grid.aggregate(part, "seq_len", "time_ms", "median", ("pi", 60))
    assert list(out["seq_len"]) == [64, 128, 256]
    assert list(out["estimate"]) == [2.0, 5.0, 7.0]
    assert out["low"].iloc[0] == pytest.approx(np.percentile([1, 2, 9], 20))
    assert out["high"].iloc[0] == pytest.approx(np.percentile([1, 2, 9], 80))
    assert np.isnan(out["low"].iloc[2]) and np.isnan(out["high"].iloc[2])  # one seed: no interval
    assert list(grid.aggregate(part, "seq_len", "time_ms", "min", None)["estimate"]) == [1.0, 4.0, 7.0]
    assert grid.aggregate(part, "seq_len", "time_ms", "median", None)["low"].isna().all()


def test_one_value_per_x_is_drawn_as_it_is():
    part = pd.DataFrame({"seq_len": [256, 64, 128], "time_ms": [3.0, 1.0, 2.0]})
    out = grid.aggregate(part, "seq_len", "time_ms", "median", ("pi", 60))
    assert list(out["seq_len"]) == [64, 128, 256] and list(out["estimate"]) == [1.0, 2.0, 3.0]
    assert out["low"].isna().all()


def test_lines_one_per_hue_and_style_with_their_colour_dashes_and_marker():
    palette = {"naive": "#ff0000", "sdpa": "#0000ff"}
    fig, ax = plt.subplots()
    grid.lines(ax, _seeds(), x="seq_len", y="time_ms", hue="backend", palette=palette, style="mask",
               style_order=list(common.MASKS), markers=common.MASK_MARKERS, dashes=common.MASK_DASHES)
    assert len(ax.lines) == 4
    drawn = {(line.get_color(), line.get_marker(), line.get_linestyle()) for line in ax.lines}
    assert drawn == {("#ff0000", "o", "-"), ("#ff0000", "s", "--"), ("#0000ff", "o", "-"), ("#0000ff", "s", "--")}
    assert list(ax.lines[0].get_xdata()) == [64, 128, 256]
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 4  # seeds differ: a band per line
    plt.close(fig)
    fig, ax = plt.subplots()
    grid.lines(ax, _seeds(), x="seq_len", y="time_ms", hue="backend", palette=palette, errorbar=None)
    assert not ax.collections and len(ax.lines) == 2  # negative control: no interval asked, none drawn
    plt.close(fig)


def test_line_grid_keys_its_panels_as_the_figures_read_them_and_hides_empty_ones():
    data = _seeds()
    g = common.line_grid(data, x="seq_len", y="time_ms", hue="backend", palette={"naive": "r", "sdpa": "b"},
                         style="mask", col="panel", col_order=["naive", "sdpa", "none"], col_wrap=2,
                         panel_width=3, panel_height=2)
    assert list(g.axes_dict) == ["naive", "sdpa", "none"] and g.axes.shape == (3,)
    assert tuple(g.figure.get_size_inches()) == (6, 4)
    assert g.axes_dict["none"].axison is False and g.axes_dict["naive"].axison
    assert len(g.axes_dict["naive"].lines) == 2  # that panel's rows only
    plt.close(g.figure)
    g = common.line_grid(data, x="seq_len", y="time_ms", hue="mask", palette={"no mask": "r", "causal": "b"},
                         row="backend", col="mask", panel_width=3, panel_height=2)
    assert set(g.axes_dict) == {(b, m) for b in ("naive", "sdpa") for m in ("no mask", "causal")}
    assert g.axes.shape == (2, 2)
    assert g.axes[1, 0].get_xlabel() == "seq_len" and g.axes[0, 0].get_xlabel() == ""  # outer labels only
    plt.close(g.figure)


def test_points_put_each_category_at_its_place_with_its_range():
    data = pd.DataFrame({"variant": ["a", "a", "b", "b"], "err": [1.0, 3.0, 2.0, 2.0], "precision": ["fp8"] * 4})
    fig, ax = plt.subplots()
    grid.points(ax, data, x="variant", order=["b", "a"], y="err", hue="precision", hue_order=["fp8"],
                palette={"fp8": "k"})
    (line,) = ax.lines
    assert list(line.get_xdata()) == [0.0, 1.0] and list(line.get_ydata()) == [2.0, 2.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["b", "a"]
    (bars,) = ax.collections
    assert [tuple(seg[:, 1]) for seg in bars.get_segments()] == [(2.0, 2.0), (1.0, 3.0)]
    plt.close(fig)


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
_OWN_MODULES = {"common", "style", "grid", "made"}


def test_no_figure_module_uses_a_private_name_of_matplotlib_or_seaborn():
    for node_path in sorted(FIGURES_DIR.glob("*.py")):
        tree = ast.parse(node_path.read_text())
        imports = {alias.name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                   for alias in node.names} | {node.module for node in ast.walk(tree)
                                               if isinstance(node, ast.ImportFrom) and node.module}
        assert not any(name == "seaborn" or name.startswith("seaborn.") for name in imports), node_path.name
        assert _private_uses(node_path) == [], node_path.name


def test_the_private_name_check_sees_one(tmp_path):
    # negative control: the uses the figures had before are found
    probe = tmp_path / "probe.py"
    probe.write_text("import sys\nimport matplotlib.text as mtext\nsys.modules['scipy.stats'] = None\n"
                     "mtext.Text._get_layout = None\nx = text.get_figure(root=True).dpi\nhasattr(ax, '_colorbar')\n")
    assert len(_private_uses(probe)) == 4
