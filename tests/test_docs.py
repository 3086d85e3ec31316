"""The pages link where they say: every relative link of README.md and docs/*.md resolves.

A link is `[text](target)` or `![alt](target)`; a relative target must name a file of the
repository, and `page.md#anchor` a heading of that page (GitHub's anchor spelling). The README,
the front page, also stays a front page: at most 10 KB. docs/usage.md names every field of
`selfattn.Point`, as its generated config reference names every key.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")


def links(text: str) -> list[str]:
    """Link targets outside code blocks and code spans."""
    return LINK.findall(CODE.sub("", FENCE.sub("", text)))


def anchors(text: str) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as dashes."""
    found: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", text).splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
        count = found.get(slug, 0)
        found[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def broken(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    bad = []
    for target in links(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not a file of the repository
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            bad.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text(encoding="utf-8")):
            bad.append(f"{target}: no heading #{anchor} in {file.name}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    assert broken(page) == []


def test_a_broken_link_is_found(tmp_path):
    """The negative control: a missing file and a missing heading are both reported."""
    (tmp_path / "other.md").write_text("# Other page\n\n## A section\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#a-section) [gone](missing.md) [no heading](other.md#nowhere)\n"
                    "`[in code](missing.md)` [web](https://example.org/x)\n")
    assert broken(page) == ["missing.md: no such file", "other.md#nowhere: no heading #nowhere in other.md"]


def test_readme_is_a_front_page():
    assert len((ROOT / "README.md").read_bytes()) <= 10 * 1024


def test_performance_page_is_a_reference():
    # each target, its command, its latest figures; how they were reached lives in git history
    page = (ROOT / "docs" / "performance.md").read_text()
    assert len(page.encode()) <= 15 * 1024
    for target in range(1, 9):
        assert f"| {target} |" in page, target  # every target has its latest figure in the table


def point_fields_missing(page_text: str) -> list[str]:
    """The fields of `selfattn.Point` that docs/usage.md never names as `field` (in its text or its
    generated config reference): every field a user can set is documented on that page."""
    from selfattn.point import Point

    return [f.name for f in dataclasses.fields(Point) if f"`{f.name}`" not in page_text]


def test_usage_names_every_point_field():
    assert point_fields_missing((ROOT / "docs" / "usage.md").read_text(encoding="utf-8")) == []


def test_a_missing_point_field_is_found():
    """The negative control: a page without `backend_options` (or any field) is reported."""
    page = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
    assert point_fields_missing(page.replace("`backend_options`", "backend_options")) == ["backend_options"]
    assert point_fields_missing(page.replace("| `seed` |", "| seed |")) == ["seed"]
