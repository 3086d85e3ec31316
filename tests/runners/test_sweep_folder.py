"""A sweep folder nothing corrupts, through the real command line: one sweep owns it (runners/folder_lock.py),
a write that fails is counted and results.csv still rebuilt (runners/ledger.py, rows.reserve_room), and a
folder or name that cannot be used is one line, exit 2 (runners/paths.py).

The full and read-only file systems are real ones: a small tmpfs mounted for the test (root only; skipped
elsewhere, where tests/runners/test_disk_full.py's simulated failures still run)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from runner_helpers import ROOT, run_at_once, run_sweep, sweep_cmd

from runners import folder_lock, row_store

QUIET = ["report=false", "wandb.mode=disabled"]
GRID_A = ["-m", "seq_len=16,32,48,64,80,96", "head_dim=8,16,32,64", *QUIET]  # 24 points
GRID_B = ["-m", "seq_len=17,33,49,65,81,97", "head_dim=8,16,32,64", *QUIET]  # 24 other points


def start(*args: str, sleep_s: float = 0.0) -> subprocess.Popen:
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "FAKE_MEASURE_SLEEP_S": str(sleep_s)}
    return subprocess.Popen(sweep_cmd(*args, fake=True), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def row_files(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in row_store.row_paths(folder)]


def csv_rows(folder: Path) -> int:
    return len((folder / "results.csv").read_text().splitlines()) - 1


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


# --- one sweep owns its folder ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_different_sweeps_into_one_folder_lose_no_row(tmp_path):
    """Started together: one takes the folder, the other is refused in one line naming the holder, before any
    work; the holder's 24 rows are whole, and the refused command run afterwards adds its 24: all 48 rows."""
    folder = tmp_path / "shared"
    first, second = (start(*grid, f"hydra.sweep.dir={folder}", sleep_s=0.15) for grid in (GRID_A, GRID_B))
    results = {"A": finish(first), "B": finish(second)}
    codes = sorted(code for code, _, _ in results.values())
    assert codes == [0, 2], {k: (c, e[-1500:]) for k, (c, _, e) in results.items()}
    (held, (_, held_out, _)), = [(k, r) for k, r in results.items() if r[0] == 0]
    (refused, (_, refused_out, refused_err)), = [(k, r) for k, r in results.items() if r[0] == 2]
    holder = first if held == "A" else second
    assert error_lines(refused_err) == [line for line in refused_err.splitlines() if line.strip()], refused_err
    line, = error_lines(refused_err)
    assert f"is in use by another sweep (pid {holder.pid}: python -m runners.sweep -m seq_len=" in line
    assert "[" not in refused_out  # no point was measured by the refused sweep
    assert len(row_files(folder)) == 24 and csv_rows(folder) == 24
    code, _, err = finish(start(*(GRID_B if refused == "B" else GRID_A), f"hydra.sweep.dir={folder}"))
    assert code == 0, err[-2000:]
    rows = row_files(folder)
    assert len(rows) == 48 and len({r["point_id"] for r in rows}) == 48 and csv_rows(folder) == 48


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_sweep_leaves_no_stale_lock(tmp_path):
    """SIGKILL, which no handler sees: the kernel drops the lock, so the same command resumes at once."""
    folder = tmp_path / "killed"
    proc = start(*GRID_A, f"hydra.sweep.dir={folder}", sleep_s=0.3)
    deadline = time.time() + 120
    while not list(folder.glob("*/row.json")) and time.time() < deadline:
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert (folder / folder_lock.LOCK_NAME).is_file()  # the file stays; the lock on it died with its process
    code, out, err = finish(start(*GRID_A, f"hydra.sweep.dir={folder}"))
    assert code == 0, err[-2000:]
    assert "already measured" in out and csv_rows(folder) == 24


