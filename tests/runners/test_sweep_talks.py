"""What `python -m runners.sweep` says: typos refused before the first point, the table at the end, Ctrl-C and
SIGTERM in one line, a resume in one line, nothing measured is an error, library notes only with verbose=true.
The end-to-end tests run the real command line (most with the fake measurement: the runner is under test)."""

from __future__ import annotations

import csv
import functools
import os
import signal
import subprocess
import sys
import time
import warnings

import pytest

from runner_helpers import ROOT, run_at_once, run_sweep, sweep_cmd
from runners import interrupts, progress, quiet
from runners.callbacks import nothing_measured


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# --- the pieces ------------------------------------------------------------------------------------

def test_skipped_points_are_one_line_with_what_is_left():
    skipped = progress.Skipped()
    assert skipped.line(36) is None
    for _ in range(14):
        skipped.add("ok")
    skipped.add("invalid")
    assert skipped.line(36) == "15 of 36 points already measured (14 ok, 1 invalid), measuring 21"
    assert skipped.line(36) is None  # said once
    skipped.add("ok")
    assert skipped.line(36) == "1 more point already measured"
    every = progress.Skipped()
    for _ in range(3):
        every.add("ok")
    assert every.line(3) == "all 3 points already measured, nothing to measure"
    # a point met after this sweep measured others (two grids of an experiment naming one point): no count of
    # what is left, which would read as points still to come
    later = progress.Skipped()
    for _ in range(8):
        later.measuring()
    later.add("unsupported")
    assert later.line(9) == "1 point already measured (1 unsupported)"


def test_the_resume_command_names_the_folder_hydra_named_by_the_clock(tmp_path):
    assert interrupts.resume_command(["-m", "seq_len=16,32"], tmp_path) == (
        f"python -m runners.sweep -m seq_len=16,32 hydra.sweep.dir={tmp_path}")
    given = ["-m", "backend=naive,sdpa", f"hydra.sweep.dir={tmp_path}", "metrics=[memory, accuracy]"]
    assert interrupts.resume_command(given, tmp_path) == (
        f"python -m runners.sweep -m backend=naive,sdpa hydra.sweep.dir={tmp_path} 'metrics=[memory, accuracy]'")


def test_a_sweep_without_an_ok_row_says_why_in_one_line():
    assert nothing_measured([{"status": "ok"}, {"status": "invalid", "error": "x"}]) == ""
    why = nothing_measured([{"status": "invalid", "error": "seq_len: expected an integer >= 1, got 0"}] * 2
                           + [{"status": "unsupported", "error": "Unsupported: no fp8 here"}])
    assert why == ("no point of the sweep could be measured (3 rows, none ok): seq_len: expected an integer >= 1, "
                   "got 0 (2 rows), and 1 other reason")


