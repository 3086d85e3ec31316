"""`python -m runners.sweep` end to end, in subprocesses: multirun, kill + resume, invalid values, and
wandb's offline run read back (the parallel launchers: test_sweep_parallel.py). Every run is
`experiment=smoke` (tiny points, least effort): the runner is under test here, not the timings."""

from __future__ import annotations

import csv
import functools
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from runner_helpers import ROOT, run_at_once, run_sweep, sweep_cmd
from wandb_offline import read_run

pytestmark = pytest.mark.slow


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


MEASURED = {  # sweeps that measure real points, each in a folder of its own
    "tiny": ("-m", "backend=naive,sdpa,chunked", "seq_len=16,32", "d_model=8", "heads=1,3", "experiment=smoke"),
    "refused_point": ("-m", "backend=naive", "seq_len=0,abc,16", "experiment=smoke"),
    "scores": ("-m", "backend=naive,flex", "score=dot,additive", "pos_enc=none,sinusoidal,rope", "seq_len=16",
               "experiment=smoke"),
}


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """MEASURED's sweeps run side by side once: name -> (the finished process, its sweep folder)."""
    folders = {name: tmp_path_factory.mktemp(name) for name in MEASURED}
    calls = {name: functools.partial(run_sweep, *args, f"hydra.sweep.dir={folders[name]}", timeout=180)
             for name, args in MEASURED.items()}
    return {name: (out, folders[name]) for name, out in run_at_once(calls).items()}


def test_tiny_multirun_writes_every_row_once_with_invalid_points_as_rows(measured):
    out, folder = measured["tiny"]
    assert out.returncode == 0, out.stderr[-2000:]
    table = read_csv(folder / "results.csv")
    assert len(table) == 12 and len({r["point_id"] for r in table}) == 12
    statuses = sorted(r["status"] for r in table)
    assert statuses == ["invalid"] * 6 + ["ok"] * 6, statuses
    assert {r["error"] for r in table if r["status"] == "invalid"} == {
        "heads: 3 does not divide d_model=8 (head_dim = d_model / heads)"}
    ok = [r for r in table if r["status"] == "ok"]
    assert all(float(r["time_ms"]) > 0 and float(r["job_wall_s"]) >= float(r["measure_s"]) > 0 for r in ok)
    assert {r["backend"] for r in ok} == {"naive", "sdpa", "chunked"}
    assert "[12/12] " in out.stdout and "results: 12 rows (6 ok, 6 invalid)" in out.stdout


def test_a_refused_point_shows_its_values_as_typed_in_the_csv_and_progress_line(measured):
    """A sweep with a bad value: `-m backend=naive seq_len=0,abc,16` (0 is out of range, abc of the wrong type)."""
    out, folder = measured["refused_point"]
    assert out.returncode == 0, out.stderr[-2000:]
    table = {r["seq_len"]: r for r in read_csv(folder / "results.csv")}
    assert {n: r["status"] for n, r in table.items()} == {"0": "invalid", "abc": "invalid", "16": "ok"}
    assert "naive seq_len=0 fp32 -> invalid: seq_len: expected an integer >= 1, got 0" in out.stdout
    assert "naive seq_len=abc fp32 -> invalid: seq_len: expected an integer >= 1, got 'abc'" in out.stdout
    assert "analysis:" not in out.stderr  # loading the refused rows for the report warns of nothing


UNKNOWN_KEYS = [
    ("+seqlen=4096", "seqlen: unknown key; did you mean seq_len?"),
    ("+kernel=flash", "kernel: unknown key; did you mean backend.kernel?"),  # what Hydra suggests after kernel=flash
]
MISSPELT = [
    ("pos_enc=rop", "pos_enc: expected one of none, sinusoidal, learned, rope, got 'rop'; did you mean rope?"),
    ("score=additve", "score: expected one of dot, additive, got 'additve'; did you mean additive?"),
]


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    """This module's command lines that must be refused before measuring, run side by side once: name ->
    (the finished process, its folder). Each is its own process and folder, as if run alone."""
    root = tmp_path_factory.mktemp("refused")
    singles = ["seq_len=0"] + [o for o, _ in UNKNOWN_KEYS + MISSPELT]
    folders = {name: root / f"case{i}" for i, name in enumerate(singles + ["multirun"])}
    calls = {name: functools.partial(run_sweep, name, "experiment=smoke", f"hydra.run.dir={folders[name] / 'single'}")
             for name in singles}
    calls["multirun"] = functools.partial(run_sweep, "-m", "+seqlen=4096,8", "experiment=smoke",
                                          f"hydra.sweep.dir={folders['multirun']}")
    return {name: (out, folders[name]) for name, out in run_at_once(calls).items()}


