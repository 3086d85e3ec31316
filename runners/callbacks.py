"""Hydra callback: what happens once per multirun, before the first job and after the last.

Start: count the jobs (for `[i/N]` and the ETA), note how many jobs share the device, warn
when a parallel launcher makes timings interfere, take the folder (its name and path checked, its lock
taken: runners/folder_lock.py; room set aside for the last results.csv), make the sweep's point index (jobs
look their point up there); a problem there is one line, exit 2, before any point. End: build results.csv
from every row file (jobs of a large sweep do not; in the room set aside if the disk filled), print the summary
table (runners/table.py), write the report from it (in a process of its own with a time limit:
runners/report_process.py), then send the whole table and the report to wandb (last,
so wandb never delays or changes a file), say where everything is, and exit 1 when a point failed, a point of
this sweep has no row (runners/ledger.py), or no point could be measured (docs/usage.md's exit statuses).
Runs in the launching process only; jobs (maybe in other processes) read sweep.json (`sweep_meta`).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, cast

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from runners import folder_lock, hydra_private, interrupts, ledger, paths, progress, report_process, row_store, rows
from runners.table import table_text
from runners.wandb_log import SINK
from selfattn.results import COLUMNS, FAILURE_STATUSES


def count_jobs(config: DictConfig) -> int | None:
    """How many jobs the basic sweeper will launch: its own product of params and overrides."""
    if "BasicSweeper" not in str(config.hydra.sweeper.get("_target_", "")):
        return None  # another sweeper (optuna, ...) decides as it goes
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = config.hydra.sweeper.get("params") or {}
    arguments = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task)
    overrides = OverridesParser.create().parse_overrides(arguments)
    batches = hydra_private.split_sweep(overrides)  # Hydra's private product (runners/hydra_private.py)
    return None if batches is None else sum(len(batch) for batch in batches)


def jobs_sharing_device(launcher: Any, total: int | None) -> int:
    """Jobs that run at once on this machine's device under the configured launcher.

    basic: 1 (one after another). joblib: n_jobs (-1 = every CPU). submitit_local: the array
    parallelism. SLURM: 1, each job gets its own GPU (gpus_per_node=1 in our presets).
    """
    target = str(launcher.get("_target_", "")) if launcher is not None else ""
    if "Joblib" in target:
        n = int(launcher.get("n_jobs", -1) or -1)
        n = (os.cpu_count() or 1) if n < 0 else n
    elif "LocalLauncher" in target:
        n = int(launcher.get("array_parallelism", 256) or 1)
    else:
        n = 1
    return max(1, min(n, total)) if total else max(1, n)


def sweep_meta(sweep_dir: Path) -> dict[str, Any]:
    """What the sweep's start wrote to sweep.json: total, started_unix, jobs_sharing_device ({} if none)."""
    try:
        return json.loads((Path(sweep_dir) / rows.SWEEP_META).read_text())
    except (OSError, ValueError):
        return {}


def sweep_id(config: Any, sweep_dir: Path) -> str:
    """The sweep's name in rows and wandb (its group): <name>/<folder>."""
    return f"{config.get('name', 'sweep')}/{Path(sweep_dir).name}"


def skip_prevalidation() -> None:
    """Stop the basic sweeper from composing every job's config up front, before the first job.

    Hydra composes each job's config twice: once to validate the whole batch, once to run
    it; at ~0.2 s a composition that is a third of the runner's cost per point on a small
    CPU. Our jobs turn bad values into rows anyway, and the command line's keys and group options
    were checked before Hydra started (runners/cli_check.py). `prevalidate=true` restores the pass.
    """
    hydra_private.skip_batch_validation()  # a Hydra other than 1.3: the pass stays (runners/hydra_private.py)


class SweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not config.get("prevalidate", False):
            skip_prevalidation()
        sweep_dir = Path(str(config.hydra.sweep.dir))
        total = count_jobs(config)
        sharing = jobs_sharing_device(config.hydra.launcher, total)
        take_folder(config, sweep_dir, total, sharing)  # or one line and exit 2, before any point
        ledger.LEDGER = ledger.Ledger()  # this multirun's points from here on
        interrupts.sweep_started(sweep_dir, total)  # so Ctrl-C can say how far it got and how to resume
        print(f"sweep {sweep_id(config, sweep_dir)}: {total or '?'} jobs -> {sweep_dir}", flush=True)
        if "SlurmLauncher" in str(config.hydra.launcher.get("_target_", "")):
            from runners.slurm_status import follow_jobs_without_sacct

            if note := follow_jobs_without_sacct():  # a cluster without accounting storage: one line, not one per poll
                print(note, flush=True)
        if sharing > 1:
            print(f"warning: {sharing} jobs share the device at once: their timings interfere; trust "
                  "accuracy/stability columns, and see jobs_sharing_device in each row", file=sys.stderr)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        if not sweep_dir.exists():
            print(f"error: {sweep_dir} was removed while the sweep ran; no row is left", file=sys.stderr, flush=True)
            sys.exit(1)
        try:
            # the room set aside at the start (rows.reserve_room) is given up if the disk filled meanwhile
            csv_path, all_rows = rows.rebuild_final(sweep_dir)
        except OSError as exc:  # even that did not fit: the row files are intact, the CSV is built from them later
            print(f"error: results: {row_store.write_failure(exc)}; the row files are intact: "
                  f"`python -m runners.rows {sweep_dir}` builds it once there is room", file=sys.stderr, flush=True)
            sys.exit(1)
        for path, why in row_store.take_corrupt():  # left out of results.csv; its point has no row
            print(f"warning: {path} {why}; left out of results.csv", file=sys.stderr, flush=True)
        columns = list(dict.fromkeys([*COLUMNS, *(k for r in all_rows for k in r)]))
        # a DictConfig's container is a dict
        wandb_conf = cast(dict[str, Any], OmegaConf.to_container(config.wandb, resolve=True)) if "wandb" in config else {}
        group = sweep_id(config, sweep_dir)
        if note := progress.SKIPPED.line(interrupts.STATE.total):  # a resumed sweep with nothing left to measure
            print(note, flush=True)
        baseline = config.get("baseline")
        try:
            table = table_text(csv_path, baseline=baseline)
        except ValueError as exc:  # the back end named as the baseline has no row here: said, and no speed-ups
            print(f"warning: {exc}; the table and report.md show no speed-ups", file=sys.stderr, flush=True)
            baseline = "none"
            table = table_text(csv_path, baseline=baseline)
        if table:
            print(f"\n{table}\n", flush=True)
        counts = Counter(str(r.get("status")) for r in all_rows)
        statuses = ", ".join(f"{n} {s}" for s, n in counts.most_common())
        print(f"results: {len(all_rows)} rows ({statuses}) -> {csv_path}", flush=True)
        report_md = None
        if config.get("report", True):  # in its own process, within its limit (runners/report_process.py)
            limit_s = report_process.timeout_s(config.get("report_timeout_s"), len(all_rows))
            report_md = report_process.write_report(csv_path, sweep_dir / "report", limit_s=limit_s, baseline=baseline)
        # wandb after every file is written: whatever it does, results.csv and report.md are final.
        SINK.log_table(wandb_conf, all_rows, columns, group=group, out_dir=sweep_dir, own_run=report_md is None)
        if report_md is not None and (run := SINK.log_report(wandb_conf, report_md, [csv_path], group=group,
                                                             out_dir=sweep_dir)):
            print(f"wandb: group {group}, report run -> {run}", flush=True)
        # this sweep's points (a folder may hold other sweeps' rows); all rows when its jobs ran elsewhere (joblib, SLURM)
        points = ledger.LEDGER.points
        mine = [r for r in all_rows if str(r.get("point_id")) in points] if points else all_rows
        problems = [ledger.LEDGER.missing_line(str(r.get("point_id")) for r in all_rows), failed_points(mine),
                    nothing_measured(mine)]
        for why in filter(None, problems):
            print(f"error: {why}", file=sys.stderr, flush=True)
        if any(problems):  # the exit statuses of docs/usage.md: 1 when a script must look
            sys.exit(1)


