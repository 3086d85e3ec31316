"""Hydra callback: what happens once per multirun, before the first job and after the last.

Start: count the jobs (for `[i/N]` and the ETA), note how many jobs share the device, warn
when a parallel launcher makes timings interfere, make the sweep's point index (jobs look
their point up there). End: build results.csv from every row file (jobs of a large sweep
do not), print the summary table (runners/table.py), write the report from it, then send the whole table
and the report to wandb (last, so wandb never delays or changes a file), say where everything is, and exit 1
when no point of the sweep could be measured.
Runs in the launching process only; jobs (maybe in other processes) read sweep.json (`sweep_meta`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from runners import interrupts, progress, row_store, rows
from runners.table import table_text
from runners.wandb_log import SINK
from selfattn.results import COLUMNS


def count_jobs(config: DictConfig) -> int | None:
    """How many jobs the basic sweeper will launch: its own product of params and overrides."""
    if "BasicSweeper" not in str(config.hydra.sweeper.get("_target_", "")):
        return None  # another sweeper (optuna, ...) decides as it goes
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = config.hydra.sweeper.get("params") or {}
    arguments = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task)
    overrides = OverridesParser.create().parse_overrides(arguments)
    return sum(len(batch) for batch in BasicSweeper.split_arguments(overrides, None))


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
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    BasicSweeper.validate_batch_is_legal = lambda self, batch: None  # type: ignore[method-assign]


class SweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not config.get("prevalidate", False):
            skip_prevalidation()
        sweep_dir = Path(str(config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        total = count_jobs(config)
        sharing = jobs_sharing_device(config.hydra.launcher, total)
        meta = {"total": total, "started_unix": time.time(), "jobs_sharing_device": sharing}
        row_store.atomic_write_text(sweep_dir / rows.SWEEP_META, json.dumps(meta))
        rows.ensure_index(sweep_dir)  # once here: a resumed folder's rows are read once, not by every job
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
            return
        try:
            csv_path, all_rows = rows.rebuild_csv(sweep_dir)  # type: ignore[misc]  (waits: always builds)
        except OSError as exc:  # a full disk: the row files are intact, the CSV is built from them later
            print(f"results: {row_store.write_failure(exc)}; the row files are intact: "
                  f"`python -m runners.rows {sweep_dir}` builds it once there is room", file=sys.stderr, flush=True)
            return
        columns = list(dict.fromkeys([*COLUMNS, *(k for r in all_rows for k in r)]))
        wandb_conf = OmegaConf.to_container(config.wandb, resolve=True) if "wandb" in config else {}
        group = sweep_id(config, sweep_dir)
        if note := progress.SKIPPED.line(interrupts.STATE.total):  # a resumed sweep with nothing left to measure
            print(note, flush=True)
        if table := table_text(csv_path):
            print(f"\n{table}\n", flush=True)
        counts = Counter(str(r.get("status")) for r in all_rows)
        statuses = ", ".join(f"{n} {s}" for s, n in counts.most_common())
        print(f"results: {len(all_rows)} rows ({statuses}) -> {csv_path}", flush=True)
        report_md = write_report(csv_path, sweep_dir / "report") if config.get("report", True) else None
        # wandb after every file is written: whatever it does, results.csv and report.md are final.
        SINK.log_table(wandb_conf, all_rows, columns, group=group, out_dir=sweep_dir, own_run=report_md is None)
        if report_md is not None and (run := SINK.log_report(wandb_conf, report_md, [csv_path], group=group,
                                                             out_dir=sweep_dir)):
            print(f"wandb: group {group}, report run -> {run}", flush=True)
        if why := nothing_measured(all_rows):
            print(f"error: {why}", file=sys.stderr, flush=True)
            sys.exit(1)


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


def write_report(csv_path: Path, out_dir: Path) -> Path | None:
    """The analysis report of results.csv (just built from the rows), in-process; returns report.md.

    The report's own function, not its command line: a missing package, no usable row or a
    failure is one line, not a crash. PNG, as `python -m analysis.report` writes by default
    (its `--pdf` adds PDF copies for a paper).
    """
    try:
        from analysis import report
        from analysis.load import NoUsableResults
    except ImportError as exc:
        print(f"note: no report ({exc}); results.csv is complete", file=sys.stderr)
        return None
    try:
        written = report.write_report([csv_path], out_dir, formats=("png",))
    except NoUsableResults as exc:
        print(f"warning: no report ({exc}); results.csv is complete", file=sys.stderr)
        return None
    except Exception as exc:  # a plotting bug must not hide the results
        print(f"warning: report failed ({type(exc).__name__}: {exc}); results.csv is complete", file=sys.stderr)
        return None
    lines, none_drawn = report.figure_summary(written)
    print("\n".join(lines))
    if none_drawn:
        print("warning: the report drew none of the figures its rows call for (see above); results.csv is complete",
              file=sys.stderr)
    return written.path
