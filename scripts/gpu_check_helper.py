"""Small steps of scripts/gpu_check.sh that are easier in Python than in bash.

    python scripts/gpu_check_helper.py merge OUT.csv SWEEP_DIR...   one CSV from several sweeps
    python scripts/gpu_check_helper.py summary OUT.csv              rows per sweep and status

Only the standard library: it must run before (or without) the project's dependencies.
"""

from __future__ import annotations

import csv
import sys
from collections import Counter
from pathlib import Path


def merge(out_csv: Path, sweep_dirs: list[Path]) -> int:
    """Concatenate each sweep's results.csv into out_csv (union of columns, first-seen order)."""
    columns: list[str] = []
    rows: list[dict[str, str]] = []
    for sweep_dir in sweep_dirs:
        path = sweep_dir / "results.csv" if sweep_dir.is_dir() else sweep_dir
        if not path.is_file():
            print(f"merge: {path}: missing (that sweep wrote no row)", file=sys.stderr)
            continue
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            columns.extend(c for c in reader.fieldnames or [] if c not in columns)
            rows.extend(reader)
    if not rows:
        print(f"merge: no rows in {', '.join(map(str, sweep_dirs))}", file=sys.stderr)
        return 1
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    with open(out_csv, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
    print(f"merge: {len(rows)} rows -> {out_csv}")
    return 0


def summary(csv_path: Path) -> int:
    """One line per sweep (statuses), then one per back end/kernel/precision with ok counts."""
    if not csv_path.is_file():
        print(f"results: {csv_path} missing")
        return 1
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    device_names = sorted({r.get("device_name", "") for r in rows} - {""})
    print(f"results: {len(rows)} rows on {', '.join(device_names) or 'an unknown device'}")
    by_sweep: dict[str, Counter] = {}
    for row in rows:
        by_sweep.setdefault(row.get("sweep_id") or "?", Counter())[row.get("status") or "?"] += 1
    for sweep, counts in by_sweep.items():
        print(f"  {sweep}: " + ", ".join(f"{n} {s}" for s, n in counts.most_common()))
    by_variant: dict[tuple[str, str, str], Counter] = {}
    for row in rows:
        key = (row.get("backend", ""), row.get("kernel", "") or "-", row.get("precision", ""))
        by_variant.setdefault(key, Counter())[row.get("status") or "?"] += 1
    print("  back end / kernel / precision: ok of rows (other statuses)")
    for (backend, kernel, precision), counts in sorted(by_variant.items()):
        others = ", ".join(f"{n} {s}" for s, n in counts.most_common() if s != "ok")
        print(f"    {backend:8s} {kernel:14s} {precision:5s} {counts['ok']}/{sum(counts.values())}"
              + (f" ({others})" if others else ""))
    return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "merge":
        return merge(Path(argv[1]), [Path(p) for p in argv[2:]])
    if len(argv) == 2 and argv[0] == "summary":
        return summary(Path(argv[1]))
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
