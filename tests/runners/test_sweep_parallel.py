"""Jobs writing into one sweep folder at once, through Hydra's parallel launchers.

joblib (two worker processes, each running two of the four jobs, so a worker is reused) and
submitit_local (an array of 4 processes at once, as SLURM would run them) must leave every row
once, an index entry per point, and a results.csv that is whole whenever someone reads it,
during the sweep too. A rerun then skips every point. One back end of the sweep is a path plugin
(runner_helpers.PATH_PLUGIN), which each job's own process must import itself, as a SLURM task
does: it composes its config, nothing is handed over by the submitter. Eight writers racing on one folder (real
processes, 120 rows) are tested without a launcher's start-up cost in tests/runners/test_rows.py
(test_eight_concurrent_jobs_lose_no_row_and_duplicate_none).
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import time
from pathlib import Path

import pytest

from runner_helpers import ROOT, sweep_cmd, write_path_plugin

pytestmark = pytest.mark.slow
POINTS = ["-m", "backend=naive,my_attn:quick", "seq_len=16,32", "device=cpu", "heads=1", "experiment=smoke"]
JOBS = 4
LAUNCHERS = {  # launcher -> (its overrides, the jobs it runs at once)
    "joblib": (["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], 2),
    "submitit_local": (["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5"], JOBS),
}


def whole_csv(text: str) -> list[dict]:
    """The rows of a results.csv read at any moment: it must be the header and complete rows."""
    table = list(csv.DictReader(io.StringIO(text, newline="")))
    assert not text or text.endswith("\n")
    assert all(None not in r and None not in r.values() for r in table), "a partial row"
    return table


def run_watching(args: list[str], sweep_dir: Path, plugins: Path, timeout: float = 240) -> tuple[str, int]:
    """Run a sweep, reading results.csv over and over while it runs; returns its output and the reads."""
    env = {**os.environ, "HYDRA_FULL_ERROR": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), str(plugins), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(sweep_cmd(*args), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    reads, deadline = 0, time.time() + timeout
    while proc.poll() is None and time.time() < deadline:
        try:
            whole_csv((sweep_dir / "results.csv").read_text())
            reads += 1
        except FileNotFoundError:
            pass
        time.sleep(0.02)
    out, _ = proc.communicate(timeout=max(1.0, deadline - time.time()))
    assert proc.returncode == 0, out[-3000:]
    return out, reads


@pytest.mark.timeout(400)
@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_parallel_jobs_lose_no_row_and_duplicate_none(tmp_path, launcher):
    overrides, sharing = LAUNCHERS[launcher]
    sweep_dir, imports = tmp_path / "sweep", tmp_path / "imports.txt"
    plugins = write_path_plugin(tmp_path / "plugins", imports_log=imports)
    args = [*POINTS, *overrides, f"hydra.sweep.dir={sweep_dir}"]
    out, reads = run_watching(args, sweep_dir, plugins)
    table = whole_csv((sweep_dir / "results.csv").read_text())
    assert len(table) == JOBS and len({r["point_id"] for r in table}) == JOBS, out[-3000:]
    assert all(r["status"] == "ok" and r["jobs_sharing_device"] == str(sharing) for r in table)
    assert {r["backend"] for r in table} == {"naive", "quick"}, out[-3000:]
    if launcher == "submitit_local":  # the plugin imported in the isolated worker of a job's own process
        importers = [line.split("\t") for line in imports.read_text().splitlines() if line.strip()]
        assert any(Path(argv0).name == "isolate_worker.py" and "submitit.core._submit" in parent
                   for argv0, parent in importers), importers
    assert len(list(sweep_dir.glob("*/row*.json"))) == JOBS
    assert sorted(p.name for p in (sweep_dir / ".points").iterdir()) == sorted(r["point_id"] for r in table)
    assert f"results: {JOBS} rows ({JOBS} ok)" in out
    assert f"warning: {sharing} jobs share the device at once: their timings interfere" in out

    written = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in sweep_dir.glob("*/row*.json")}
    run_watching(args, sweep_dir, plugins)  # resume: every point is looked up and skipped (submitit's jobs print to its logs)
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in sweep_dir.glob("*/row*.json")} == written
    assert len(whole_csv((sweep_dir / "results.csv").read_text())) == JOBS
    assert len(list(sweep_dir.glob("*/row*.json"))) == JOBS
