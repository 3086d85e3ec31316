"""Small steps of scripts/gpu_check.sh that are easier in Python than in bash.

    python scripts/gpu_check_helper.py merge OUT.csv SWEEP_DIR...   one CSV from several sweeps
    python scripts/gpu_check_helper.py summary OUT.csv              rows per sweep and status
    python scripts/gpu_check_helper.py fit OUT_DIR                  OUT_DIR as the device tool brings it back

Only the standard library: it must run before (or without) the project's dependencies.
"""

from __future__ import annotations

import csv
import io
import shutil
import sys
import tarfile
from collections import Counter
from pathlib import Path

# What the device tool brings back from its output folder: at most MAX_FILES files of at most
# MAX_FILE_BYTES each (and no folder deeper than 2). `fit` makes OUT_DIR so; it keeps no folder.
MAX_FILES = 8
MAX_FILE_BYTES = 16 * 2**20
# Which files go first when there are too many: the tables and the report matter most.
KEEP_FIRST = ("results.csv", "summary.txt", "report.md", "report.tar.gz", "env.txt", "pytest.log", "sweep.log")


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


def _cut(path: Path, limit: int) -> None:
    """Keep a text file's head and tail (the tail holds the outcome) within `limit` bytes."""
    data = path.read_bytes()
    marker = f"\n[... {len(data) - limit + 200} bytes cut by gpu_check_helper.py fit ...]\n".encode()
    head = limit // 8
    tail = limit - head - len(marker) - 200
    path.write_bytes(data[:head] + marker + data[-tail:])


def _shrink_archive(path: Path, limit: int) -> list[str]:
    """Rebuild a .tar.gz without its largest files until it fits; returns the names left out."""
    with tarfile.open(path) as archive:
        members = [m for m in archive.getmembers() if m.isfile()]
        blobs = {m.name: archive.extractfile(m).read() for m in members}  # type: ignore[union-attr]
    dropped: list[str] = []
    kept = sorted(members, key=lambda m: m.size)
    while kept:
        with tarfile.open(path, "w:gz") as archive:
            for member in kept:
                archive.addfile(member, fileobj=io.BytesIO(blobs[member.name]))
        if path.stat().st_size <= limit:
            break
        dropped.append(kept.pop().name)  # the largest first
    return dropped


def fit(out_dir: Path, max_files: int = MAX_FILES, max_bytes: int = MAX_FILE_BYTES) -> int:
    """Make out_dir hold at most `max_files` plain files of at most `max_bytes`, no folder."""
    if not out_dir.is_dir():
        print(f"fit: {out_dir}: not a folder", file=sys.stderr)
        return 1
    for folder in [p for p in out_dir.iterdir() if p.is_dir()]:
        shutil.rmtree(folder)
        print(f"fit: removed folder {folder.name}/ (pack it first: --pack archives the report)")
    for path in sorted(out_dir.iterdir()):
        if path.stat().st_size <= max_bytes:
            continue
        if path.name.endswith(".tar.gz"):
            dropped = _shrink_archive(path, max_bytes)
            print(f"fit: {path.name}: left out {len(dropped)} of its largest files to stay under {max_bytes} bytes: "
                  + ", ".join(dropped))
        else:
            _cut(path, max_bytes)
            print(f"fit: {path.name}: cut to its head and tail ({max_bytes} bytes)")
    files = sorted(out_dir.iterdir(), key=lambda p: (KEEP_FIRST.index(p.name) if p.name in KEEP_FIRST else 99, p.name))
    for extra in files[max_files:]:
        extra.unlink()
        print(f"fit: removed {extra.name}: more than {max_files} files")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "merge":
        return merge(Path(argv[1]), [Path(p) for p in argv[2:]])
    if len(argv) == 2 and argv[0] == "summary":
        return summary(Path(argv[1]))
    if len(argv) == 2 and argv[0] == "fit":
        return fit(Path(argv[1]))
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
