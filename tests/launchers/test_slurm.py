"""Sweeps through a real SLURM scheduler (scripts/slurm_local.sh): what a cluster does to jobs loses nothing.

One one-node cluster (slurmctld, slurmd, munged started from a temporary folder, stopped by
their PIDs) serves the module. The five scenarios run on it at the same time, each in its own
sweep folder: a module fixture starts them in threads and each test asserts on its own
scenario's outcome. Most of a scenario's time is waiting for the scheduler (a time limit alone
is a minute or more), which they can share. Each waits only for its own jobs, never for the
whole queue. The node says 16 CPUs on whatever this machine has, so every scenario's one-CPU
jobs run at once: these tests compare statuses, point ids and row counts, never timings.
Skipped where Debian's slurmctld, slurmd and munge are not installed (.ci/run installs them),
or without root (slurmd starts job steps as their user).
"""

from __future__ import annotations

import csv
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm_local.sh"
SBIN_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])
INSTALLED = all(shutil.which(cmd, path=SBIN_PATH) for cmd in ("slurmctld", "slurmd", "munged", "sbatch", "squeue"))

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.slow,  # end to end through subprocesses and a scheduler: out of the quick loop
    pytest.mark.skipif(not INSTALLED, reason="SLURM not installed (apt-get install -y slurmctld slurmd munge)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="a local SLURM cluster needs root (slurmd)"),
]

# One CPU and 1 GB per job, no report, no wandb: the cluster path, not the analysis.
SLURM = ["hydra/launcher=slurm_cpu", "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1"]
QUIET = ["device=cpu", "report=false", "wandb.mode=disabled"]
# A path plugin whose every call sleeps before it computes: a point that must last (to be caught running,
# or to meet its time limit) then waits instead of computing, so the core it would keep busy for its
# whole timing window serves the other tests meanwhile. Everything else is the real path: measure_point,
# its timer, the row, submitit's signal handler (a signal raises inside the sleep as inside a kernel).
WAITING_PLUGIN = '''
import time
import torch
from selfattn.backends import backend

@backend(masks=(), kernel_label="sleep+einsum")
def waits(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    time.sleep(0.05)
    return torch.einsum("bhmn,bhnd->bhmd", (torch.einsum("bhmd,bhnd->bhmn", q, k) * scale).softmax(-1), v)
'''
WAITING = "waiting_attn:waits"
# Two points of a few seconds each (a timing window of 3 s): long enough to be caught running.
SLOW = ["-m", "experiment=smoke", f"backend={WAITING}", "seq_len=32,64", "budget.timing_s=3"]
POINTS = 2


def _free_port_pair() -> int:
    """A port p with p and p + 1 free (slurmctld, slurmd), away from SLURM's default 6817."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        if port < 65000:
            with socket.socket() as s:
                try:
                    s.bind(("", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port pair")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a running one-node cluster; stopped (by its PIDs) after the module."""
    run_dir = tmp_path_factory.mktemp("slurm")
    plugins = tmp_path_factory.mktemp("plugins")
    (plugins / "waiting_attn.py").write_text(WAITING_PLUGIN)  # on the jobs' PYTHONPATH (sbatch passes it on)
    env = {**os.environ, "PATH": SBIN_PATH, "SLURM_LOCAL_PORT": str(_free_port_pair()), "SLURM_LOCAL_CPUS": "16"}
    up = subprocess.run(["bash", str(SCRIPT), "start", str(run_dir)], env=env, capture_output=True, text=True,
                        timeout=120)
    assert up.returncode == 0, f"cluster did not start:\n{up.stdout}\n{up.stderr}"
    try:
        yield {**env, "SLURM_CONF": str(run_dir / "slurm.conf"), "HYDRA_FULL_ERROR": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), str(plugins), os.environ.get("PYTHONPATH")]))}
    finally:
        down = subprocess.run(["bash", str(SCRIPT), "stop", str(run_dir)], env=env, capture_output=True,
                              text=True, timeout=120)
        assert down.returncode == 0, down.stderr


