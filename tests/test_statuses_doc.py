"""docs/usage.md#statuses lists every status of the schema, once each, in its order, and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

from selfattn.results import FAILURE_STATUSES, STATUSES

USAGE = Path(__file__).resolve().parents[1] / "docs" / "usage.md"


def statuses_section(text: str) -> str:
    start = text.index("\n## Statuses\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def documented(section: str) -> list[str]:
    """The first cell of each row of the section's table: `ok`, `oom`, ..."""
    return [m.group(1) for m in re.finditer(r"^\| `([a-z_]+)` \|", section, flags=re.MULTILINE)]


def test_the_statuses_table_lists_exactly_the_schemas_statuses():
    section = statuses_section(USAGE.read_text())
    assert documented(section) == list(STATUSES)
    for status in FAILURE_STATUSES:  # the failures a script should see are named as such
        assert f"`{status}`" in section.split("|")[0]


def test_the_check_fails_on_a_table_that_leaves_one_out_or_adds_one():
    section = statuses_section(USAGE.read_text())
    short = "\n".join(line for line in section.splitlines() if not line.startswith("| `crashed` |"))
    assert documented(short) != list(STATUSES)
    assert documented(section + "\n| `hung` | ... |") != list(STATUSES)


def test_the_schema_comment_points_at_the_section():
    source = (USAGE.parents[1] / "selfattn" / "results.py").read_text()
    assert "docs/usage.md#statuses" in source and "\n## Statuses\n" in USAGE.read_text()
