"""docs/usage.md's config reference is what the fields say (runners/usage_doc.py generates it)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import MappingProxyType

import pytest

from runners import usage_doc
from runners.config import RunnerConf, WandbConf
from selfattn.backends import BACKEND_NAMES, get_backend
from selfattn.fields import config_fields
from selfattn.measure.budget import Budget
from selfattn.point import AXES

USAGE = Path(__file__).resolve().parents[2] / "docs" / "usage.md"


def test_the_page_matches_the_code():
    page = USAGE.read_text(encoding="utf-8")
    assert usage_doc.render(page) == page, "docs/usage.md drifted from the fields: run python -m runners.usage_doc"


def test_every_key_has_a_row():
    reference = usage_doc.reference()
    keys = [*AXES, *(f.name for f in dataclasses.fields(RunnerConf)),
            *(f"budget.{f.name}" for f in dataclasses.fields(Budget)),
            *(f"wandb.{f.name}" for f in dataclasses.fields(WandbConf)),
            *(f"backend.{f.name}" for name in BACKEND_NAMES for f in config_fields(get_backend(name).options_type))]
    for key in keys:
        assert f"| `{key}` |" in reference, key


def test_a_changed_help_is_drift(monkeypatch):
    """The negative control: the check fails when a field's help no longer matches the page."""
    page = USAGE.read_text(encoding="utf-8")
    field = next(f for f in dataclasses.fields(Budget) if f.name == "timing_s")
    monkeypatch.setattr(field, "metadata", MappingProxyType({**field.metadata, "help": "a new meaning"}))
    fresh = usage_doc.render(page)
    assert fresh != page and "| `budget.timing_s` | `1.0` | a finite number > 0 | a new meaning |" in fresh


def test_only_the_text_between_the_markers_changes():
    page = f"before\n{usage_doc.BEGIN}\nstale table\n{usage_doc.END}\nafter\n"
    fresh = usage_doc.render(page)
    assert fresh.startswith(f"before\n{usage_doc.BEGIN}\n") and fresh.endswith(f"{usage_doc.END}\nafter\n")
    assert "stale table" not in fresh and "| `seq_len` | `1024` | an integer >= 1 |" in fresh


@pytest.mark.parametrize("page", ["no markers\n", f"{usage_doc.END}\n{usage_doc.BEGIN}\n",
                                  f"{usage_doc.BEGIN}\n{usage_doc.BEGIN}\n{usage_doc.END}\n"])
def test_a_page_without_one_pair_of_markers_is_refused(page):
    with pytest.raises(ValueError, match="marker|begin"):
        usage_doc.render(page)


def test_check_exits_1_on_drift(tmp_path, capsys):
    stale = tmp_path / "usage.md"
    stale.write_text(f"{usage_doc.BEGIN}\nold\n{usage_doc.END}\n")
    assert usage_doc.main([str(stale), "--check"]) == 1
    assert "python -m runners.usage_doc" in capsys.readouterr().out
    assert usage_doc.main([str(stale)]) == 0 and usage_doc.main([str(stale), "--check"]) == 0