def test_single_run_with_a_bad_value_exits_nonzero_with_one_line(refused):
    out, folder = refused["seq_len=0"]
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == ["error: seq_len: expected an integer >= 1, got 0"]
    assert not (folder / "single" / "results.csv").exists()


@pytest.mark.parametrize("override, message", UNKNOWN_KEYS)
def test_unknown_key_is_refused_never_measured(refused, override, message):
    out, folder = refused[override]
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [f"error: {message}"]
    assert not (folder / "single" / "results.csv").exists()


def test_unknown_key_in_a_multirun_is_refused_before_the_first_point(refused):
    out, folder = refused["multirun"]  # -m +seqlen=4096,8
    assert out.returncode == 2 and out.stderr.strip().splitlines() == ["error: seqlen: unknown key; did you mean seq_len?"]
    assert not folder.joinpath("results.csv").exists()


def test_metrics_in_a_single_run_and_a_multirun_and_a_resume_that_asks_for_more(tmp_path):
    sweep = tmp_path / "sweep"
    tables = []  # results.csv after the first sweep and after the resume that asks for more

    def first_again_fewer():  # one sweep folder: in order
        runs = [run_sweep("-m", "seq_len=16,32", "metrics=[accuracy]", "experiment=smoke", f"hydra.sweep.dir={sweep}")]
        tables.append(read_csv(sweep / "results.csv") if runs[0].returncode == 0 else [])
        runs.append(run_sweep("-m", "seq_len=16,32", "metrics=[accuracy,stability]", "experiment=smoke",
                              f"hydra.sweep.dir={sweep}"))
        tables.append(read_csv(sweep / "results.csv") if runs[1].returncode == 0 else [])
        runs.append(run_sweep("-m", "seq_len=16,32", "metrics=[stability]", "experiment=smoke",
                              f"hydra.sweep.dir={sweep}"))
        return runs

    runs = run_at_once({  # the single runs and the typo have folders of their own: side by side with the sweep
        "single": functools.partial(run_sweep, "metrics=[]", "experiment=smoke",
                                    f"hydra.run.dir={tmp_path / 'single'}"),
        "bad": functools.partial(run_sweep, "metrics=[memory,stabilty]", "experiment=smoke",
                                 f"hydra.run.dir={tmp_path / 'bad'}"),
        "typo": functools.partial(run_sweep, "-m", "seq_len=16", "metrics=[acuracy]", "experiment=smoke",
                                  f"hydra.sweep.dir={tmp_path / 'typo'}"),
        "sweep": first_again_fewer})
    single, bad, typo, (first, again, fewer) = runs["single"], runs["bad"], runs["typo"], runs["sweep"]
    assert single.returncode == 0, single.stderr[-2000:]
    (row,) = read_csv(tmp_path / "single" / "results.csv")
    assert row["status"] == "ok" and row["metrics"] == "none" and row["peak_mem_bytes"] == row["rel_rms_err"] == ""
    assert float(row["time_ms"]) > 0
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == ["error: metrics: unknown metric 'stabilty'; did you mean stability?"]

    assert first.returncode == 0, first.stderr[-2000:]
    table = tables[0]
    assert [r["metrics"] for r in table] == ["accuracy", "accuracy"]
    assert all(r["rel_rms_err"] != "" and r["logit_std"] == "" for r in table)
    ids = {r["point_id"] for r in table}
    assert again.returncode == 0 and "skipped" not in again.stdout, again.stdout
    table = tables[1]
    assert {r["point_id"] for r in table} == ids and [r["metrics"] for r in table] == ["accuracy,stability"] * 2
    assert all(r["logit_std"] != "" for r in table)
    assert "all 2 points already measured, nothing to measure" in fewer.stdout, fewer.stdout
    assert typo.returncode == 1, typo.stderr[-2000:]  # no point could be measured
    (refused,) = read_csv(tmp_path / "typo" / "results.csv")
    assert refused["status"] == "invalid" and refused["error"] == "metrics: unknown metric 'acuracy'; did you mean accuracy?"


