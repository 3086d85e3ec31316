"""wandb as the dashboard: the report run at a sweep's end and after `analysis.report --wandb`, read back from
the offline run's folder; a SLURM array's runs in one group; and wandb never in the way of the files."""

from __future__ import annotations

import csv
import functools
import json
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from analysis import report
from analysis.figures.cost import memory_vs_seq_len, time_vs_seq_len
from analysis.wandb_report import CLAIM_COLUMNS
from runner_helpers import ROOT, run_at_once
from runners import job, wandb_log
from runners.callbacks import SweepCallback, sweep_id
from wandb_offline import read_runs

WORDS = {"holds", "does not hold", "not decided", "not measured"}
POINT = {"name": "t", "backend": {"name": "naive"}, "precision": {"name": "fp32"}, "device": "cpu", "batch": 1,
         "heads": 2, "seq_len": 64, "q_len": None, "head_dim": 16, "d_model": None, "causal": False, "scale": "auto",
         "mode": "fwd", "scope": "core", "input_std": 1.0, "seed": 0, "budget": {"timing_s": 0.1},
         "retry_failed": False, "grids": None, "grid_point": None, "wandb": {"mode": "disabled"}}


@pytest.fixture
def wandb_home(tmp_path, monkeypatch):
    """wandb offline, its staging, cache and settings folders in this test's folder; a fresh sink."""
    for var, sub in (("WANDB_DATA_DIR", "data"), ("WANDB_CACHE_DIR", "cache"), ("WANDB_CONFIG_DIR", "config"),
                     ("WANDB_DIR", "wandb-dir")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.setenv("WANDB_MODE", "offline")
    wandb_log.SINK.close()  # the process's sink (jobs and the sweep's end share it), as a fresh process has it
    monkeypatch.setattr(wandb_log.SINK, "disabled", False)
    yield tmp_path
    wandb_log.SINK.close()


@pytest.fixture
def two_figures(monkeypatch):
    """The report's own function, drawing figures 1 and 2 only: the wandb side is under test, not the drawing."""
    monkeypatch.setattr(report, "write_report",
                        functools.partial(report.write_report, figures=(time_vs_seq_len, memory_vs_seq_len)))


def make_sweep(folder: Path, name: str = "t") -> Path:
    """Six measured points (fake measurement) in a sweep folder, as a multirun's jobs leave them."""
    for index, (backend, n) in enumerate((b, n) for b in ("naive", "sdpa") for n in (16, 32, 64)):
        ctx = job.JobContext(job_dir=folder / str(index), sweep_dir=folder, multirun=True, index=index,
                             sweep_id=f"{name}/{folder.name}")
        job.run_job({**POINT, "name": name, "backend": {"name": backend}, "seq_len": n}, ctx)
    return folder


def end_sweep(folder: Path, mode: str, name: str = "t") -> None:
    cfg = OmegaConf.create({"name": name, "report": True, "wandb": {"mode": mode, "project": "selfattn-test"},
                            "hydra": {"sweep": {"dir": str(folder)}}})
    SweepCallback().on_multirun_end(cfg)


def files_of(folder: Path) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in ("results.csv", "report/report.md")}


def media(run: dict, key: str) -> Path:
    """The file of an image or table the run logged under key (its path inside the run's files/)."""
    (step,) = [h for h in run["history"] if f"{key}/path" in h]
    path = run["folder"] / "files" / step[f"{key}/path"]
    assert step[f"{key}/path"] in run["files"] and path.is_file()
    return path


