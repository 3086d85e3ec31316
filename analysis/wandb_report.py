"""A written report to wandb: one run (job_type `report`) in the sweep's group, read from the report's files.

It reads only what the report wrote (report.md, its figures, claims.csv, exponents.csv) and the results CSVs
it was made from, never the report's internals, so it works the same after a sweep (runners/callbacks.py)
and after `python -m analysis.report A.csv B.csv --out DIR --wandb`. The run holds:

- every figure report.md embeds, as a `wandb.Image` under `figures/<file stem>` (`figures/fig1_time_vs_seq_len`):
  the links of report.md, not the folder's listing, so a figure left from an earlier report is not sent;
- `claims` (claim, statement, verdict, evidence, rule, study), `exponents` and `results` as `wandb.Table`s
  (`results` only up to wandb's row limit for a logged table, 10,000: above it the summary says so);
- summary `claims/<key>`: holds, does not hold, not decided or not measured, comparable across runs;
- config: the sweep(s), the devices and hosts the rows come from, the input files;
- an artifact of type `sweep-results`: the results CSV(s), report.md, claims.csv, exponents.csv, the figures.

wandb is imported inside `log_report` only. Whatever wandb does (missing, failing, slow), the report's
files are already written and are not touched: a failure is one warning line on stderr.
"""

from __future__ import annotations

import csv
import hashlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

JOB_TYPE = "report"
ARTIFACT_TYPE = "sweep-results"
CLAIM_COLUMNS = ("claim", "statement", "verdict", "evidence", "rule", "study")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif")  # what wandb.Image reads; a PDF or SVG goes only to the artifact
MODES = ("offline", "online")

# No system-metrics sampler, no git or code capture, no console capture: a report run holds files, and
# on a small machine a sampler would steal CPU from the sweep's next timed calls. runners/wandb_log.py uses it too.
SETTINGS = {"silent": True, "console": "off", "x_disable_stats": True, "disable_git": True, "save_code": False}

_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")  # ![alt](path) or [text](path) in report.md
_GROUP_MAX = 120  # wandb's group names stay short in its UI; a longer merged name ends in a hash


@dataclass
class ReportFiles:
    """What one written report left on disk, found from report.md."""

    report_md: Path
    images: list[tuple[str, Path, str]] = field(default_factory=list)  # (wandb key, file, caption)
    linked: list[Path] = field(default_factory=list)  # every file report.md links to (figures in every format)
    tables: dict[str, Path] = field(default_factory=dict)  # "claims" / "exponents" -> its CSV, when written


def report_files(report_md: Path) -> ReportFiles:
    """The figures report.md embeds (in its order) and links, and the tables beside it."""
    report_md = Path(report_md)
    base = report_md.parent
    found = ReportFiles(report_md)
    seen: set[Path] = set()
    for bang, text, target in _LINK.findall(report_md.read_text()):
        path = (base / target).resolve() if not Path(target).is_absolute() else Path(target)
        if "://" in target or path in seen or not path.is_file():
            continue
        seen.add(path)
        found.linked.append(path)
        if bang and path.suffix.lower() in IMAGE_SUFFIXES:
            found.images.append((f"figures/{path.stem}", path, text))
    for name in ("claims", "exponents"):
        if (base / f"{name}.csv").is_file():
            found.tables[name] = base / f"{name}.csv"
    return found


def verdict_word(verdict: str) -> str:
    """A claim's verdict without its details: holds, does not hold, not decided or not measured."""
    from analysis.claim import FAILS, HOLDS, NOT_DECIDED, NOT_DECIDED_BUSY, NOT_MEASURED

    for word, short in ((HOLDS, HOLDS), (FAILS, FAILS), (NOT_DECIDED, "not decided"), (NOT_DECIDED_BUSY, "not decided"),
                        (NOT_MEASURED, NOT_MEASURED)):
        if verdict == word or verdict.startswith(word + " ") or verdict.startswith(word + ":"):
            return short
    return verdict


def read_claims(path: Path) -> list[dict[str, str]]:
    """claims.csv's rows under the wandb table's names: key -> claim, claim -> statement."""
    with open(path, newline="") as f:
        return [{"claim": r.get("key", ""), "statement": r.get("claim", ""), "verdict": r.get("verdict", ""),
                 "evidence": r.get("evidence", ""), "rule": r.get("rule", ""), "study": r.get("study", "")}
                for r in csv.DictReader(f)]


