"""Experiments' comments quote how many points they sweep: the quoted counts are the composed grids' sizes.

Each `conf/experiment/*.yaml` says in its `# Duration:` comment how many points (or jobs) it runs on a
2-core CPU and on one H200, as "(N points" / "(N jobs" / "(the same N jobs". The numbers before "H200"
are the CPU grid's, those after it the GPU grid's (the `${by_device:CPU,CUDA}` values): a grid that
grows without its comment fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runners import config
from runners.callbacks import count_jobs

CONF = Path(__file__).resolve().parents[2] / "conf"
STUDIES = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml") if p.stem != "smoke")  # smoke: one point
QUOTED = re.compile(r"\((?:the same )?(\d+) (?:points|jobs)\b")
config.register_resolvers()


def quoted_counts(text: str) -> dict[str, list[int]]:
    """The counts a `# Duration:` comment quotes, for "cpu" (before "H200") and "cuda" (after it)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# Duration:"))
    block = []
    for line in lines[start:]:
        if not line.startswith("#"):
            break
        block.append(line.lstrip("# "))
    cpu, _, gpu = " ".join(block).partition("H200")
    return {"cpu": [int(n) for n in QUOTED.findall(cpu)], "cuda": [int(n) for n in QUOTED.findall(gpu)]}


def test_the_comment_parser_reads_both_devices_and_ignores_other_numbers():
    text = ("# @package _global_\n# Duration: 2-core CPU 160 s (30 points, 256..4096; the guard skipped 8 points\n"
            "# over max_point_s); one H200: not measured yet, expected ~5 min (48 points, 1K..128K).\nname: x\n")
    assert quoted_counts(text) == {"cpu": [30], "cuda": [48]}
    assert quoted_counts("# Duration: 2-core CPU 11 min (132 jobs); one H200: (the same 132 jobs)\n") == {
        "cpu": [132], "cuda": [132]}


@pytest.mark.parametrize("name", STUDIES)
def test_the_points_an_experiment_quotes_are_its_grids(composer, name):
    quoted = quoted_counts((CONF / "experiment" / f"{name}.yaml").read_text())
    assert quoted["cpu"], f"{name}.yaml: its Duration comment quotes no CPU count ('(N points')"
    for device in ("cpu", "cuda"):
        total = count_jobs(composer([f"experiment={name}", f"device={device}"]))
        assert all(n == total for n in quoted[device]), (
            f"{name}.yaml quotes {quoted[device]} points on {device}; its grid there has {total}")
