"""Runner tests: helpers live in runner_helpers.py (importable from here on)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from runner_helpers import load_fake  # noqa: E402


@pytest.fixture
def fake_measure(monkeypatch):
    """Replace selfattn.measure by the fake for in-process job tests."""
    fake = load_fake()
    module = types.ModuleType("selfattn.measure")
    module.Budget, module.measure_point = fake.Budget, fake.measure_point
    monkeypatch.setitem(sys.modules, "selfattn.measure", module)
    return fake