def _sweep(env: dict[str, str], sweep_dir: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "runners.sweep", *args, *QUIET, f"hydra.sweep.dir={sweep_dir}"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: the sweep and nothing else
        out, _ = proc.communicate()
        pytest.fail(f"sweep still running after {timeout} s:\n{out[-3000:]}")
    return proc.returncode, out


def _squeue(env: dict[str, str], fmt: str = "%i %T") -> list[list[str]]:
    out = subprocess.run(["squeue", "-h", "-r", "-o", fmt], env=env, capture_output=True, text=True, timeout=30)
    return [line.split() for line in out.stdout.splitlines() if line.strip()]


def _wait(condition, what: str, timeout: float = 120, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := condition():
            return result
        time.sleep(every)
    pytest.fail(f"timed out waiting for {what}")


def _arrays(sweep_dir: Path) -> set[str]:
    """The SLURM job ids of the arrays this sweep folder's submissions made (submitit's folders)."""
    folder = sweep_dir / ".submitit"
    return {p.name for p in folder.iterdir() if "_" not in p.name} if folder.is_dir() else set()


def _running_task(env: dict[str, str], sweep_dir: Path) -> str:
    """The id (array_task) of a task of this sweep that runs, once one does (not a task of an earlier test)."""
    def running() -> str | None:
        arrays = _arrays(sweep_dir)
        return next((job for job, state in _squeue(env) if state == "RUNNING" and job.split("_")[0] in arrays), None)

    return _wait(running, "a running task")


def _drained(env: dict[str, str], sweep_dir: Path) -> None:
    """Wait until no job of this sweep's arrays is queued or running (other scenarios' jobs may be)."""
    def done() -> bool:
        arrays = _arrays(sweep_dir)
        return not any(job.split("_")[0] in arrays for job, _ in _squeue(env))

    _wait(done, "the sweep's jobs to leave the queue", timeout=240)


def _rows(sweep_dir: Path) -> list[dict[str, str]]:
    with open(sweep_dir / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def _row_files(sweep_dir: Path) -> dict[str, str]:
    """job folder -> its row.json's text (what a rerun must not rewrite)."""
    return {p.parent.name: p.read_text() for p in sweep_dir.glob("*/row.json")}


def _no_partial_files(sweep_dir: Path) -> None:
    assert not list(sweep_dir.rglob("*.tmp")), "a partial file was left behind"


def _assert_each_point_once_ok(sweep_dir: Path, points: int) -> list[dict[str, str]]:
    rows = _rows(sweep_dir)
    assert len(rows) == points and len({r["point_id"] for r in rows}) == points, [r["point_id"] for r in rows]
    assert {r["status"] for r in rows} == {"ok"}, [(r["point_id"], r["status"], r["error"]) for r in rows]
    _no_partial_files(sweep_dir)
    return rows


def _slurm_sweep_gives_the_same_points_as_the_basic_launcher_and_a_readable_log(
        cluster: dict[str, str], tmp_path: Path) -> None:
    # ok, unsupported on a CPU (tf32), invalid (3 heads do not divide d_model 16): every status path
    sweep = ["-m", "experiment=smoke", "backend=naive", "precision=fp32,tf32", "heads=2,3", "d_model=16"]
    basic = _sweep(cluster, tmp_path / "basic", *sweep)
    slurm = _sweep(cluster, tmp_path / "slurm", *sweep, *SLURM)
    (rc_basic, out_basic), (rc_slurm, out_slurm) = _finish(basic), _finish(slurm)
    assert rc_basic == 0 and rc_slurm == 0, out_slurm[-3000:]
    assert list((tmp_path / "slurm" / ".submitit").iterdir()), "no submitit job folders: was SLURM used?"

    def statuses(name: str) -> dict[str, str]:
        return {r["point_id"]: r["status"] for r in _rows(tmp_path / name)}

    assert statuses("slurm") == statuses("basic")
    assert sorted(statuses("slurm").values()) == ["invalid", "invalid", "ok", "unsupported"]
    # No warning per poll on a cluster without accounting storage: one line says how jobs are followed.
    lines = out_slurm.splitlines()
    assert not [line for line in lines if "Bypassing" in line or "accounting storage is disabled" == line.strip()]
    assert sum("sacct" in line for line in lines) == 1, out_slurm
    # sweep line, the sacct note, the summary table once (between blank lines), results line: nothing per poll or job
    blank = [i for i, line in enumerate(lines) if not line.strip()]
    outside_table = lines[:blank[0]] + lines[blank[-1] + 1:] if len(blank) >= 2 else lines
    assert len(outside_table) <= 6, out_slurm
    assert sum(line.startswith("results: ") for line in lines) == 1, out_slurm


def _a_cancelled_task_is_measured_by_the_rerun_and_every_point_is_there_once(
        cluster: dict[str, str], tmp_path: Path) -> None:
    first = _sweep(cluster, tmp_path, *SLOW, *SLURM)
    task = _running_task(cluster, tmp_path)
    subprocess.run(["scancel", task], env=cluster, check=True, timeout=30)
    rc, out = _finish(first)
    assert rc != 0, f"a sweep with a cancelled job said it succeeded:\n{out[-3000:]}"
    _drained(cluster, tmp_path)
    _no_partial_files(tmp_path)
    measured = _row_files(tmp_path)
    assert len(measured) < POINTS, "the cancelled task wrote its row anyway: cancel came too late to test anything"

    rc, out = _finish(_sweep(cluster, tmp_path, *SLOW, *SLURM))
    assert rc == 0, out[-3000:]
    _assert_each_point_once_ok(tmp_path, POINTS)
    after = _row_files(tmp_path)
    assert {job: after[job] for job in measured} == measured, "the rerun measured again points that had rows"
    assert len(after) == POINTS


def _a_requeued_task_runs_again_and_the_sweep_completes(cluster: dict[str, str], tmp_path: Path) -> None:
    first = _sweep(cluster, tmp_path, *SLOW, *SLURM)
    task = _running_task(cluster, tmp_path)
    subprocess.run(["scontrol", "requeue", task], env=cluster, check=True, timeout=30)
    # slurmctld holds a requeued job for about two minutes (its BeginTime): once it is pending again, start it now
    _wait(lambda: [task, "PENDING"] in _squeue(cluster), "the requeued task to be pending")
    subprocess.run(["scontrol", "update", f"JobId={task}", "StartTime=now"], env=cluster, check=True, timeout=30)
    rc, out = _finish(first)
    assert rc == 0, f"the sweep did not survive a requeue:\n{out[-3000:]}"
    rows = _assert_each_point_once_ok(tmp_path, POINTS)
    job = subprocess.run(["scontrol", "show", "job", task], env=cluster, capture_output=True, text=True, timeout=30)
    assert "Restarts=1" in job.stdout, f"task {task} was not requeued:\n{job.stdout}"

    before = _row_files(tmp_path)
    rc, out = _finish(_sweep(cluster, tmp_path, *SLOW, *SLURM))
    assert rc == 0, out[-3000:]
    assert _row_files(tmp_path) == before and len(_rows(tmp_path)) == len(rows)


def _a_job_at_its_time_limit_leaves_no_row_and_the_rerun_measures_it(cluster: dict[str, str], tmp_path: Path) -> None:
    # A point of 300 s (mostly asleep: WAITING_PLUGIN) against a 2-minute limit; submitit asks for its
    # signal 40 s before the limit, so the job learns early that it cannot finish (the same path as a
    # preset's job near its end).
    # sbatch(1): the signal "may be sent up to 60 seconds earlier than specified", so 80 s nominal
    # means 20-80 s after the start. A nominal 5 s (1 minute, 55 s) came at the job's first second
    # in one CI run, before submitit's handler existed: USR2's default action killed the job (FAILED).
    point = ["-m", "experiment=smoke", f"backend={WAITING}", "seq_len=64", "budget.max_point_s=1000"]
    limit = ["hydra.launcher.timeout_min=2", "hydra.launcher.signal_delay_s=40"]
    rc, out = _finish(_sweep(cluster, tmp_path, *point, "budget.timing_s=300", *SLURM, *limit), timeout=210)
    assert rc != 0, out[-3000:]
    assert "timed-out" in out, out[-3000:]
    _drained(cluster, tmp_path)
    assert not _row_files(tmp_path), "a job stopped at its time limit wrote a row (a resumed sweep would skip it)"
    _no_partial_files(tmp_path)
    log = "".join(p.read_text() for p in (tmp_path / ".submitit").glob("*/*_log.err"))
    assert "stopped by the scheduler" in log, log[-3000:]

    rc, out = _finish(_sweep(cluster, tmp_path, *point, *SLURM))  # the default timing window, the default limit
    assert rc == 0, out[-3000:]
    _assert_each_point_once_ok(tmp_path, 1)


def _a_killed_submitter_loses_nothing_and_the_rerun_only_collects(cluster: dict[str, str], tmp_path: Path) -> None:
    first = _sweep(cluster, tmp_path, *SLOW, *SLURM)
    _running_task(cluster, tmp_path)
    os.killpg(first.pid, signal.SIGKILL)  # the submitter's own session: jobs are SLURM's, not its children
    first.communicate()
    _drained(cluster, tmp_path)  # the array runs to its end without the process that submitted it
    finished = _row_files(tmp_path)
    assert len(finished) == POINTS, f"jobs did not finish after their submitter died: {sorted(finished)}"

    rc, out = _finish(_sweep(cluster, tmp_path, *SLOW, *SLURM))
    assert rc == 0, out[-3000:]
    _assert_each_point_once_ok(tmp_path, POINTS)
    assert _row_files(tmp_path) == finished, "the rerun measured points whose jobs had finished"


SCENARIOS = [_slurm_sweep_gives_the_same_points_as_the_basic_launcher_and_a_readable_log,
             _a_cancelled_task_is_measured_by_the_rerun_and_every_point_is_there_once,
             _a_requeued_task_runs_again_and_the_sweep_completes,
             _a_job_at_its_time_limit_leaves_no_row_and_the_rerun_measures_it,
             _a_killed_submitter_loses_nothing_and_the_rerun_only_collects]


@pytest.fixture(scope="module")
def outcomes(cluster: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, BaseException | None]:
    """Every scenario, run at once on the module's cluster: its name -> what it raised (None: it passed)."""
    def run(scenario) -> BaseException | None:
        try:
            scenario(cluster, tmp_path_factory.mktemp(scenario.__name__.strip("_")[:40]))
        except BaseException as exc:  # pytest.fail's exception too: the test that owns the scenario re-raises it
            return exc
        return None

    with ThreadPoolExecutor(len(SCENARIOS)) as pool:
        return dict(zip([s.__name__ for s in SCENARIOS], pool.map(run, SCENARIOS)))


def _check(outcomes: dict[str, BaseException | None], scenario) -> None:
    if (exc := outcomes[scenario.__name__]) is not None:
        raise exc


def test_slurm_sweep_gives_the_same_points_as_the_basic_launcher_and_a_readable_log(outcomes) -> None:
    _check(outcomes, _slurm_sweep_gives_the_same_points_as_the_basic_launcher_and_a_readable_log)


def test_a_cancelled_task_is_measured_by_the_rerun_and_every_point_is_there_once(outcomes) -> None:
    _check(outcomes, _a_cancelled_task_is_measured_by_the_rerun_and_every_point_is_there_once)


def test_a_requeued_task_runs_again_and_the_sweep_completes(outcomes) -> None:
    _check(outcomes, _a_requeued_task_runs_again_and_the_sweep_completes)


def test_a_job_at_its_time_limit_leaves_no_row_and_the_rerun_measures_it(outcomes) -> None:
    _check(outcomes, _a_job_at_its_time_limit_leaves_no_row_and_the_rerun_measures_it)


def test_a_killed_submitter_loses_nothing_and_the_rerun_only_collects(outcomes) -> None:
    _check(outcomes, _a_killed_submitter_loses_nothing_and_the_rerun_only_collects)
