"""End to end: a plugin's required environment and speed hint, through the listing and a multirun.

The plugins are tests/runners/declaring.py, given by path, run in the isolated worker (the default)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from runner_helpers import ROOT, run_at_once, run_sweep

HERE = Path(__file__).resolve().parent


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return {**base, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)]), **extra}


def listing(*names: str, **extra: str):
    return subprocess.run([sys.executable, "-m", "selfattn.backends", *names], cwd=ROOT, env=env(**extra),
                          capture_output=True, text=True, timeout=180)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_missing_environment_and_a_speed_hint_through_the_listing_and_a_sweep(tmp_path):
    sweep = tmp_path / "sweep"
    runs = run_at_once({
        "unset": functools.partial(listing, "declaring:interpreted"),
        "set": functools.partial(listing, "declaring:interpreted", TRITON_INTERPRET="1"),
        "broken": functools.partial(listing, "declaring:no_such_function"),
        "sweep": functools.partial(run_sweep, "-m", "backend=naive,declaring:interpreted,declaring:crawls,"
                                   "declaring:hinted", "experiment=smoke", f"hydra.sweep.dir={sweep}",
                                   env={"PYTHONPATH": env()["PYTHONPATH"]}, timeout=400)})
    line = lambda out: [r for r in out.stdout.splitlines() if r.startswith("interpreted")][0]  # noqa: E731
    assert runs["unset"].returncode == 0 and "cpu: no (needs TRITON_INTERPRET=1)" in line(runs["unset"])
    assert runs["set"].returncode == 0 and "cpu: yes" in line(runs["set"])
    assert runs["broken"].returncode == 1, runs["broken"].stdout  # a named plugin that cannot load
    assert "did you mean" in runs["broken"].stdout or "no_such_function" in runs["broken"].stdout

    out = runs["sweep"]
    assert out.returncode in (0, 1), out.stderr[-3000:]  # its status for refusals belongs to the sweep's end
    rows = pd.read_csv(sweep / "results.csv").set_index("backend")
    assert rows.loc["interpreted", "status"] == "unsupported"
    assert "needs TRITON_INTERPRET=1 on cpu (here: TRITON_INTERPRET unset)" in rows.loc["interpreted", "error"]
    assert rows.loc["crawls", "status"] == "skipped_budget", rows.loc["crawls", "error"]
    assert "exceeds max_point_s" in rows.loc["crawls", "error"]  # before its first call, which would have failed
    assert rows.loc["hinted", "status"] == "ok" and rows.loc["naive", "status"] == "ok"
    assert rows.loc["hinted", "predicted_time_ms"] == pytest.approx(1 + rows.loc["hinted", "flops"] / 1e6)
