"""End to end: a path plugin and an installed entry-point plugin in one multirun beside a built-in.

The example package (examples/selfattn-fp32acc) is installed with pip into a folder of this test
(`--target`, on the sweep's PYTHONPATH: the entry point is read from the metadata pip writes), a
function is given by path, a plugin that raises runs in the same sweep; then the report draws them,
and the listing names their sources. A rerun by path of the installed plugin resumes its points.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from runner_helpers import ROOT, run_at_once, run_sweep, write_path_plugin


def install_example(tmp_path):
    """pip install examples/selfattn-fp32acc into tmp_path/site (a copy: the build writes beside the sources)."""
    source = tmp_path / "selfattn-fp32acc"
    shutil.copytree(ROOT / "examples" / "selfattn-fp32acc", source, ignore=shutil.ignore_patterns("__pycache__"))
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(site), str(source)], check=True, capture_output=True, timeout=300)
    return site


@pytest.mark.slow
def test_path_and_entry_point_plugins_run_beside_a_builtin_and_are_drawn(tmp_path):
    site = install_example(tmp_path)
    plugins = write_path_plugin(tmp_path / "plugins")
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(site), str(plugins)])}
    sweep = tmp_path / "sweep"
    runs = run_at_once({  # the listing reads, the sweep writes its own folder: side by side
        "listing": functools.partial(subprocess.run, [sys.executable, "-m", "selfattn.backends", "my_attn:quick"],
                                     cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=120),
        "sweep": functools.partial(run_sweep, "-m", "backend=sdpa,fp32acc,my_attn:quick,my_attn:explodes",
                                   "seq_len=32,64", "causal=true,false", "window=null,8", "experiment=smoke",
                                   "report=true", f"hydra.sweep.dir={sweep}", env=env, timeout=600)})
    listing, out = runs["listing"], runs["sweep"]
    lines = {line.split()[0]: line for line in listing.stdout.splitlines()[1:]}
    assert "entry point" in lines["fp32acc"] and "selfattn-fp32acc" in lines["fp32acc"], listing.stdout
    assert "path" in lines["quick"] and "cpu: yes" in lines["quick"], listing.stdout

    # the exploding plugin's points failed: exit 1 and one line (docs/usage.md's exit statuses)
    assert out.returncode == 1, out.stderr[-3000:]
    assert "error: 8 points failed (8 error): their `error` column says why" in out.stderr.splitlines()
    rows = pd.read_csv(sweep / "results.csv")
    assert len(rows) == 32
    by = {name: part for name, part in rows.groupby("backend")}
    assert set(by) == {"sdpa", "fp32acc", "quick", "explodes"}
    # the installed plugin does every mask: every row ok, exact against float64, every column sdpa's rows have
    fp32acc, sdpa = by["fp32acc"], by["sdpa"]
    assert (fp32acc["status"] == "ok").all() and (fp32acc["backend_source"] == "entry_point").all()
    assert fp32acc["max_abs_err"].max() < 1e-5 and (fp32acc["kernel"] == "fp32-accumulate").all()
    filled = lambda part: {c for c in part.columns if part[c].notna().all()}  # noqa: E731
    assert filled(sdpa) - filled(fp32acc) <= {"backend_path"}, filled(sdpa) - filled(fp32acc)
    assert (fp32acc["mem_model"] == "assumed").all() and (sdpa["mem_model"] == "declared").all()
    # the path plugin: its name, its path, unsupported where it declared no window, ok elsewhere
    quick = by["quick"]
    assert (quick["backend_path"] == "my_attn:quick").all() and (quick["backend_source"] == "path").all()
    assert (quick[quick["window"].isna()]["status"] == "ok").all()
    windowed = quick[quick["window"].notna()]
    assert (windowed["status"] == "unsupported").all() and windowed["error"].str.contains("mask window").all()
    # the plugin that raises: its rows say so in one line, and the sweep went on past them
    assert (by["explodes"]["status"] == "error").all() and by["explodes"]["error"].str.contains("kernel exploded").all()
    report = (sweep / "report" / "report.md").read_text() if (sweep / "report").is_dir() else ""
    assert report, os.listdir(sweep)
    assert "fp32acc" in report and "quick" in report

    # the installed plugin by path: the same name, so the same point ids: every point resumes, none re-measured
    before = (sweep / "results.csv").read_text()
    again = run_sweep("-m", "backend=selfattn_fp32acc:fp32acc", "seq_len=32,64", "causal=true,false", "window=null,8",
                      "experiment=smoke", f"hydra.sweep.dir={sweep}", env=env, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "all 8 points already measured, nothing to measure" in again.stdout, again.stdout  # one line for them all
    assert not re.search(r"^\[\d+/8\]", again.stdout, re.M), again.stdout  # no point measured again
    assert (sweep / "results.csv").read_text() == before

