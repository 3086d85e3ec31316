"""End to end: plugins that attack the harness (tests/runners/hostile.py) cost their own rows and nothing else.

Through the real command line: a plugin that forges a row on the worker's channel, writes garbage to it or a
pickle that would run a command, leaves a process running, changes torch's global state, raises
KeyboardInterrupt or closes fds 1 and 2, between built-ins whose rows must stay intact and correct; the
same with isolate=false for what applies in the sweep's own process. After the sweep no process of its
worker's session is left. A plugin whose import hangs is a `timeout` row (it is imported by a child that
describes its options and by the worker, never by the sweep's process), and SIGTERM while Hydra composes the
job, waiting on that child, ends the sweep in one line within a second, the child with it.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from runner_helpers import ROOT, run_at_once, sweep_cmd

HERE = Path(__file__).resolve().parent
H = "hostile:"
ISOLATED = ["naive", H + "forges", H + "garbage", H + "pickled", H + "forks", H + "changes_state", H + "probe",
            H + "interrupts", H + "closes_std", "sdpa"]
IN_PROCESS = ["naive", H + "changes_state", H + "probe", H + "interrupts", H + "closes_std", "sdpa"]


def _env(tmp: Path, name: str) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)]), "OMP_NUM_THREADS": "2",
            "HOSTILE_MARKER": str(tmp / f"{name}.marker"), "HOSTILE_PROBE": str(tmp / f"{name}.probe"),
            "HOSTILE_CHILD": str(tmp / f"{name}.child")}


def _sweep(tmp: Path, name: str, backends: list[str], *extra: str) -> subprocess.CompletedProcess:
    # the forging plugins write their bytes to every pipe they find, the output's copies among them
    return subprocess.run(sweep_cmd("-m", "backend=" + ",".join(backends), "experiment=smoke", *extra,
                                    f"hydra.sweep.dir={tmp / name}"), cwd=ROOT, capture_output=True, text=True,
                          errors="replace", timeout=600, env={**os.environ, "HYDRA_FULL_ERROR": "0", **_env(tmp, name)})


def _rows(folder: Path) -> dict[str, dict]:
    rows = pd.read_csv(folder / "results.csv", keep_default_na=False)
    return {row["backend"]: row for row in rows.to_dict("records")}


def _probe_sees_the_original_state(path: Path) -> None:
    first = json.loads(path.read_text().splitlines()[0])  # its warm-up call, on every thread
    assert first["threads"] == 2 and first["dtype"] == "torch.float32" and first["seed"] != 123, first


def _builtins_intact(rows: dict[str, dict]) -> None:
    for name in ("naive", "sdpa"):
        row = rows[name]
        assert row["status"] == "ok" and row["backend_source"] == "builtin", row
        assert float(row["time_ms"]) > 0.001 and float(row["max_abs_err"]) < 1e-5, row  # not the forged 0.000123 ms


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:].split()[0] not in (b"Z", b"X")


def _session_of(pid: int) -> list[int]:
    """Processes whose session or process group is `pid`'s."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if fields[0] not in (b"Z", b"X") and pid in (int(fields[2]), int(fields[3])):
            found.append(int(entry))
    return found


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_hostile_plugins_cost_their_own_rows_and_leave_nothing_behind(tmp_path):
    runs = run_at_once({"isolated": functools.partial(_sweep, tmp_path, "isolated", ISOLATED),
                        "in_process": functools.partial(_sweep, tmp_path, "in_process", IN_PROCESS, "isolate=false")})

    out = runs["isolated"]
    assert out.returncode == 1, out.stderr[-3000:]  # failed points: exit 1, after the summary
    assert "Traceback" not in out.stderr and "points failed" in out.stderr, out.stderr[-3000:]
    rows = _rows(tmp_path / "isolated")
    assert len(rows) == len(ISOLATED)
    _builtins_intact(rows)
    for name in ("forges", "garbage", "pickled"):
        assert rows[name]["status"] == "crashed", rows[name]
        assert "answer was not the harness's" in rows[name]["error"], rows[name]["error"]
    assert not (tmp_path / "isolated.marker").exists()  # the pickle was never loaded, anywhere
    assert rows["forks"]["status"] == "error" and "left 1 process(es) running" in rows["forks"]["error"]
    assert rows["changes_state"]["status"] == "ok", rows["changes_state"]
    assert "num_threads (2 -> 1)" in rows["changes_state"]["note"] and "default_dtype" in rows["changes_state"]["note"]
    assert rows["changes_state"]["num_threads"] == 1  # what its timed calls ran on
    _probe_sees_the_original_state(tmp_path / "isolated.probe")
    assert rows["probe"]["status"] == "ok" and "changed" not in rows["probe"]["note"]
    assert rows["interrupts"]["status"] == "error", rows["interrupts"]
    assert rows["interrupts"]["error"] == "the back end raised KeyboardInterrupt: the plugin's own"
    assert rows["closes_std"]["status"] == "ok" and "fd 2 (closed)" in rows["closes_std"]["note"]
    workers = {json.loads(line)["pid"] for line in (tmp_path / "isolated.probe").read_text().splitlines()}
    assert len(workers) == 1 and not any(_session_of(pid) for pid in workers)  # the worker's session: gone
    daemon = int((tmp_path / "isolated.child").read_text())
    assert not Path(f"/proc/{daemon}").exists()  # the detached daemon too (its own session: found by the tree)

    out = runs["in_process"]
    assert out.returncode == 1, out.stderr[-3000:]  # the plugin's KeyboardInterrupt is a row, not the user's Ctrl-C
    assert "interrupted" not in out.stderr and "Traceback" not in out.stderr, out.stderr[-3000:]
    rows = _rows(tmp_path / "in_process")
    assert len(rows) == len(IN_PROCESS)
    _builtins_intact(rows)
    assert rows["interrupts"]["status"] == "error" and "KeyboardInterrupt" in rows["interrupts"]["error"]
    assert "num_threads (2 -> 1)" in rows["changes_state"]["note"]
    _probe_sees_the_original_state(tmp_path / "in_process.probe")
    assert rows["closes_std"]["status"] == "ok" and "fd 1 (closed)" in rows["closes_std"]["note"]
    assert "[6/6] sdpa" in out.stdout  # the harness's own output survived fd 1 closed


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_plugin_whose_import_hangs_is_a_timeout_row_and_the_sweep_goes_on(tmp_path):
    env = {**_env(tmp_path, "hangs"), "SELFATTN_PLUGIN_DESCRIBE_S": "3", "HANGS_PIDS": str(tmp_path / "pids")}
    proc = subprocess.Popen(sweep_cmd("-m", "backend=naive,hangs_at_import:attn,sdpa", "experiment=smoke",
                                      "isolate_limit_s=4", f"hydra.sweep.dir={tmp_path / 'hangs'}"), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
    _, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 1, stderr[-3000:]
    rows = _rows(tmp_path / "hangs")
    _builtins_intact(rows)
    assert rows["attn"]["status"] == "timeout" and "past its limit of 4 s" in rows["attn"]["error"], rows["attn"]
    importers = [int(pid) for pid in (tmp_path / "pids").read_text().split()]
    assert importers and proc.pid not in importers  # the child that describes it (and the worker): not the sweep
    assert not [pid for pid in importers if _alive(pid)]  # both killed


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigterm_while_a_plugin_import_hangs_in_composition_ends_the_sweep_in_a_second(tmp_path):
    proc = subprocess.Popen(sweep_cmd("-m", "backend=naive,hangs_at_import:attn,sdpa", "experiment=smoke",
                                      f"hydra.sweep.dir={tmp_path / 's'}"), cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **_env(tmp_path, "s"), "HANGS_PIDS": str(tmp_path / "pids")})
    try:
        seen = ""
        while "[1/3] naive" not in seen:  # the next job's composition imports the plugin, which never returns
            line = proc.stdout.readline()
            assert line, proc.communicate()
            seen += line
        waited = time.monotonic()
        while not (tmp_path / "pids").exists() and time.monotonic() - waited < 120:  # the child is in the hang
            time.sleep(0.1)
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143 and took < 1.0, (proc.returncode, took, stderr)
    assert stderr.strip().splitlines() == [
        "interrupted after 1 of 3 points; the same command resumes: python -m runners.sweep -m "
        f"backend=naive,hangs_at_import:attn,sdpa experiment=smoke hydra.sweep.dir={tmp_path / 's'}"]
    assert list(pd.read_csv(tmp_path / "s" / "results.csv")["backend"]) == ["naive"]
    importers = [int(pid) for pid in (tmp_path / "pids").read_text().split()]
    assert importers and proc.pid not in importers  # composition asked a child, which hung there
    time.sleep(0.5)  # PR_SET_PDEATHSIG: the child dies with the sweep
    assert not [pid for pid in importers if _alive(pid)], [Path(f"/proc/{pid}/status").read_text()[:300]
                                                           for pid in importers if _alive(pid)]
