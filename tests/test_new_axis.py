"""How many files a new sweep axis touches, checked by making the change: docs/architecture.md ("adding a sweep
axis") lists the files, this test adds the axis `dropout` to a copy of the repository by editing those files
and no other, then runs tests/new_axis_check.py and the tests that hold the config and docs/usage.md to the code
in the copy. Every check passes with all of them; leaving out any one fails one, so none is optional.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.repo_copy import copy_repository, run

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
# file -> (the line the new text goes before, the text): the change a developer makes for a new axis.
# docs/usage.md is generated from the fields (python -m runners.usage_doc), not written.
EDITS = {
    "selfattn/point.py": (r"    seed: int = spec\(", '    dropout: float = spec(0.0, ge=0, le=1, help="a new axis")\n'),
    "docs/usage.md": None,
}
COPIED = ("selfattn", "runners", "analysis", "hydra_plugins", "conf", "tests", "pyproject.toml", "docs/usage.md")
MIRRORS = ("tests/runners/test_config.py::test_conf_mirrors_the_dataclasses_that_own_each_key",
           "tests/runners/test_usage_doc.py::test_the_page_matches_the_code",
           "tests/runners/test_usage_doc.py::test_every_key_has_a_row",
           "tests/test_docs.py::test_usage_names_every_point_field")


def documented_files() -> list[str]:
    """The numbered files of docs/architecture.md's worked example of a new axis."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text[text.index("## Worked example: adding a sweep axis"):]
    section = section[:section.index("\n## ", 1)]
    return re.findall(r"^\d+\. `([^`]+)`", section, flags=re.M)


def test_the_page_lists_the_files_this_test_edits():
    assert documented_files() == list(EDITS)
    assert "Two files declare it" in ARCHITECTURE.read_text(encoding="utf-8") and len(EDITS) == 2


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict[str, Path]:
    """'all': the copy with every edit; per file, the same copy with that file as it was."""
    original = copy_repository(tmp_path_factory.mktemp("original"), COPIED)
    edited = copy_repository(tmp_path_factory.mktemp("edited"), COPIED)
    for name, edit in EDITS.items():
        if edit is None:
            continue
        anchor, text = edit
        path = edited / name
        source = path.read_text(encoding="utf-8")
        found = re.search(rf"^{anchor}", source, flags=re.M)
        assert found, f"{name}: no line matches {anchor!r}: update EDITS with the file"
        path.write_text(source[:found.start()] + text + source[found.start():], encoding="utf-8")
    generated = run(edited, "-m", "runners.usage_doc")
    assert generated.returncode == 0, generated.stdout + generated.stderr
    assert "| `dropout` |" in (edited / "docs" / "usage.md").read_text(encoding="utf-8")
    out = {"all": edited}
    for name in EDITS:
        without = tmp_path_factory.mktemp("without") / "tree"
        shutil.copytree(edited, without)
        shutil.copy2(original / name, without / name)
        out[name] = without
    return out


def default_point_id() -> str:
    from runners import config

    return config.parse_job({"backend": {"name": "naive"}, "precision": {"name": "fp32"}, "device": "cpu",
                             "seq_len": 64, "head_dim": 16}).point_id


def mirrors(tree: Path, nodes=MIRRORS) -> subprocess.CompletedProcess:
    return run(tree, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *nodes)


@pytest.mark.slow
def test_a_new_axis_is_the_two_files_and_no_edit_in_analysis(trees):
    tree = trees["all"]
    config = run(tree, "tests/new_axis_check.py", "config", default_point_id())
    assert config.returncode == 0, config.stdout + config.stderr
    analysis = run(tree, "tests/new_axis_check.py", "analysis")
    assert analysis.returncode == 0, analysis.stdout + analysis.stderr
    tests = mirrors(tree)
    assert tests.returncode == 0, tests.stdout[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("left_out", list(EDITS))
def test_leaving_out_any_of_them_fails_a_check(trees, left_out):
    tree = trees[left_out]
    if left_out == "selfattn/point.py":  # no axis (its row column derives from the field)
        found = run(tree, "tests/new_axis_check.py", "config", default_point_id())
    else:
        found = mirrors(tree, MIRRORS[1:])
    assert found.returncode != 0, f"{left_out} left out, yet every check passed:\n{found.stdout[-2000:]}"