def test_a_sweep_end_leaves_one_report_run_with_every_figure_the_claims_and_the_artifact(
        wandb_home, fake_measure, two_figures, capsys):
    sweep = make_sweep(wandb_home / "sweep")
    end_sweep(sweep, "offline")
    runs = read_runs(sweep)
    (run,) = [r for r in runs if r["job_type"] == "report"]
    assert not [r for r in runs if r["job_type"] == "results"]  # the report run holds the table: no run for it alone
    assert run["group"] == "t/sweep" == sweep_id(OmegaConf.create({"name": "t"}), sweep)
    assert run["name"] == "t/sweep-report" and run["config"]["sweeps"] == ["t/sweep"]
    assert f"wandb: group t/sweep, report run -> {run['folder']}" in capsys.readouterr().out

    report_dir = sweep / "report"
    embedded = re.findall(r"!\[[^\]]*\]\((figures/[^)]+\.png)\)", (report_dir / "report.md").read_text())
    assert len(embedded) == 2
    for link in embedded:  # every embedded figure, as an image of the same bytes under a stable key
        key = f"figures/{Path(link).stem}"
        assert media(run, key).read_bytes() == (report_dir / link).read_bytes()
        assert any(h.get(f"{key}/_type") == "image-file" for h in run["history"])

    with open(report_dir / "claims.csv", newline="") as f:
        claims = list(csv.DictReader(f))
    table = json.loads(media(run, "claims").read_text())
    assert table["columns"] == list(CLAIM_COLUMNS)
    assert [row[0] for row in table["data"]] == [c["key"] for c in claims]
    assert [row[2] for row in table["data"]] == [c["verdict"] for c in claims]
    for claim in claims:  # the verdicts in the summary, one word each
        assert run["summary"][f"claims/{claim['key']}"] in WORDS
    assert len(json.loads(media(run, "results").read_text())["data"]) == 6
    assert media(run, "exponents").is_file()

    ((kind, contents),) = [v for v in run["artifacts"].values() if v[0] == "sweep-results"]
    assert set(contents) == {"results.csv", "report.md", "claims.csv", "exponents.csv", *embedded}
    sources = {"results.csv": sweep / "results.csv", **{n: report_dir / n for n in contents if n != "results.csv"}}
    for name, staged in contents.items():  # the staged copies that `wandb sync` uploads
        assert staged.read_bytes() == sources[name].read_bytes(), name


def test_the_points_run_and_the_report_run_share_the_sweeps_group(wandb_home, fake_measure, two_figures):
    sweep = wandb_home / "sweep"
    POINT["wandb"] = {"mode": "offline", "project": "selfattn-test"}
    try:
        make_sweep(sweep)
    finally:
        POINT["wandb"] = {"mode": "disabled"}
    end_sweep(sweep, "offline")
    runs = {r["job_type"]: r for r in read_runs(sweep)}
    assert set(runs) == {"sweep", "report"} and {r["group"] for r in runs.values()} == {"t/sweep"}
    points = runs["sweep"]
    assert points["name"] == "t/sweep-points-job0" and points["config"]["first_job"] == 0
    assert sorted((h["backend"], h["seq_len"]) for h in points["history"] if "time_ms" in h) == [
        (b, n) for b in ("naive", "sdpa") for n in (16, 32, 64)]
    assert any(h.get("results/nrows") == 6 for h in points["history"])  # the whole table, as before


def _break_init(monkeypatch, seen):
    import wandb

    def init(*args, **kwargs):  # what exists when wandb starts, then a failure
        seen.append({name: (sweep / name).read_bytes() for sweep in [Path(kwargs["dir"])]
                     for name in ("results.csv", "report/report.md")})
        raise RuntimeError("wandb-core did not start\nsecond line")
    monkeypatch.setattr(wandb, "init", init)


def _break_artifact(monkeypatch, seen):
    from wandb.sdk.wandb_run import Run

    def log_artifact(*args, **kwargs):  # after the figures and tables were logged
        raise ValueError("staging area full")
    monkeypatch.setattr(Run, "log_artifact", log_artifact)


def _no_wandb(monkeypatch, seen):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError


@pytest.mark.parametrize("breaks, warning", [
    (None, None),
    (_break_init, "no report run (RuntimeError: wandb-core did not start)"),
    (_break_artifact, "no report run (ValueError: staging area full)"),
    (_no_wandb, "no report run (not installed)"),
], ids=["offline-works", "init-fails", "fails-mid-run", "not-installed"])
def test_wandb_working_failing_or_missing_leaves_results_and_report_byte_identical(
        wandb_home, fake_measure, two_figures, monkeypatch, capsys, breaks, warning):
    sweep = make_sweep(wandb_home / "sweep")
    end_sweep(sweep, "disabled")
    reference = files_of(sweep)
    assert not (sweep / "wandb").exists()
    capsys.readouterr()
    seen: list[dict] = []
    if breaks is not None:
        breaks(monkeypatch, seen)
    end_sweep(sweep, "offline")
    err = capsys.readouterr().err
    assert files_of(sweep) == reference
    warnings = [line for line in err.splitlines() if "wandb" in line]
    if warning is None:
        assert warnings == [] and [r["job_type"] for r in read_runs(sweep)] == ["report"]
    else:
        assert warnings == [f"warning: wandb: {warning}; report.md and results.csv are complete regardless"]
    if breaks is _break_init:
        assert seen == [reference]  # wandb started after both files were final: a slow wandb delays nothing in them


