"""A local sweep's resident memory is flat in its number of points (issue 56's target: within 1.2x of its first
thousand's), through the real command line: benchmarks/sweep_memory.py runs `runners.sweep` (with the fake
measure) over 2,000 tiny points and reads its VmRSS. The 10,000-point figure is the script's own default run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sweep_memory.py"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_thousand_points_keep_the_rss_of_the_first_thousand():
    out = subprocess.run([sys.executable, str(SCRIPT), "--points", "2000", "--every", "1000"], capture_output=True,
                         text=True, timeout=880)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    ratio = float(re.search(r"after 1000: [\d.]+ / [\d.]+ MiB = ([\d.]+)", out.stdout).group(1))
    assert ratio <= 1.2, out.stdout
    assert re.search(r"^56\s+RSS after 2000 points.*<= 1\.2\S*\s+PASS", out.stdout, re.MULTILINE), out.stdout
