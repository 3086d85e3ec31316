"""One measured duration of the default sweep: README.md and docs/usage.md give the same figures, quiet and busy,
and the quiet one is the measurement docs/performance.md records (target 6)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUIET = re.compile(r"219 points: (\d+) s \((\d+\.\d) minutes\) with its report on 2 quiet CPU cores \((\d{4}-\d\d-\d\d)\)")
BUSY = re.compile(r"(\d+\.\d) minutes on the same 2 cores shared with other work \(load (\d+-\d+), (\d{4}-\d\d-\d\d)\)")


def figures(page: str) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    flat = " ".join(page.split())  # a figure may be wrapped across lines
    return QUIET.findall(flat), BUSY.findall(flat)


def test_readme_and_usage_give_the_same_measured_duration_of_the_default_sweep():
    readme = figures((ROOT / "README.md").read_text(encoding="utf-8"))
    usage = figures((ROOT / "docs" / "usage.md").read_text(encoding="utf-8"))
    assert len(readme[0]) == len(readme[1]) == 1, readme  # one figure each, not two that drift apart
    assert readme == usage, (readme, usage)
    (seconds, minutes, day), = readme[0]
    assert f"{int(seconds) / 60:.1f}" == minutes  # the two spellings of one measurement agree
    # the quiet figure is the one docs/performance.md's target 6 measured, on that day
    target = next(line for line in (ROOT / "docs" / "performance.md").read_text(encoding="utf-8").splitlines()
                  if line.startswith("| 6 | `python -m runners.sweep` with its report |"))
    assert f"| {seconds} s (219 points) |" in target and day in target, target
