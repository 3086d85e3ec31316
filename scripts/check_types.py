"""`python3 scripts/check_types.py [--update]`: the types, as CI checks them (mypy, configured in pyproject.toml).

selfattn/ and runners/ must be clean. analysis/ is held to a baseline: analysis/mypy_baseline.txt lists the
errors it still has (file, message and code, without line numbers, so an edit above one does not move it),
and that list may only shrink:
- an error the baseline does not list fails the check (fix it; the baseline never grows);
- a listed error mypy no longer reports fails it too, until `--update` takes it off the list, so a fix is
  kept: the next change cannot bring the error back unseen.
`--update` rewrites the baseline only when nothing new appeared. Exit status 0 clean, 1 otherwise.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLEAN = ("selfattn", "runners")  # no error allowed
HELD = ("analysis",)  # errors allowed as the baseline lists them
BASELINE = REPO / "analysis" / "mypy_baseline.txt"
HEADER = ("# mypy errors analysis/ still has (scripts/check_types.py): file: message  [code], no line numbers.\n"
          "# This list may only shrink: fix an error, then `python3 scripts/check_types.py --update`.\n")
ERROR = re.compile(r"^(?P<path>[^:\s]+\.py):\d+(?::\d+)?: error: (?P<message>.*)$")


def errors_of(output: str) -> list[str]:
    """mypy's error lines as `path: message  [code]`, line numbers dropped; notes and the summary left out."""
    found = []
    for line in output.splitlines():
        match = ERROR.match(line.strip())
        if match:
            found.append(f"{Path(match['path']).as_posix()}: {match['message']}")
    return found


def read_baseline(path: Path = BASELINE) -> Counter[str]:
    """The baseline's errors (a multiset: one message may stand twice in a file), comments left out."""
    if not path.is_file():
        return Counter()
    return Counter(line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#"))


def compare(reported: list[str], baseline: Counter[str]) -> tuple[list[str], list[str], list[str]]:
    """(errors in selfattn/ or runners/, analysis/ errors the baseline lacks, baseline errors no longer reported)."""
    in_clean = [e for e in reported if e.split("/", 1)[0] in CLEAN]
    held = Counter(e for e in reported if e.split("/", 1)[0] in HELD)
    new = sorted((held - baseline).elements())
    gone = sorted((baseline - held).elements())
    return in_clean, new, gone


def run_mypy() -> str:
    """mypy over the three packages in one run (one cache), configured by pyproject.toml."""
    done = subprocess.run([sys.executable, "-m", "mypy", *CLEAN, *HELD], cwd=REPO, capture_output=True, text=True)
    if done.returncode not in (0, 1) or "error: " not in done.stdout and done.returncode:
        sys.exit(f"mypy did not run (exit {done.returncode}): {(done.stderr or done.stdout).strip()[:500]}")
    return done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="take fixed errors off the baseline (never adds one)")
    args = parser.parse_args(argv)
    reported = errors_of(run_mypy())
    baseline = read_baseline()
    in_clean, new, gone = compare(reported, baseline)
    for error in in_clean:
        print(f"types: {error}")
    for error in new:
        print(f"types: new in analysis/ (not in {BASELINE.relative_to(REPO)}): {error}")
    if args.update and not new:
        kept = sorted((baseline - Counter(gone)).elements())
        BASELINE.write_text(HEADER + "".join(f"{e}\n" for e in kept))
        print(f"types: {BASELINE.relative_to(REPO)}: {len(kept)} errors ({len(gone)} fixed ones taken off)")
        gone = []
    for error in gone:
        print(f"types: fixed, take it off the baseline (--update): {error}")
    held = sum(1 for e in reported if e.split("/", 1)[0] in HELD)
    print(f"types: {len(in_clean)} errors in {', '.join(p + '/' for p in CLEAN)} (must be 0); "
          f"{held} in analysis/, baseline {sum(baseline.values())}")
    return 1 if in_clean or new or gone else 0


if __name__ == "__main__":
    sys.exit(main())
