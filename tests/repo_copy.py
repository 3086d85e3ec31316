"""A copy of the repository for a test to change: tests/test_new_axis.py, test_new_scope.py and test_new_metric.py
make their one change there and run the harness on it, so the checkout itself is never edited."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterable

ROOT = Path(__file__).resolve().parents[1]


def copy_repository(target: Path, names: Iterable[str]) -> Path:
    """The repository's `names` (folders and files, relative to its root) copied into `target`, caches left out."""
    for name in names:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def run(tree: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python ARGS` in the copy, its packages first on the path (before any installed checkout)."""
    return subprocess.run([sys.executable, *args], cwd=tree, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(tree)})
