"""A local sweep's resident memory against its number of points: flat, not a little more per point.

    python benchmarks/sweep_memory.py                   # 10,000 points (about 15 min on a quiet 2-core machine)
    python benchmarks/sweep_memory.py --points 2000     # shorter

One multirun of that many tiny points (`seed=range(N)`: one plain key, the compose_once launcher's cheap
path) with the fake measure of tests/runners/fake_measure.py (nothing timed: what grows is the harness's
bookkeeping, Hydra's composed configs and the launcher's list of job returns, not a back end's), in one
process, as `python -m runners.sweep` runs it. The sweep's VmRSS is read from /proc while its progress
lines count the points. Target: the RSS after all points within 1.2x of the RSS after the first thousand.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, Check, print_checks, print_header

FAKE = REPO / "tests" / "runners" / "fake_measure.py"
TARGET_RATIO = 1.2


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=500, help="print the RSS every this many points")
    args = parser.parse_args()
    print_header("sweep_memory")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, str(FAKE), "-m", f"seed=range(0,{args.points})", "seq_len=64", "head_dim=16",
               "heads=1", "report=false", "wandb.mode=disabled", f"hydra.sweep.dir={tmp}/sweep"]
        started = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        at: dict[int, float] = {}
        assert proc.stdout is not None
        for line in proc.stdout:
            match = re.match(r"\[(\d+)/\d+\]", line)
            if not match:
                continue
            done = int(match.group(1))
            if done % args.every == 0 or done == args.points:
                rss = rss_mib(proc.pid)
                if rss is not None:
                    at[done] = rss
                    print(f"{done:>7} points  {rss:7.1f} MiB  ({time.monotonic() - started:.0f} s)", flush=True)
        proc.wait()
    if proc.returncode != 0 or not at:
        print(f"the sweep ended with {proc.returncode}", file=sys.stderr)
        return 1
    first = at.get(min(1000, args.points)) or at[min(at)]
    last = at[max(at)]
    ratio = last / first
    print(f"RSS after {max(at)} points / after {min(1000, args.points)}: {last:.1f} / {first:.1f} MiB = {ratio:.3f}; "
          f"{(last - first) / max(1, max(at) - min(1000, args.points)) * 1024:.2f} KiB per point after the first thousand")
    print_checks([Check("56", f"RSS after {max(at)} points / after the first thousand", ratio, TARGET_RATIO)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