def describe_inputs(results: Sequence[Path]) -> dict[str, list[str]]:
    """The sweeps, devices and hosts the results CSVs hold (sorted, each once): the run's config."""
    found: dict[str, set[str]] = {"sweeps": set(), "devices": set(), "hosts": set()}
    columns = {"sweeps": ("sweep_id",), "devices": ("device_name", "device"), "hosts": ("hostname",)}
    for path in results:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                for key, names in columns.items():
                    value = next((row[n] for n in names if row.get(n)), "")
                    if value:
                        found[key].add(value)
    return {key: sorted(values) for key, values in found.items()}


def group_for(sweeps: Sequence[str]) -> str:
    """The wandb group of a report: its one sweep's id (the points runs' group), else the ids joined ("": none)."""
    name = "+".join(sorted(set(sweeps)))
    if len(name) > _GROUP_MAX:
        name = name[:_GROUP_MAX - 9] + "-" + hashlib.sha1(name.encode()).hexdigest()[:8]
    return name


def artifact_name(group: str) -> str:
    """An artifact name wandb accepts (letters, digits, '-', '_', '.'), from the group."""
    return "sweep-results-" + re.sub(r"[^A-Za-z0-9._-]+", "-", group).strip("-")


def log_report(report_md: str | Path, results: Sequence[str | Path], *, mode: str = "offline",
               project: str | None = "selfattn-bench", entity: str | None = None, group: str | None = None,
               run_dir: str | Path | None = None, config: Mapping[str, Any] | None = None) -> Path | None:
    """One wandb run of `group` holding the written report; returns the run's folder, None when wandb failed.

    `results`: the CSV files the report was made from. `group`: None takes the rows' sweep id(s).
    `run_dir`: where wandb writes its run folder (wandb/offline-run-*); None: beside report.md."""
    report_md, results = Path(report_md), [Path(p) for p in results]
    try:
        files = report_files(report_md)
        inputs = describe_inputs(results)
    except (OSError, ValueError) as exc:
        return _warn(f"the report's files could not be read: {exc}")
    group = group or group_for(inputs["sweeps"]) or f"report/{report_md.parent.resolve().name}"
    try:
        import wandb
    except ImportError:
        return _warn("not installed")
    run_dir = Path(run_dir) if run_dir is not None else report_md.parent
    run = None
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        run_config = {**inputs, "inputs": [str(p) for p in results], "report": str(report_md), **(config or {})}
        kwargs = dict(project=project, entity=entity, mode=mode, group=group, job_type=JOB_TYPE,
                      name=f"{group}-report", dir=str(run_dir), config=run_config)
        try:
            run = wandb.init(settings=wandb.Settings(**SETTINGS), reinit="create_new", **kwargs)
        except (TypeError, ValueError):  # an older wandb without these settings or reinit modes
            run = wandb.init(reinit=True, **kwargs)
        payload, notes = _payload(wandb, files, results)
        run.log(payload)
        run.summary.update({**notes, **{f"claims/{key}": verdict for key, verdict in _verdicts(files).items()}})
        run.log_artifact(_artifact(wandb, group, files, results))
        folder = Path(run.dir).parent  # .../wandb/offline-run-<time>-<id>/files -> the run's folder
        run.finish()
        return folder
    except Exception as exc:  # wandb raises many kinds; none may cost the user the report
        if run is not None:
            try:
                run.finish(exit_code=1)
            except Exception:
                pass
        return _warn(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")


def _payload(wandb: Any, files: ReportFiles, results: Sequence[Path]) -> tuple[dict[str, Any], dict[str, str]]:
    """One history step (every figure and every table), and notes for the summary on what was left out."""
    import pandas as pd

    payload: dict[str, Any] = {key: wandb.Image(str(path), caption=caption) for key, path, caption in files.images}
    if "claims" in files.tables:
        claims = read_claims(files.tables["claims"])
        payload["claims"] = wandb.Table(columns=list(CLAIM_COLUMNS),
                                        data=[[c[k] for k in CLAIM_COLUMNS] for c in claims])
    if "exponents" in files.tables:
        exponents = pd.read_csv(files.tables["exponents"])
        payload["exponents"] = wandb.Table(dataframe=exponents, allow_mixed_types=True)
    notes: dict[str, str] = {}
    frames = [pd.read_csv(p, low_memory=False) for p in results]
    if frames:
        rows = pd.concat([f.assign(results_file=str(p)) if len(frames) > 1 else f for f, p in zip(frames, results)],
                         ignore_index=True)
        limit = int(getattr(wandb.Table, "MAX_ROWS", 10_000))
        if len(rows) <= limit:  # numbers stay numbers, for wandb's charts; JSON cells stay text
            payload["results"] = wandb.Table(dataframe=rows, allow_mixed_types=True)
        else:  # wandb would cut a logged table to its first `limit` rows: none rather than a silent part
            notes["results_table"] = (f"not logged: {len(rows)} rows, over wandb's {limit}-row limit for a logged "
                                      "table; results.csv is in the sweep-results artifact")
    return payload, notes


def _verdicts(files: ReportFiles) -> dict[str, str]:
    if "claims" not in files.tables:
        return {}
    return {c["claim"]: verdict_word(c["verdict"]) for c in read_claims(files.tables["claims"]) if c["claim"]}


def _artifact(wandb: Any, group: str, files: ReportFiles, results: Sequence[Path]) -> Any:
    """results.csv (or each input as results/<n>_<folder>.csv), report.md, the tables and the linked figures."""
    artifact = wandb.Artifact(artifact_name(group), type=ARTIFACT_TYPE,
                              description=f"results, report.md and figures of {group}")
    if len(results) == 1:
        artifact.add_file(str(results[0]), name="results.csv")
    else:
        for index, path in enumerate(results):
            artifact.add_file(str(path), name=f"results/{index}_{path.parent.name or 'results'}.csv")
    artifact.add_file(str(files.report_md), name="report.md")
    for path in files.tables.values():
        artifact.add_file(str(path), name=path.name)
    base = files.report_md.parent.resolve()
    for path in files.linked:
        try:
            name = path.relative_to(base).as_posix()
        except ValueError:  # a link outside the report's folder keeps its file name only
            name = f"figures/{path.name}"
        artifact.add_file(str(path), name=name)
    return artifact


def _warn(why: str) -> None:
    print(f"warning: wandb: no report run ({why}); report.md and results.csv are complete regardless",
          file=sys.stderr, flush=True)
    return None


# --- `python -m analysis.report ... --wandb`: the flags and the call after the report is written ---------------

def add_arguments(parser: Any) -> None:
    """The report command's wandb flags (argparse)."""
    parser.add_argument("--wandb", action="store_true",
                        help="also log the report to wandb as one run (job_type report): its figures, claims, "
                             "exponents and an artifact of the files")
    parser.add_argument("--wandb-mode", default="offline", choices=MODES,
                        help="with --wandb: offline (the default: `wandb sync` sends it later) or online")
    parser.add_argument("--wandb-project", default="selfattn-bench", metavar="NAME",
                        help="wandb project (with --wandb)")
    parser.add_argument("--wandb-entity", default=None, metavar="NAME",
                        help="wandb entity, user or team (with --wandb)")
    parser.add_argument("--wandb-group", default=None, metavar="NAME",
                        help="wandb group (with --wandb); default: the rows' sweep id, several joined by '+'")


def log_from_cli(args: Any, report_md: Path, paths: Sequence[str | Path]) -> Path | None:
    """After the command wrote report_md from `paths` (CSV files or folders): its run, if --wandb asked for one."""
    if not getattr(args, "wandb", None):
        return None
    from analysis.load import find_csvs

    results = list(dict.fromkeys(csv_path for p in paths for csv_path in find_csvs(Path(p))))
    folder = log_report(report_md, results, mode=args.wandb_mode, project=args.wandb_project,
                        entity=args.wandb_entity, group=args.wandb_group)
    if folder is not None:
        print(f"wandb: report run ({args.wandb_mode}) -> {folder}"
              + (f"; `wandb sync {folder}` sends it" if args.wandb_mode == "offline" else ""))
    return folder