DISABLED = """
import functools, sys
sys.path.insert(0, {tests!r})
from pathlib import Path
import pytest
monkeypatch = pytest.MonkeyPatch()
from runner_helpers import load_fake
load_fake().install()
from analysis import report
report.write_report = functools.partial(report.write_report, figures=())
import test_wandb_runs as t
sweep = Path({sweep!r})
t.POINT["wandb"] = {{"mode": {mode!r}}}
t.make_sweep(sweep)
t.end_sweep(sweep, {mode!r})
report.main([str(sweep / "results.csv"), "--out", str(sweep / "again"), "--formats", "png"])
print("wandb imported:", "wandb" in sys.modules)
"""


@pytest.fixture(scope="module")
def wandb_modes(tmp_path_factory):
    """The jobs, the sweep's end and the report command in a fresh process per wandb mode, both processes side
    by side: mode -> (the finished process, its folder)."""
    def run(mode: str, folder: Path) -> subprocess.CompletedProcess:
        code = DISABLED.format(tests=str(Path(__file__).parent), sweep=str(folder / "sweep"), mode=mode)
        env = {"WANDB_DATA_DIR": str(folder / "data"), "WANDB_CACHE_DIR": str(folder / "cache"),
               "WANDB_CONFIG_DIR": str(folder / "config"), "WANDB_MODE": "offline", "PATH": "/usr/bin:/bin",
               "PYTHONPATH": str(ROOT)}
        return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=240,
                              env=env)

    folders = {mode: tmp_path_factory.mktemp(f"wandb-{mode}") for mode in ("disabled", "offline")}
    runs = run_at_once({mode: functools.partial(run, mode, folder) for mode, folder in folders.items()})
    return {mode: (out, folders[mode]) for mode, out in runs.items()}


@pytest.mark.slow
@pytest.mark.parametrize("mode, imported", [("disabled", False), ("offline", True)])
def test_disabled_wandb_is_never_imported(wandb_modes, mode, imported):
    """Jobs, the sweep's end and the report command with wandb.mode=disabled; offline is the control."""
    out, folder = wandb_modes[mode]
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"wandb imported: {imported}" in out.stdout
    assert (folder / "sweep" / "results.csv").is_file() and (folder / "sweep" / "report" / "report.md").is_file()


