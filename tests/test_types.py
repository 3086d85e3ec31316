"""scripts/check_types.py: how mypy's output is held to the rules (selfattn/ and runners/ clean, analysis/'s
baseline only shrinking). CI runs the script itself (.ci/run); these tests check its judgement on fixed output."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("check_types", REPO / "scripts" / "check_types.py")
check_types = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_types)

OUTPUT = """\
selfattn/point.py:308: error: Argument 1 to "f" has incompatible type "int"; expected "str"  [arg-type]
selfattn/point.py:308: note: see the docs
analysis/load.py:12: error: Name "x" is not defined  [name-defined]
analysis/load.py:40:7: error: Name "x" is not defined  [name-defined]
Found 3 errors in 2 files (checked 3 source files)
"""


def test_errors_drop_line_numbers_notes_and_the_summary():
    assert check_types.errors_of(OUTPUT) == [
        'selfattn/point.py: Argument 1 to "f" has incompatible type "int"; expected "str"  [arg-type]',
        'analysis/load.py: Name "x" is not defined  [name-defined]',
        'analysis/load.py: Name "x" is not defined  [name-defined]',
    ]


def test_an_error_in_selfattn_fails_whatever_the_baseline_lists():
    errors = check_types.errors_of(OUTPUT)
    in_clean, new, gone = check_types.compare(errors, Counter(errors + errors))  # even if listed
    assert in_clean == [errors[0]] and new == []


def test_the_baseline_counts_repeats_and_never_grows():
    errors = check_types.errors_of(OUTPUT)[1:]
    one = Counter({errors[0]: 1})  # the file had this error once: a second one is new
    _, new, gone = check_types.compare(errors, one)
    assert new == [errors[0]] and gone == []


def test_a_fixed_error_must_leave_the_baseline():
    listed = Counter({'analysis/load.py: Name "x" is not defined  [name-defined]': 2,
                      "analysis/cost.py: gone  [misc]": 1})
    _, new, gone = check_types.compare(check_types.errors_of(OUTPUT)[1:], listed)
    assert new == [] and gone == ["analysis/cost.py: gone  [misc]"]


def test_the_baseline_names_only_files_of_analysis_that_exist():
    baseline = check_types.read_baseline()
    assert baseline, "analysis/mypy_baseline.txt is missing or empty"
    for error in baseline:
        path = error.split(": ", 1)[0]
        assert path.startswith("analysis/") and (REPO / path).is_file(), error