def test_hydras_deprecation_notes_are_hidden_unless_verbose(monkeypatch):
    note = ("Future Hydra versions will no longer change working directory at job runtime by default.\n"
            "See https://hydra.cc/docs/1.2/upgrades/1.1_to_1.2/changes_to_job_working_dir/ for more information.")
    monkeypatch.delenv(quiet.VERBOSE_ENV, raising=False)
    monkeypatch.setenv(quiet.CPP_LOG_ENV, "")  # before_hydra sets it: restored (absent) after the test
    monkeypatch.delenv(quiet.CPP_LOG_ENV)
    for argv, shown in ((["seq_len=16"], 0), (["verbose=true"], 1)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            quiet.before_hydra(argv)
            warnings.warn(note, UserWarning)
            warnings.warn("a real UserWarning", UserWarning)  # never hidden
        assert [str(w.message) for w in caught] == [note] * shown + ["a real UserWarning"]
    monkeypatch.delenv(quiet.VERBOSE_ENV, raising=False)


# Frees, while the memory profiler records, a block allocated before it started: c10's allocator notes it on fd 2.
PROFILER_NOTE_CODE = """
import sys
from runners import quiet
quiet.before_hydra(sys.argv[1:])  # as runners/sweep.py calls it, before anything imports torch
import torch
from selfattn.measure.memory import alloc_peak_bytes
old = [torch.randn(256, 256) for _ in range(4)]
print(alloc_peak_bytes(lambda: old.clear() or torch.randn(64, 64)))
"""
NOTE = "Memory block of unknown size was allocated before the profiling started"


@pytest.mark.parametrize("argv, shown", [([], False), (["verbose=true"], True)])
def test_the_profiler_note_is_shown_only_with_verbose(argv, shown, monkeypatch):
    env = {k: v for k, v in os.environ.items() if k not in (quiet.VERBOSE_ENV, quiet.CPP_LOG_ENV)}
    out = subprocess.run([sys.executable, "-c", PROFILER_NOTE_CODE, *argv], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env={**env, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) >= 64 * 64 * 4  # measured all the same
    assert (NOTE in out.stderr) == shown, out.stderr


# --- through the command line ----------------------------------------------------------------------

TYPOS = [
    ("seqlen=512", "seqlen: unknown key; did you mean seq_len?"),
    ("budget.timing=0.1", "budget.timing: unknown key; did you mean budget.timing_s?"),
    ("precision=float16", "precision: expected one of bf16, fp16, fp32, fp64, fp8_e4m3, fp8_e5m2, tf32, got "
                          "'float16'; did you mean fp16?"),
    ("experiment=quik", "experiment: expected one of additive, causal_mask, compiled, cross_gpu, decode, fp8, gqa, "
                        "heads, mask_functions, masks, positions, precision_accuracy, quadratic_cost, quick, rnn_vs_attention, "
                        "scaling_stability, smoke, training, triton, variants, got 'quik'; did you mean quick?"),
]


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    """The command lines this module expects refused (or measuring nothing), run side by side once: name ->
    (the finished process, its folder). Each is its own process and folder, as if run alone."""
    root = tmp_path_factory.mktemp("refused")
    folders = {name: root / f"case{i}" for i, name in enumerate([o for o, _ in TYPOS] + ["multirun", "nothing"])}
    calls = {override: functools.partial(run_sweep, override, "experiment=smoke",
                                         f"hydra.run.dir={folders[override] / 'run'}") for override, _ in TYPOS}
    calls["multirun"] = functools.partial(
        run_sweep, "-m", "backend=naive,chunkd,sdpa", "precision=fp32,float16", "+kernel=flash", "seq_len=16",
        "experiment=smoke", f"hydra.sweep.dir={folders['multirun'] / 'sweep'}", fake=True)
    calls["nothing"] = functools.partial(run_sweep, "-m", "seq_len=0,-1", "experiment=smoke",
                                         f"hydra.sweep.dir={folders['nothing']}", fake=True)
    return {name: (out, folders[name]) for name, out in run_at_once(calls).items()}


@pytest.mark.slow
@pytest.mark.parametrize("override, message", TYPOS)
def test_a_typo_in_a_single_run_is_one_line_and_exit_2(refused, override, message):
    out, folder = refused[override]
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [f"error: {message}"]
    assert not (folder / "run").exists()


@pytest.mark.slow
def test_a_multirun_refuses_every_bad_value_before_its_first_point(refused):
    out, folder = refused["multirun"]  # -m backend=naive,chunkd,sdpa precision=fp32,float16 +kernel=flash
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert [line.split(":")[1].strip() for line in lines[:-1]] == ["backend", "precision", "kernel"], lines
    assert "'chunkd'; did you mean chunked?" in lines[0] and "did you mean backend.kernel?" in lines[2]
    assert lines[-1] == "nothing was measured: 3 bad values on the command line"
    assert "Traceback" not in out.stderr and not (folder / "sweep").exists() and out.stdout == ""


@pytest.mark.slow
def test_a_sweep_where_no_point_could_be_measured_exits_1_saying_why(refused):
    out, folder = refused["nothing"]  # -m seq_len=0,-1
    assert out.returncode == 1, out.stderr[-2000:]
    assert [r["status"] for r in read_csv(folder / "results.csv")] == ["invalid", "invalid"]
    assert out.stderr.strip().splitlines()[-1] == (
        "error: no point of the sweep could be measured (2 rows, none ok): seq_len: expected an integer >= 1, got 0, "
        "and 1 other reason")


@pytest.mark.slow
def test_the_sweep_ends_with_the_table_and_runners_rows_prints_it_again(tmp_path):
    env = {"COLUMNS": "120"}
    runs = run_at_once({  # the multirun and the single run have folders of their own: side by side
        "sweep": functools.partial(run_sweep, "-m", "backend=naive,sdpa", "seq_len=16,32", "metrics=[memory]",
                                   "experiment=smoke", f"hydra.sweep.dir={tmp_path}", fake=True, env=env),
        "single": functools.partial(run_sweep, "seq_len=16", "experiment=smoke", f"hydra.run.dir={tmp_path / 'one'}",
                                    fake=True)})
    out, single = runs["sweep"], runs["single"]
    assert out.returncode == 0, out.stderr[-2000:]
    table = out.stdout.split("\n\n")[1]  # between the progress lines and the results line
    header, *body = table.splitlines()
    assert header.split() == ["seq_len", "naive", "sdpa"] and [r.split()[0] for r in body] == ["16", "32"]
    # the fake's time: n^2 d 1e-6 ms for either back end (a tie: the first is marked); its memory: 4 n^2 bytes
    # sdpa ran: naive's cell says its speed-up over sdpa (a tie: 1.00×)
    assert body[1].split() == ["32", "*0.00819", "ms", "·", "4.00", "KiB", "·", "1.00×", "0.00819", "ms", "·", "4.00",
                               "KiB"], body
    assert "4 rows: 4 ok." in out.stdout and f"results: 4 rows (4 ok) -> {tmp_path / 'results.csv'}" in out.stdout
    again = subprocess.run(["python", "-m", "runners.rows", str(tmp_path), "--table"], cwd=ROOT, capture_output=True,
                           text=True, env={**os.environ, **env}, timeout=60)
    assert again.returncode == 0, again.stderr
    assert table in again.stdout
    assert single.stdout.splitlines()[-1] == (
        f"row: {tmp_path / 'one' / 'row.json'}; results: {tmp_path / 'one' / 'results.csv'}")


def interrupt_and_resume(sweep, sig) -> dict:
    """A fake sweep of 8 points stopped by `sig` after its first row, then the same command again: what each
    step said and left (the folder as the interrupt left it, before the resume)."""
    args = ["-m", "seq_len=16,24,32,40,48,56,64,72", "device=cpu", "experiment=smoke", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen(sweep_cmd(*args, fake=True), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "FAKE_MEASURE_SLEEP_S": "0.4", "HYDRA_FULL_ERROR": "0"})
    deadline = time.time() + 60
    while not list(sweep.glob("*/row.json")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    csv_rows = read_csv(sweep / "results.csv") if (sweep / "results.csv").exists() else []
    row_files = len(list(sweep.glob("*/row.json")))
    return {"args": args, "returncode": proc.returncode, "stderr": stderr, "csv_rows": csv_rows, "row_files": row_files,
            "resumed": run_sweep(*args, fake=True), "final": read_csv(sweep / "results.csv")}


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """SIGINT's and SIGTERM's sweeps, each in its own folder, side by side: signal -> interrupt_and_resume's dict."""
    root = tmp_path_factory.mktemp("interrupted")
    return run_at_once({sig: functools.partial(interrupt_and_resume, root / sig.name / "sweep", sig)
                        for sig in (signal.SIGINT, signal.SIGTERM)})


@pytest.mark.slow
@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_sweep_ends_in_one_line_and_resumes_in_one_line(interrupted, sig, status):
    run = interrupted[sig]
    stderr, args = run["stderr"], run["args"]
    assert run["returncode"] == status, stderr[-2000:]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    done = len(run["csv_rows"])  # rebuilt from every row written: none half there
    assert 1 <= done < 8 and run["row_files"] == done
    assert stderr.strip().splitlines() == [
        f"interrupted after {done} of 8 points; the same command resumes: python -m runners.sweep {' '.join(args)}"]

    resumed = run["resumed"]
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"{done} of 8 points already measured, measuring {8 - done}\n" in resumed.stdout
    assert "skipped" not in resumed.stdout and resumed.stdout.count("[") == 8 - done  # a line per point measured
    assert len({r["point_id"] for r in run["final"]}) == 8


@pytest.mark.slow
def test_the_allocator_profilers_note_shows_only_with_verbose(tmp_path):
    """A real measurement: chunked at n=512 frees, under the memory profiler, blocks made before it started."""
    args = ["backend=chunked", "seq_len=512", "heads=4", "metrics=[memory]", "experiment=smoke"]
    runs = run_at_once({  # two processes, two folders: side by side
        "quiet": functools.partial(run_sweep, *args, f"hydra.run.dir={tmp_path / 'quiet'}", timeout=120),
        "loud": functools.partial(run_sweep, *args, "verbose=true", f"hydra.run.dir={tmp_path / 'loud'}", timeout=120)})
    quiet_run, loud = runs["quiet"], runs["loud"]
    assert quiet_run.returncode == 0 and loud.returncode == 0, quiet_run.stderr + loud.stderr
    assert "Memory block of unknown size" in loud.stderr  # the control: the note is there to hide
    assert quiet_run.stderr == ""


def test_in_the_launching_process_skipped_jobs_are_counted_elsewhere_each_says_so(tmp_path, fake_measure, capsys):
    from runners import job

    base = {"name": "t", "backend": {"name": "naive"}, "precision": {"name": "fp32"}, "device": "cpu", "seq_len": 16,
            "head_dim": 8, "heads": 1, "budget": {"timing_s": 0.01}, "wandb": {"mode": "disabled"}, "metrics": []}

    def ctx(num):
        return job.JobContext(job_dir=tmp_path / str(num), sweep_dir=tmp_path, multirun=True, index=num, total=3)

    job.run_job(base, ctx(0))
    capsys.readouterr()
    job.run_job(base, ctx(1))  # a job in a process of its own (SLURM, joblib): its own line
    assert "skipped: the sweep folder already has this point (ok)" in capsys.readouterr().out
    interrupts.sweep_started(tmp_path, 3)  # the launching process: counted, said once before the next point
    job.run_job(base, ctx(1))
    assert capsys.readouterr().out == "" and progress.SKIPPED.pending == {"ok": 1}
    job.run_job({**base, "seq_len": 24}, ctx(2))
    assert capsys.readouterr().out.splitlines()[0] == "1 of 3 points already measured, measuring 2"


def test_a_resumed_sweeps_eta_averages_over_the_points_it_measured(tmp_path, fake_measure, capsys, monkeypatch):
    from runners import job

    base = {"name": "t", "backend": {"name": "naive"}, "precision": {"name": "fp32"}, "device": "cpu", "seq_len": 16,
            "head_dim": 8, "heads": 1, "budget": {"timing_s": 0.01}, "wandb": {"mode": "disabled"}, "metrics": []}
    now = 1000.0
    monkeypatch.setattr(progress.time, "time", lambda: now)
    interrupts.sweep_started(tmp_path, 12)
    for num in range(9):  # measured before: the folder has them
        job.run_job({**base, "seq_len": 16 + num}, job.JobContext(job_dir=tmp_path / str(num), sweep_dir=tmp_path,
                                                                   multirun=True, index=num, total=12))
    monkeypatch.setattr(progress, "SKIPPED", progress.Skipped())
    capsys.readouterr()
    started = now - 10.0  # the resumed sweep: 10 s in, its first point (the 10th) done
    for num in range(10):
        job.run_job({**base, "seq_len": 16 + num}, job.JobContext(
            job_dir=tmp_path / str(num), sweep_dir=tmp_path, multirun=True, index=num, total=12, started_unix=started))
    # 2 left at 10 s each; counting the 9 skipped as done would say 10 s / 10 points x 2 = 2 s
    assert capsys.readouterr().out.splitlines()[-1].endswith("(ETA 20s)")


def test_a_signal_while_the_sweep_starts_is_one_line_not_a_traceback():
    # torch and Hydra take seconds to import before the sweep's handlers are in place: Ctrl-C there is a
    # new user's first (a command typed wrong); the same one line and 130/143 as later, nothing measured
    import signal
    import subprocess
    import sys

    for signum in (signal.SIGINT, signal.SIGTERM):
        code = ("from runners import interrupts; interrupts.before_run(); import os, signal, time; "
                f"os.kill(os.getpid(), {int(signum)}); time.sleep(30)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                             restore_signals=True)
        assert out.returncode == 128 + int(signum), out
        assert out.stderr == "interrupted before the first point; nothing was measured\n", out.stderr


WHILE_COMPOSING = '''
import os, runpy, signal, sys
from hydra.core.override_parser.overrides_parser import OverridesParser

real = OverridesParser.parse_overrides
calls = []

def parse_overrides(self, *args, **kwargs):  # SIGTERM in the launcher's composition of the second job's config
    if sys._getframe(1).f_code.co_name == "job_config":
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
            open({mark!r}, "w").write("composition went on")
    return real(self, *args, **kwargs)

OverridesParser.parse_overrides = parse_overrides  # (Hydra reloads its plugins' modules: the launcher's own is
sys.argv = [{fake!r}, *{args!r}]                    # replaced by then, Hydra's parser class is not)
runpy.run_path({fake!r}, run_name="__main__")
'''


@pytest.mark.slow
def test_a_signal_while_a_job_is_composed_waits_for_the_job_and_is_one_line(tmp_path):
    """SIGTERM inside the launcher's composition of a job's config (OmegaConf in the middle of setting a value)
    waits until the job starts, then ends the sweep as anywhere else: one line, 143. Raised at once inside
    OmegaConf, it left a list half set, and the context manager's exit raised AttributeError in its place."""
    import subprocess
    import sys

    from runner_helpers import FAKE, ROOT

    sweep, mark = tmp_path / "sweep", tmp_path / "composed"
    args = ["-m", "seq_len=16,24,32", "device=cpu", "experiment=smoke", f"hydra.sweep.dir={sweep}"]
    script = tmp_path / "sweep_signalled.py"
    script.write_text(WHILE_COMPOSING.format(mark=str(mark), fake=str(FAKE), args=args))
    out = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "HYDRA_FULL_ERROR": "0"})
    assert mark.exists(), out.stderr[-2000:]  # the composition finished after the signal came
    assert out.returncode == 143, out.stderr[-2000:]
    assert out.stderr.strip().splitlines() == [
        f"interrupted after 1 of 3 points; the same command resumes: python -m runners.sweep {' '.join(args)}"]
    assert len(read_csv(sweep / "results.csv")) == 1