def test_report_cli_logs_a_merged_report_naming_both_devices(wandb_home, fake_measure, two_figures, capsys):
    a, b = make_sweep(wandb_home / "a", name="cross_gpu"), make_sweep(wandb_home / "b", name="cross_gpu")
    for folder, device in ((a, "NVIDIA H100 80GB HBM3"), (b, "NVIDIA A100-SXM4-80GB")):
        with open(folder / "results.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        for row in rows:
            row["device_name"] = device
        with open(folder / "results.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    out = wandb_home / "compared"
    assert report.main([str(a / "results.csv"), str(b), "--out", str(out), "--formats", "png", "--wandb"]) == 0
    (run,) = read_runs(out)
    assert run["job_type"] == "report" and run["group"] == "cross_gpu/a+cross_gpu/b"
    assert run["config"]["devices"] == ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]
    assert run["config"]["sweeps"] == ["cross_gpu/a", "cross_gpu/b"]
    ((kind, contents),) = [v for v in run["artifacts"].values() if v[0] == "sweep-results"]
    assert {"results/0_a.csv", "results/1_b.csv", "report.md", "claims.csv"} <= set(contents)
    assert contents["results/1_b.csv"].read_bytes() == (b / "results.csv").read_bytes()
    assert len(json.loads(media(run, "results").read_text())["data"]) == 12
    assert f"wandb: report run (offline) -> {run['folder']}" in capsys.readouterr().out


def test_report_cli_without_the_flag_starts_no_run(wandb_home, fake_measure, two_figures):
    sweep = make_sweep(wandb_home / "sweep")
    assert report.main([str(sweep), "--out", str(wandb_home / "r"), "--formats", "png"]) == 0
    assert not (wandb_home / "r" / "wandb").exists()


# --- a SLURM array: one process per job, every run in the sweep's group -------------------------------------

JOB = """
import pickle, sys
from pathlib import Path
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import setup_globals
from omegaconf import open_dict
setup_globals()
import runners.sweep
cfg = pickle.loads(Path(sys.argv[1]).read_bytes())
with open_dict(cfg):  # what submitit's job and Hydra's run_job set before the task runs
    cfg.hydra.job.num = int(sys.argv[2])
    cfg.hydra.mode = "MULTIRUN"
    cfg.hydra.runtime.output_dir = str(Path(str(cfg.hydra.sweep.dir)).resolve() / str(cfg.hydra.sweep.subdir))
HydraConfig.instance().set_config(cfg)
ctx = runners.sweep.context(cfg)
print(ctx.sweep_id, ctx.index, ctx.sweep_dir)
"""


@pytest.mark.slow
def test_a_slurm_arrays_jobs_compute_the_launchers_group(composer, tmp_path):
    """submitit pickles the launcher's config and each array job (its own process, later, maybe on another
    host) rebuilds its context from it: the group must be the one the launching process logs the report in."""
    master = composer(["hydra/launcher=slurm_cpu", "experiment=quick"])
    assert "SlurmLauncher" in master.hydra.launcher._target_
    sweep_dir = Path(str(master.hydra.sweep.dir))  # resolved once, as the launcher does before submitting
    blob = tmp_path / "config.pkl"
    blob.write_bytes(pickle.dumps(master))
    group = sweep_id(master, sweep_dir)
    assert group == f"quick/{sweep_dir.name}"
    runs = run_at_once({num: functools.partial(  # two array jobs, two processes: side by side
        subprocess.run, [sys.executable, "-c", JOB, str(blob), str(num)], cwd=ROOT, capture_output=True, text=True,
        timeout=120) for num in (0, 3)})
    for num, out in runs.items():
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.split() == [group, str(num), str(sweep_dir)]


def test_each_process_names_its_run_after_its_first_job_in_one_group(tmp_path, monkeypatch):
    """Two array jobs (two sinks, as two processes): one group, two names, SLURM's ids in the config."""
    inits = []

    class Run:
        def log(self, *a, **k):
            pass

        def finish(self):
            pass

    fake = type(sys)("wandb")
    fake.Settings = lambda **kw: kw
    fake.init = lambda **kw: inits.append(kw) or Run()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "4242")
    for task in (0, 3):
        monkeypatch.setenv("SLURM_ARRAY_TASK_ID", str(task))
        sink = wandb_log.WandbSink()
        sink.log_point({"mode": "offline"}, {"backend": "naive", "time_ms": 1.0}, group="quick/cluster",
                       out_dir=tmp_path, job=task)
        sink.close()
    assert [i["group"] for i in inits] == ["quick/cluster"] * 2 and {i["job_type"] for i in inits} == {"sweep"}
    assert [i["name"] for i in inits] == ["quick/cluster-points-job0", "quick/cluster-points-job3"]
    assert [i["config"]["slurm_array_task_id"] for i in inits] == ["0", "3"]
    assert {i["config"]["slurm_array_job_id"] for i in inits} == {"4242"}


def test_rows_over_wandbs_table_limit_are_left_to_the_artifact_and_the_summary_says_so(
        wandb_home, fake_measure, two_figures, monkeypatch):
    import wandb

    monkeypatch.setattr(wandb.Table, "MAX_ROWS", 5)  # 6 rows: one too many (the real limit is 10,000)
    sweep = make_sweep(wandb_home / "sweep")
    end_sweep(sweep, "offline")
    (run,) = [r for r in read_runs(sweep) if r["job_type"] == "report"]
    assert not any("results/path" in h for h in run["history"]) and any("claims/path" in h for h in run["history"])
    assert run["summary"]["results_table"].startswith("not logged: 6 rows, over wandb's 5-row limit")
    ((kind, contents),) = [v for v in run["artifacts"].values() if v[0] == "sweep-results"]
    assert contents["results.csv"].read_bytes() == (sweep / "results.csv").read_bytes()
