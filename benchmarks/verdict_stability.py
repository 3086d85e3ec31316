"""Do the default sweep's verdicts survive a second run, and a busy machine? Target: 0 flips, all decided.

    python benchmarks/verdict_stability.py --quiet 3 --loaded 2 --out runs/   # 5 default runs, then the table
    python benchmarks/verdict_stability.py --analyze runs/*/                    # re-judge runs already made
    python benchmarks/verdict_stability.py --experiment variants --quiet 2 --loaded 1 --out runs-v/

`--experiment NAME` (repeatable) runs `python -m runners.sweep experiment=NAME` in each run folder instead of
the default command (each named experiment in turn), for the claims of studies the default run does not
measure (the variants study's window and soft-cap claims); the verdicts are judged from every sweep a run
folder holds.

Each run is the README's first command exactly (`python -m runners.sweep`, no arguments: the quick
study, wandb offline, the report), in a folder of its own under --out (its sweep lands in
<run>/sweeps/quick/<time>/). A loaded run has one CPU-bound process per core spinning beside it,
started before the sweep and stopped by PID after it (as a shared machine is busy). The verdicts
are then computed from each run's results.csv by this checkout's analysis (so a change of a rule
can be re-judged on the same rows with --analyze), and printed as one table: claim x run ->
verdict, with the count of claims whose verdict differs between runs and of verdicts that are not
decided. A verdict's category is compared ("not decided at these sizes (needs n >= 6144)" and
"... (needs n >= 8192)" are one category); the evidence may differ, the verdict may not.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

from _common import REPO, load_text, print_header

import pandas as pd  # noqa: E402


def _spin() -> None:  # a busy core: what another user's job looks like to the sweep
    while True:
        pass


def run_default_sweep(folder: Path, loaded: bool, experiments: list[str] | None = None) -> float:
    """The default command in `folder` (or `experiment=NAME` for each of `experiments`, in turn), with one busy
    process per core beside it when `loaded`; its wall s."""
    folder.mkdir(parents=True, exist_ok=False)  # a run's folder is never reused: nothing written is lost
    hogs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(os.cpu_count() or 1)] if loaded else []
    for hog in hogs:
        hog.start()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    commands = [[f"experiment={name}"] for name in experiments] if experiments else [[]]
    try:
        with open(folder / "sweep.log", "w") as log:
            for extra in commands:
                done = subprocess.run([sys.executable, "-m", "runners.sweep", *extra], cwd=folder, env=env,
                                      stdout=log, stderr=subprocess.STDOUT)
                if done.returncode:
                    break
    finally:
        for hog in hogs:  # stopped by their own PIDs, never by name
            hog.terminate()
            hog.join()
    wall_s = time.perf_counter() - start
    print(f"   {folder.name}: exit {done.returncode} after {wall_s / 60:.1f} min ({load_text()})", flush=True)
    return wall_s


def results_of(folder: Path) -> list[Path]:
    """The results.csv of a run folder (the newest sweep of each experiment it ran) or of a sweep folder given
    directly."""
    if (folder / "results.csv").is_file():
        return [folder / "results.csv"]
    newest: dict[str, Path] = {}
    for found in sorted(folder.glob("sweeps/*/*/results.csv")):  # sweeps/<experiment>/<time>/: the time sorts
        newest[found.parent.parent.name] = found
    if not newest:
        raise SystemExit(f"--analyze: no results.csv in {folder} (nor in its sweeps/*/*/)")
    return list(newest.values())


def category(verdict: str) -> str:
    """'not decided at these sizes (needs n >= 6144)' -> 'not decided at these sizes'."""
    return verdict.split(" (", 1)[0]


def verdict_table(folders: list[Path]) -> pd.DataFrame:
    """claim x run -> verdict, from each run's rows and this checkout's rules: every claim its rows have (the
    chapter's, and the studies the run measures too: attention against recurrence in the default run, the
    variants study's with --experiment variants)."""
    from analysis.claims import check_claims
    from analysis.load import load

    columns = {}
    names = [folder.name for folder in folders]
    for folder in folders:
        claims = check_claims(load(results_of(folder), warn=False).rows)
        # runs of two --out folders may share a name (quiet-1): then the column names its parent too
        name = folder.name if names.count(folder.name) == 1 else f"{folder.parent.name}/{folder.name}"
        columns[name] = {c.key: c.verdict for c in claims}
    return pd.DataFrame(columns)


def print_table(table: pd.DataFrame) -> tuple[int, int]:
    """The table as markdown, then (claims whose verdict category differs between runs, undecided verdicts)."""
    categories = table.map(lambda v: category(v) if isinstance(v, str) else "missing")
    flips = int((categories.nunique(axis=1) > 1).sum())
    undecided = int(categories.isin(["not decided at these sizes", "not measured", "missing"]).to_numpy().sum())
    shown = table.copy()
    shown.insert(0, "claim", [f"{i}. {key}" for i, key in enumerate(table.index, start=1)])
    shown["same in every run"] = ["yes" if n == 1 else "**no**" for n in categories.nunique(axis=1)]
    print(shown.to_markdown(index=False))
    print(f"\n{flips} of {len(table)} claims change verdict between the {table.shape[1]} runs; "
          f"{undecided} of {table.size} verdicts are not decided (or not measured)")
    return flips, undecided


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quiet", type=int, default=3, help="default runs on the machine as it is (default 3)")
    parser.add_argument("--loaded", type=int, default=2, help="default runs with one busy process per core (default 2)")
    parser.add_argument("--out", type=Path, help="a new folder for the runs (required unless --analyze)")
    parser.add_argument("--experiment", action="append", metavar="NAME",
                        help="run `experiment=NAME` instead of the default command (repeatable: each in turn)")
    parser.add_argument("--analyze", type=Path, nargs="+", metavar="RUN",
                        help="judge these run (or sweep) folders instead of running new ones")
    args = parser.parse_args(argv)
    print_header("verdict stability: a sweep's verdicts, run after run (the default sweep unless --experiment)")
    if args.analyze:
        folders = args.analyze
    else:
        if args.out is None:
            parser.error("--out: required unless --analyze (a new folder for the runs)")
        if args.out.exists() and any(args.out.iterdir()):
            parser.error(f"--out: {args.out} exists and is not empty; give a new folder (nothing is overwritten)")
        folders = [args.out / f"quiet-{i}" for i in range(1, args.quiet + 1)]
        folders += [args.out / f"loaded-{i}" for i in range(1, args.loaded + 1)]
        for folder in folders:
            run_default_sweep(folder, folder.name.startswith("loaded"), args.experiment)
    flips, undecided = print_table(verdict_table(folders))
    return 1 if flips else 0


if __name__ == "__main__":
    raise SystemExit(main())
