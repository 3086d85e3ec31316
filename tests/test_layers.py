"""The import contracts of pyproject.toml ([tool.importlinter]): `lint-imports` keeps them, and breaks
them when an import goes the wrong way (negative controls on a copy of the packages)."""

from __future__ import annotations

import graphlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# import-linter (and its grimp) come with the test extra; an image without them (a GPU machine's) skips this file
grimp = pytest.importorskip("grimp", reason="import-linter is not installed (pip install .[test])")

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("selfattn", "runners", "analysis")
# importlinter.cli has no __main__ block (`python -m importlinter.cli` would check nothing and exit 0):
# call the `lint-imports` command itself with this interpreter.
LINT_IMPORTS = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LINT_IMPORTS, "--no-cache", "--no-logo"], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_lint_imports_keeps_every_contract():
    result = _lint_imports(ROOT)
    assert result.returncode == 0 and "0 broken" in result.stdout, result.stdout + result.stderr


def test_no_module_imports_itself_through_a_circle():
    """Module by module, imports inside functions included: a cycle the contracts' ignored import
    (selfattn.point -> selfattn.backends.discovery) could hide still shows here."""
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True)
    imports = {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}
    try:
        tuple(graphlib.TopologicalSorter(imports).static_order())
    except graphlib.CycleError as err:
        pytest.fail(f"import cycle: {' -> '.join(err.args[1])}")


@pytest.mark.parametrize(
    "module, line, broken",
    [
        ("selfattn/point.py", "import runners.rows", "Data flows one way"),
        ("analysis/load.py", "import selfattn.api", "never loads torch"),
        ("selfattn/masks.py", "import selfattn.reference", "No import cycles"),
        ("selfattn/results.py", "import wandb", "knows nothing of Hydra or wandb"),
        ("selfattn/backends/options/naive.py", "import selfattn.fp8_mm", "Options never load torch"),
    ],
    ids=["selfattn-imports-runners", "analysis-loads-torch", "cycle", "selfattn-imports-wandb", "options-load-torch"],
)
def test_a_wrong_import_breaks_its_contract(tmp_path, module, line, broken):
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{line}  # the negative control's wrong import\n")
    result = _lint_imports(tmp_path)  # the copy comes first on sys.path (lint-imports adds its cwd)
    assert result.returncode == 1, result.stdout + result.stderr
    assert broken in result.stdout and "1 broken" in result.stdout, result.stdout