def test_killed_sweep_keeps_finished_rows_and_resumes_without_duplicates(tmp_path):
    args = ["-m", "seq_len=16,24,32,40,48,56,64,72", "causal=false,true", "device=cpu", "heads=1", "experiment=smoke",
            f"hydra.sweep.dir={tmp_path}"]
    env = {**os.environ, "FAKE_MEASURE_SLEEP_S": "0.3"}
    proc = subprocess.Popen(sweep_cmd(*args, fake=True), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 40
    while len(list(tmp_path.glob("*/row.json"))) < 4 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = len(list(tmp_path.glob("*/row.json")))
    assert 4 <= finished < 16, "the sweep must be killed half way"
    table = read_csv(tmp_path / "results.csv")  # complete rows only, maybe one behind the files
    assert finished - 1 <= len(table) <= finished and all(r["status"] == "ok" and r["schema_version"] for r in table)

    out = run_sweep(*args, fake=True)
    assert out.returncode == 0, out.stderr[-2000:]
    table = read_csv(tmp_path / "results.csv")
    assert len(table) == 16 and len({r["point_id"] for r in table}) == 16
    assert f"{finished} of 16 points already measured, measuring {16 - finished}" in out.stdout


# --- wandb: read the offline run's .wandb log back (wandb.Api is online-only) ----------------

@pytest.fixture(scope="module")
def wandb_sweeps(tmp_path_factory):
    """A fake two-point sweep with wandb offline, a run per process and a run per point, side by side:
    per_point -> (the finished process, its sweep folder)."""
    folders = {per_point: tmp_path_factory.mktemp(f"wandb-per-point-{per_point}") for per_point in (False, True)}
    calls = {per_point: functools.partial(
        run_sweep, "-m", "backend=naive,sdpa", "seq_len=16", "device=cpu", "experiment=smoke", "wandb.mode=offline",
        f"wandb.run_per_point={str(per_point).lower()}", f"hydra.sweep.dir={folder}", fake=True,
        env={"WANDB_MODE": "offline"}) for per_point, folder in folders.items()}
    return {per_point: (out, folders[per_point]) for per_point, out in run_at_once(calls).items()}


@pytest.mark.parametrize("per_point", [False, True], ids=["run-per-process", "run-per-point"])
def test_wandb_offline_run_holds_the_logged_metrics(wandb_sweeps, per_point):
    out, folder = wandb_sweeps[per_point]
    assert out.returncode == 0, out.stderr[-2000:]
    runs = [read_run(p) for p in sorted(folder.glob("wandb/offline-run-*/run-*.wandb"))]
    table = read_csv(folder / "results.csv")
    by_backend = {r["backend"]: r for r in table}
    group = f"smoke/{folder.name}"
    results = [r for r in runs if any("results/_type" in h for h in r["history"])]
    assert len(results) == 1  # the whole table, once, at the end of the multirun
    assert any(h.get("results/nrows") == 2 for h in results[0]["history"])
    if per_point:
        points = [r for r in runs if r["job_type"] in ("naive", "sdpa")]
        assert sorted(r["job_type"] for r in points) == ["naive", "sdpa"]
        for run in points:
            assert run["group"] == group and run["config"]["seq_len"] == 16
            assert run["summary"]["time_ms"] == pytest.approx(float(by_backend[run["job_type"]]["time_ms"]))
    else:
        (run,) = [r for r in runs if r["job_type"] == "sweep"]
        assert run is results[0] and run["group"] == group
        steps = [h for h in run["history"] if "time_ms" in h]
        assert sorted(h["backend"] for h in steps) == ["naive", "sdpa"]
        for step in steps:
            assert step["time_ms"] == pytest.approx(float(by_backend[step["backend"]]["time_ms"]))
            assert step["point_id"] == by_backend[step["backend"]]["point_id"]


def test_a_sweep_with_its_report_leaves_one_report_run_holding_every_figure_the_claims_and_the_artifact(tmp_path):
    """The whole report (every figure the rows make) through the real CLI, read back from the offline run."""
    sweep = tmp_path / "sweep"
    out = run_sweep("-m", "backend=naive,sdpa,chunked", "seq_len=16,32,64", "causal=false,true", "experiment=smoke",
                    "report=true", "wandb.mode=offline", f"hydra.sweep.dir={sweep}", fake=True, timeout=300,
                    env={"WANDB_MODE": "offline", "WANDB_DATA_DIR": str(tmp_path / "data"),
                         "WANDB_CACHE_DIR": str(tmp_path / "cache"), "WANDB_CONFIG_DIR": str(tmp_path / "config")})
    assert out.returncode == 0, out.stderr[-2000:]
    runs = [read_run(p) for p in sorted(sweep.glob("wandb/offline-run-*/run-*.wandb"))]
    assert sorted(r["job_type"] for r in runs) == ["report", "sweep"]  # the points' run and the report's
    (run,) = [r for r in runs if r["job_type"] == "report"]
    assert {r["group"] for r in runs} == {f"smoke/{sweep.name}"}
    text = (sweep / "report" / "report.md").read_text()
    embedded = re.findall(r"!\[[^\]]*\]\((figures/[^)]+\.png)\)", text)
    assert len(embedded) >= 3  # time, memory, throughput at least
    for link in embedded:
        key = f"figures/{Path(link).stem}"
        (step,) = [h for h in run["history"] if f"{key}/path" in h]
        logged = run["folder"] / "files" / step[f"{key}/path"]
        assert logged.read_bytes() == (sweep / "report" / link).read_bytes()
    assert any(h.get("claims/_type") == "table-file" for h in run["history"])
    with open(sweep / "report" / "claims.csv", newline="") as f:
        keys = [r["key"] for r in csv.DictReader(f)]
    assert keys and all(f"claims/{k}" in run["summary"] for k in keys)
    ((kind, contents),) = [v for v in run["artifacts"].values() if v[0] == "sweep-results"]
    assert {"results.csv", "report.md", "claims.csv", "exponents.csv", *embedded} <= set(contents)
    assert contents["results.csv"].read_bytes() == (sweep / "results.csv").read_bytes()


def test_scores_and_encodings_sweep_with_unsupported_and_invalid_rows_naming_the_key(measured):
    out, folder = measured["scores"]
    assert out.returncode == 0, out.stderr[-2000:]
    table = read_csv(folder / "results.csv")
    assert len(table) == 12 and len({r["point_id"] for r in table}) == 12
    by = {(r["backend"], r["score"], r["pos_enc"]): r for r in table}
    assert by[("naive", "additive", "none")]["status"] == "ok" and by[("naive", "dot", "rope")]["status"] == "ok"
    assert float(by[("naive", "dot", "rope")]["rope_shift_max_abs_diff"]) < 1e-5
    assert by[("flex", "additive", "none")]["status"] == "unsupported"
    assert by[("flex", "additive", "none")]["error"].startswith(
        "Unsupported: backend flex does not support score=additive (declared: dot)")
    assert by[("naive", "dot", "sinusoidal")]["status"] == "invalid"
    assert by[("naive", "dot", "sinusoidal")]["error"] == (
        "pos_enc: sinusoidal is added to the layer's input X, so it needs scope=layer, got scope=core")
    assert by[("naive", "additive", "rope")]["error"].startswith("pos_enc: RoPE rotates q and k for a dot product")


@pytest.mark.parametrize("override, message", MISSPELT)
def test_a_single_run_with_a_misspelt_score_or_encoding_says_which_was_meant(refused, override, message):
    out, _ = refused[override]
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [f"error: {message}"]