def test_a_held_folder_refuses_another_process_and_names_it(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from runners import folder_lock; "
         f"folder_lock.own({str(tmp_path)!r}, 'python -m runners.sweep -m seq_len=1,2'); "
         "print('held', flush=True); time.sleep(60)"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(folder_lock.FolderBusy) as refused:
            folder_lock.own(tmp_path, "python -m runners.sweep")
        assert str(refused.value) == (f"hydra.sweep.dir: {tmp_path} is in use by another sweep (pid {holder.pid}: "
                                      "python -m runners.sweep -m seq_len=1,2); wait for it to end, or choose another folder")
        with pytest.raises(folder_lock.FolderBusy):  # a single run's shared lock is refused by a sweep's too
            folder_lock.own(tmp_path, "python -m runners.sweep", shared=True)
    finally:
        holder.kill()  # by its PID
        holder.wait()
    assert folder_lock.own(tmp_path, "x") == ""  # its death dropped the lock
    folder_lock.release(tmp_path)


def test_two_writers_of_one_job_folder_keep_both_rows(tmp_path):
    """Two sweeps' job 0 (or an orphaned SLURM task and a new sweep) write one folder: row.json is never
    replaced by another point's row, whoever writes first."""
    first = row_store.write_row(tmp_path, {"point_id": "a", "status": "ok"})
    second = row_store.write_row(tmp_path, {"point_id": "b", "status": "ok"})
    again = row_store.write_row(tmp_path, {"point_id": "a", "status": "error"})  # a retry replaces its own row
    assert (first.name, second.name, again.name) == ("row.json", "row-b.json", "row.json")
    assert json.loads(first.read_text())["status"] == "error" and json.loads(second.read_text())["point_id"] == "b"
    assert not list(tmp_path.glob(".*.tmp"))


# --- a file system that is full or read-only -----------------------------------------------------------


@contextmanager
def small_fs(tmp_path: Path, size: str):
    """A tmpfs of `size` at tmp_path/fs, unmounted after; the test is skipped where it cannot be mounted."""
    mount = tmp_path / "fs"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                                           capture_output=True).returncode:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def read_only(fs: Path, within_s: float = 30.0) -> None:
    """Remount `fs` read-only while a sweep writes to it: the kernel refuses (EBUSY, "mount point is busy") while a
    file there is open for writing (a job's log, a row being written), so try again until a moment between them."""
    deadline = time.time() + within_s
    while True:
        done = subprocess.run(["mount", "-o", "remount,ro", str(fs)], capture_output=True, text=True)
        if done.returncode == 0:
            return
        if "busy" not in done.stderr or time.time() > deadline:
            raise AssertionError(f"could not remount {fs} read-only: {done.stderr.strip()}")
        time.sleep(0.01)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_disk_that_fills_mid_sweep_exits_1_with_the_count_and_a_rebuilt_csv(tmp_path):
    with small_fs(tmp_path, "420k") as fs:
        code, out, err = finish(start(*GRID_A, f"hydra.sweep.dir={fs}/s"))
        written = len(row_files(fs / "s"))
        assert code == 1, err[-2000:]
        assert 0 < written < 24, err[-2000:]
        assert "Traceback" not in err
        line, = error_lines(err)
        assert line == (f"error: {24 - written} points of this sweep have no row: could not write "
                        f"{fs}/s/{written}/row.json: No space left on device (ENOSPC); the same command measures them")
        assert csv_rows(fs / "s") == written  # rebuilt from every row that exists, in the room set aside
        assert not (fs / "s" / ".results.reserve").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("state", ["full", "read-only"])
