"""A new metric is one function: docs/architecture.md ("adding a metric") shows it, and this test makes that change
in a copy of the repository (the function appended to selfattn/measure/metric_steps.py, docs/usage.md generated again),
then runs `python -m runners.sweep ... metrics=[traffic,flops_per_byte]` there: results.csv gains the declared
column with the value the function computes, every column results.csv had keeps its place, and a sweep that
leaves the metric out leaves its column empty. The original repository refuses the name (the negative control).
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from selfattn.results import COLUMNS
from tests.repo_copy import copy_repository, run

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
COPIED = ("selfattn", "runners", "analysis", "hydra_plugins", "conf", "tests", "pyproject.toml", "docs/usage.md")
TARGET = "selfattn/measure/metric_steps.py"
POINT = ("device=cpu", "seq_len=32", "heads=2", "head_dim=8", "budget.timing_s=0.02", "budget.accuracy_rows=4",
         "budget.measure_device_peak=false", "wandb.mode=disabled", "report=false")


def documented_function() -> str:
    """The worked example's code block: the function a developer adds."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text[text.index("## Worked example: adding a metric"):]
    section = section[:section.index("\n## ", 1)]
    found = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert found, "docs/architecture.md: the metric example has no python block"
    return found.group(1)


def sweep(tree: Path, folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runners.sweep", *POINT, f"hydra.run.dir={folder}", *args],
                          cwd=tree, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(tree), "HYDRA_FULL_ERROR": "0"})


def rows(folder: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(folder / "results.csv", newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or ()), list(reader)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    target = copy_repository(tmp_path_factory.mktemp("new_metric"), COPIED)
    path = target / TARGET
    path.write_text(path.read_text(encoding="utf-8") + "\n\n" + documented_function(), encoding="utf-8")
    # docs/usage.md is generated (the `metrics` key's help names every metric), not written
    generated = run(target, "-m", "runners.usage_doc")
    assert generated.returncode == 0, generated.stdout + generated.stderr
    return target


@pytest.mark.slow
def test_a_new_metric_is_one_function(tree, tmp_path):
    chosen = sweep(tree, tmp_path / "chosen", "metrics=[traffic,flops_per_byte]")
    assert chosen.returncode == 0, chosen.stdout[-2000:] + chosen.stderr[-2000:]
    header, (row,) = rows(tmp_path / "chosen")
    assert tuple(header[:len(COLUMNS)]) == COLUMNS  # every column results.csv had, in its place
    assert header[len(COLUMNS):] == ["flops_per_byte"]  # the new one last
    assert row["status"] == "ok" and row["metrics"] == "traffic,flops_per_byte", row
    assert float(row["flops_per_byte"]) == pytest.approx(float(row["flops"]) / float(row["bytes_moved"]))

    left_out = sweep(tree, tmp_path / "left_out", "metrics=[traffic]")
    assert left_out.returncode == 0, left_out.stdout[-2000:] + left_out.stderr[-2000:]
    header, (row,) = rows(tmp_path / "left_out")
    assert header[len(COLUMNS):] == ["flops_per_byte"] and row["flops_per_byte"] == "" and row["metrics"] == "traffic"


@pytest.mark.slow
def test_the_schema_registry_and_usage_tests_hold_with_it(tree):
    """The header's columns keep their places, the registry's checks and the generated usage page agree."""
    found = run(tree, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "tests/test_results_columns.py",
                "tests/runners/test_usage_doc.py", "tests/measure/test_metrics_registry.py",
                "-k", "not chosen_ones_in_order and not some_metrics", timeout=600)
    assert found.returncode == 0, found.stdout[-3000:]


@pytest.mark.slow
def test_without_the_function_the_name_is_refused(tmp_path):
    refused = sweep(ROOT, tmp_path / "refused", "metrics=[traffic,flops_per_byte]")
    assert refused.returncode != 0
    assert "metrics: unknown metric 'flops_per_byte'" in refused.stdout + refused.stderr