# What a sweep writes at its folder's top: none may be a symbolic link (refused before any point)
FOLDER_FILES = ("multirun.yaml", rows.CSV_NAME, rows.STAMP_NAME, rows.SWEEP_META, rows.RESERVE_NAME,
                row_store.LOCK_NAME, row_store.INDEX_NAME)


def take_folder(config: DictConfig, sweep_dir: Path, total: int | None, sharing: int) -> None:
    """Before any point: check the name and the folder, take the folder's lock (runners/folder_lock.py), set
    aside room for the last results.csv, write sweep.json and the index. A problem is one line, exit 2."""
    problem = claim(config, sweep_dir, "hydra.sweep.dir")
    if not problem:
        try:
            for name in FOLDER_FILES:  # Hydra writes multirun.yaml through a link; the harness writes through none
                row_store.refuse_link(sweep_dir / name)
            rows.reserve_room(sweep_dir, total)
            meta = {"total": total, "started_unix": time.time(), "jobs_sharing_device": sharing}
            row_store.atomic_write_text(sweep_dir / rows.SWEEP_META, json.dumps(meta))
            rows.ensure_index(sweep_dir)  # once here: a resumed folder's rows are read once, not by every job
        except OSError as exc:  # a read-only or full file system
            problem = f"hydra.sweep.dir: {row_store.write_failure(exc)}; nothing was measured"
    if problem:
        print(f"error: {problem}", file=sys.stderr, flush=True)
        sys.exit(2)


def claim(config: Any, folder: Path, key: str, shared: bool = False) -> str:
    """'' once the name and the folder pass runners/paths.py's rules and the folder's lock is held (shared:
    a single run's), else the one-line problem."""
    problem = paths.name_problem(config.get("name", "sweep")) or paths.folder_problem(key, folder)
    if problem:
        return problem
    try:
        if note := folder_lock.own(folder, shlex.join(["python", "-m", "runners.sweep", *sys.argv[1:]]),
                                   shared=shared, key=key):
            print(note, file=sys.stderr, flush=True)
    except folder_lock.FolderBusy as exc:
        return str(exc)
    except OSError as exc:  # a read-only or full file system, a file in the way
        return f"{key}: {row_store.write_failure(exc)}; nothing was measured"
    return ""


def failed_points(all_rows: list[dict[str, Any]]) -> str:
    """'' when no row failed (selfattn.results.FAILURE_STATUSES), else one line: how many, of which status."""
    failed = Counter(str(r.get("status")) for r in all_rows if r.get("status") in FAILURE_STATUSES)
    if not failed:
        return ""
    n = sum(failed.values())
    statuses = ", ".join(f"{k} {s}" for s, k in failed.most_common())
    return f"{n} point{'s' if n > 1 else ''} failed ({statuses}): their `error` column says why"


def nothing_measured(all_rows: list[dict[str, Any]]) -> str:
    """'' when some point of the sweep was measured (an ok row), else one line saying why none was."""
    if any(r.get("status") == "ok" for r in all_rows):
        return ""
    if not all_rows:
        return "the sweep wrote no row"
    errors = Counter(str(r.get("error") or r.get("status")) for r in all_rows)
    (first, n), others = errors.most_common(1)[0], len(errors) - 1
    return (f"no point of the sweep could be measured ({len(all_rows)} rows, none ok): "
            f"{first}" + (f" ({n} rows)" if n > 1 else "")
            + (f", and {others} other reason{'s' if others > 1 else ''}" if others else ""))