def test_a_file_system_full_or_read_only_at_the_start_is_one_line_exit_2(tmp_path, state):
    with small_fs(tmp_path, "100k") as fs:
        if state == "full":
            (fs / "filler").write_bytes(bytes(95 * 1024))
        else:
            subprocess.run(["mount", "-o", "remount,ro", str(fs)], check=True)
        code, out, err = finish(start(*GRID_A, f"hydra.sweep.dir={fs}/s"))
    assert code == 2 and "[" not in out, err[-2000:]
    assert [line for line in err.splitlines() if line.strip()] == error_lines(err)
    line, = error_lines(err)
    assert line.startswith("error: hydra.sweep.dir: ")
    assert ("No space left on device (ENOSPC)" if state == "full" else "(a read-only file system)") in line


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_file_system_turned_read_only_mid_sweep_stops_it_in_one_line(tmp_path):
    with small_fs(tmp_path, "4m") as fs:
        proc = start(*GRID_A, f"hydra.sweep.dir={fs}/s", sleep_s=0.3)
        deadline = time.time() + 120
        while len(list((fs / "s").glob("*/row.json"))) < 3 and time.time() < deadline:
            time.sleep(0.05)
        read_only(fs)
        code, out, err = finish(proc)
    assert code == 1 and "Traceback" not in err, err[-2000:]
    line, = error_lines(err)
    assert "the file system turned read-only, so the sweep stops" in line and "the same command measures" in line


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_rows_removed_or_cut_short_are_said_and_measured_again(tmp_path):
    folder = tmp_path / "s"
    proc = start(*GRID_A, f"hydra.sweep.dir={folder}", sleep_s=0.2)
    deadline = time.time() + 120
    while not (folder / "5" / "row.json").is_file() and time.time() < deadline:
        time.sleep(0.05)
    for job in ("0", "1", "2"):  # job folders deleted while the sweep runs
        subprocess.run(["rm", "-rf", str(folder / job)], check=True)
    code, out, err = finish(proc)
    assert code == 1, err[-2000:]
    assert error_lines(err) == ["error: 3 points of this sweep have no row: their row files were removed while the "
                                "sweep ran; the same command measures them"]
    cut = folder / "4" / "row.json"
    cut.write_text(cut.read_text()[:100])  # a truncated row file
    code, out, err = finish(start(*GRID_A, f"hydra.sweep.dir={folder}"))
    assert code == 0, err[-2000:]
    assert f"warning: {cut} holds no whole row; its point is measured again" in err.splitlines()
    measured = [line for line in out.splitlines() if line.startswith("[")]
    skipped = sum(int(m.group(1)) for m in re.finditer(r"^(\d+) (?:more |of 24 )?points? already measured", out, re.M))
    assert [line.split("]")[0] for line in measured] == ["[1/24", "[2/24", "[3/24", "[5/24"], out  # removed, cut short
    assert skipped == 20, out  # the cut row is not counted as measured
    assert csv_rows(folder) == 24 and json.loads(cut.read_text())["status"] == "ok"


# --- refusals: one line, the key named, exit 2 ------------------------------------------------------------

REFUSED = {  # arguments -> the start of the one line
    "file": (["hydra.sweep.dir={tmp}/afile"], "error: hydra.sweep.dir: {tmp}/afile is a file, not a folder"),
    "under_file": (["hydra.sweep.dir={tmp}/afile/sub"], "error: hydra.sweep.dir: {tmp}/afile/sub lies under the file"),
    "empty_dir": (["hydra.sweep.dir="], "error: hydra.sweep.dir: expected a folder, got an empty path"),
    "long_name": (["name=" + "x" * 300], "error: name: at most 100 characters"),
    "escaping_name": (["name=../../../x"], "error: name: a folder inside sweeps/"),
    "huge_int": (["seq_len=" + "9" * 5000], "error: seq_len: an integer of 5000 digits"),
    "interpolation": (["seq_len=${oops}"], "error: seq_len: '${oops}' refers to no key of the config"),
    "open_list": (["seq_len=[1,2"], "error: seq_len: '[1,2' is not a value the override grammar reads"),
    "tuple": (["window=(5,-3)"], "error: window: '(5,-3)' is a tuple"),
    "full_width": (["seq_len=１２８"], "error: seq_len: digits are ASCII 0-9"),
    "non_ascii_key": (["séq_len=1"], "error: 'séq_len': a key is ASCII"),
    "long_backend": (["backend=" + "b" * 100_000], "error: backend: expected one of"),
    "grid_key": (["experiment=quick", "seq_len=64"], "error: seq_len: experiment=quick's grids set it"),
}


def test_each_refusal_is_one_line_naming_its_key_exit_2(tmp_path):
    (tmp_path / "afile").write_text("not a folder")
    calls = {name: (lambda args=args: run_sweep("-m", *[a.format(tmp=tmp_path) if "{tmp}" in a else a for a in args],
                                                f"hydra.run.dir={tmp_path}/run", timeout=120))
             for name, (args, _) in REFUSED.items()}
    for name, out in run_at_once(calls).items():
        expected = REFUSED[name][1].format(tmp=tmp_path) if "{tmp}" in REFUSED[name][1] else REFUSED[name][1]
        lines = [line for line in out.stderr.splitlines() if line.strip()]
        assert out.returncode == 2 and len(lines) == 1, (name, out.returncode, out.stderr[-1500:])
        assert lines[0].startswith(expected), (name, lines[0][:300])
        assert len(lines[0]) < 400 and "Traceback" not in out.stderr and not out.stdout.strip(), name
    assert not (ROOT / "sweeps" / "x").exists()


# --- nothing big before the guard --------------------------------------------------------------------

RSS_CHILD = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, file=sys.stderr); sys.exit(p.returncode)")


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("extra", [["seq_len=1000000000"], ["seq_len=10000000000"],
                                   ["seq_len=1000000000", "window=128"],
                                   ["seq_len=1000000000", "batch=2", "documents=4"]],
                         ids=["n1e9", "n1e10", "n1e9-window", "n1e9-documents"])
