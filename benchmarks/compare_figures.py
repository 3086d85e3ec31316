"""Did a change to the report keep its pictures? Compare two reports' PNG figures pixel by pixel.

    python benchmarks/compare_figures.py BEFORE_DIR AFTER_DIR     # two `python -m analysis.report ... --out` folders

Write the report of the same rows before and after the change, then compare. Per figure (matched by file
name): its size, the largest difference of one colour channel between the two decoded images (0-255) and how
many pixels differ at all; then whether report.md (apart from the --out folder it names), claims.csv and
exponents.csv are the same bytes. A PNG's bytes may differ (compression, metadata) where its pixels do not.
Exit status 0 when every figure's pixels match and both reports hold the same figures, 1 otherwise.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
from PIL import Image


def pixels(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGBA"), dtype=np.int16)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path, help="a report folder (holding report.md and figures/)")
    parser.add_argument("after", type=Path, help="the report of the same rows after the change")
    args = parser.parse_args(argv)
    names = [{p.name for p in (folder / "figures").glob("*.png")} for folder in (args.before, args.after)]
    same = names[0] == names[1]
    if not same:
        print(f"figures in only one report: {sorted(names[0] ^ names[1])}")
    for name in sorted(names[0] & names[1]):
        a, b = (pixels(folder / "figures" / name) for folder in (args.before, args.after))
        if a.shape != b.shape:
            print(f"{name}: size {a.shape[1]}x{a.shape[0]} vs {b.shape[1]}x{b.shape[0]}")
            same = False
            continue
        diff = np.abs(a - b)
        print(f"{name}: {a.shape[1]}x{a.shape[0]}, max difference {diff.max()}/255, "
              f"{int((diff.max(axis=-1) > 0).sum())} pixels differ")
        same = same and not diff.any()

    def report_text(folder: Path) -> str:
        return re.sub(r"--out \S+", "--out DIR", (folder / "report.md").read_text())

    print(f"report.md the same (apart from --out): {report_text(args.before) == report_text(args.after)}")
    for table in ("claims.csv", "exponents.csv"):
        paths = [folder / table for folder in (args.before, args.after)]
        if all(p.exists() for p in paths):
            print(f"{table} the same bytes: {paths[0].read_bytes() == paths[1].read_bytes()}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
