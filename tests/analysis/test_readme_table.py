"""The README's claims table is the committed run's (docs/claims.csv), generated, never typed."""

import pytest

from analysis import readme_table
from analysis.readme_table import BEGIN, END, REPO, render


def test_the_readme_table_is_the_committed_runs():
    assert readme_table.main(["--check"]) == 0, "run `python -m analysis.readme_table` after a new committed run"


def test_a_changed_verdict_makes_the_check_fail(tmp_path):
    claims = (REPO / "docs" / "claims.csv").read_text()
    (tmp_path / "claims.csv").write_text(claims.replace("holds", "does not hold", 1))
    (tmp_path / "report.md").write_text((REPO / "docs" / "report.md").read_text())
    readme = tmp_path / "README.md"
    readme.write_text((REPO / "README.md").read_text())
    assert readme_table.main(["--check", "--docs", str(tmp_path), "--readme", str(readme)]) == 1
    assert readme_table.main(["--docs", str(tmp_path), "--readme", str(readme)]) == 0  # regenerate
    assert "does not hold" in readme.read_text()
    assert readme_table.main(["--check", "--docs", str(tmp_path), "--readme", str(readme)]) == 0


def test_text_outside_the_markers_is_kept_and_a_missing_marker_is_refused(tmp_path):
    docs = REPO / "docs"
    text = render(f"before\n{BEGIN}\nstale-table\n{END}\nafter\n", docs / "claims.csv", docs / "report.md")
    assert text.startswith(f"before\n{BEGIN}\n| # | Claim | Verdict |") and text.endswith(f"{END}\nafter\n")
    assert "stale-table" not in text
    with pytest.raises(ValueError, match="claims-table"):
        render("no markers", docs / "claims.csv", docs / "report.md")