def test_a_huge_point_is_skipped_by_the_guard_at_once_without_allocating(tmp_path, extra):
    """Its skipped_budget row within a second of measure_point's start, and the process's peak memory what
    torch and Hydra take to import (a permutation of 10^9 query rows alone is 8 GB)."""
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-c", RSS_CHILD, sys.executable, "-m", "runners.sweep", *extra,
                           "device=cpu", "wandb.mode=disabled", f"hydra.run.dir={run}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=240)
    row = json.loads((run / "row.json").read_text())
    assert row["status"] == "skipped_budget" and "predicted memory" in row["error"], row["error"]
    assert row["point_wall_s"] < 1.0, row["point_wall_s"]
    peak_rss = int(proc.stderr.strip().splitlines()[-1])
    assert peak_rss < 1.5 * 2**30, peak_rss
    assert proc.returncode == 1  # nothing was measured (docs/usage.md's exit statuses)


# --- exit statuses a script can use ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_exit_statuses_of_single_runs_and_sweeps(tmp_path):
    from runner_helpers import write_path_plugin

    plugins = write_path_plugin(tmp_path / "plugins")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), str(plugins), os.environ.get("PYTHONPATH")]))}
    small = ["seq_len=16", "heads=1", "head_dim=8", "device=cpu", "experiment=smoke", "wandb.mode=disabled"]
    calls = {
        "ok": lambda: run_sweep(*small, f"hydra.run.dir={tmp_path}/ok", env=env, timeout=240),
        "error": lambda: run_sweep("backend=my_attn:explodes", *small, f"hydra.run.dir={tmp_path}/error", env=env,
                                   timeout=240),
        "unsupported": lambda: run_sweep("backend=sdpa", "mode=fwd_bwd", "precision=fp8_e4m3", *small,
                                         f"hydra.run.dir={tmp_path}/unsupported", env=env, timeout=240),
        "sweep_error": lambda: run_sweep("-m", "backend=naive,my_attn:explodes", *small, "report=false",
                                         f"hydra.sweep.dir={tmp_path}/sweep", env=env, timeout=240),
    }
    done = run_at_once(calls)
    statuses = {name: json.loads(next((tmp_path / name).glob("row.json")).read_text())["status"]
                for name in ("ok", "error", "unsupported")}
    assert statuses == {"ok": "ok", "error": "error", "unsupported": "unsupported"}
    assert done["ok"].returncode == 0, done["ok"].stderr[-2000:]
    assert done["error"].returncode == 1 and done["unsupported"].returncode == 1  # nothing measured
    sweep = done["sweep_error"]
    assert sweep.returncode == 1, sweep.stderr[-2000:]
    assert error_lines(sweep.stderr) == ["error: 1 point failed (1 error): their `error` column says why"]


def test_the_ledgers_line_says_how_many_points_have_no_row_and_why():
    from runners.ledger import Ledger

    book = Ledger()
    for point in "abcd":
        book.ran(point)
    assert book.missing_line("abcd") == ""
    book.not_written("c", "could not write X/2/row.json: No space left on device (ENOSPC)")
    assert book.missing_line("abcd") == ""  # c's row is there after all (written by another job of its point)
    assert book.missing_line("abd") == ("1 point of this sweep has no row: could not write X/2/row.json: No space left "
                                        "on device (ENOSPC); the same command measures them")
    assert book.missing_line("ab") == ("2 points of this sweep have no row: 1 not written (could not write X/2/row.json: "
                                       "No space left on device (ENOSPC)), 1 removed since written; the same command "
                                       "measures them")
    assert book.missing_line("abc").startswith("1 point of this sweep has no row: its row file was removed")


def test_interpolations_of_known_keys_and_resolvers_pass_and_others_are_named():
    from runners import cli_syntax

    known = {"seq_len", "heads", "budget", "hydra"}
    assert cli_syntax.interpolation_problem("q_len", "${seq_len}", known) == ""
    assert cli_syntax.interpolation_problem("seq_len", "${by_device:64,4096}", known) == ""
    assert cli_syntax.interpolation_problem("seq_len", "${oops}", known).startswith("seq_len: '${oops}' refers to no key")
    assert "calls no resolver named 'nope'" in cli_syntax.interpolation_problem("seq_len", "${nope:1}", known)
