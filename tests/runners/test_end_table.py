"""The end table answers "my kernel against theirs" through the real command line: six back ends, two of them
plugins from a file, on an 80-column terminal keep every column (the table splits, it drops none), and
`python -m runners.rows DIR --table --baseline sdpa` prints each cell's speed-up over sdpa, which matches the rows
of results.csv; report.md's table carries the same speed-ups."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pandas as pd
import pytest

from analysis.noise import FEWER_THREADS_MARK
from runner_helpers import ROOT

PLUGINS = '''
import torch
import torch.nn.functional as F
from selfattn.backends import backend


def _gqa(q, k, v):
    return (t.repeat_interleave(q.shape[1] // k.shape[1], 1) for t in (k, v))


@backend(masks=("causal",), kernel_label="sdpa-is_causal")
def hf_sdpa_iscausal(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    k, v = _gqa(q, k, v)  # is_causal aligns top-left: the same as bottom-right at q_len == seq_len, as here
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


@backend(masks=("causal",), kernel_label="sdpa-bool-mask")
def hf_sdpa_mask(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    k, v = _gqa(q, k, v)
    m, n = q.shape[2], k.shape[2]
    keep = torch.ones(m, n, dtype=torch.bool, device=q.device).tril(n - m) if causal else None
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=scale)
'''
BACKENDS = ["naive", "sdpa", "chunked", "flex", "hf_sdpa_iscausal", "hf_sdpa_mask"]
# time (marked where timed on fewer threads than the table's others) · memory · speed-up
CELL = re.compile(rf"(\*?)([0-9.]+) ms{re.escape(FEWER_THREADS_MARK)}?(?: · [0-9.]+ (?:[KMG]i)?B)?(?: · ([0-9.]+)×)?")


def run(args, cwd, timeout, columns=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HYDRA_FULL_ERROR": "0"}
    if columns:
        env["COLUMNS"] = str(columns)  # what the terminal's width reads (shutil.get_terminal_size)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def tables(text: str) -> dict[tuple[str, str], tuple[float | None, float | None]]:
    """{(seq_len, back end): (time_ms, speed-up)} from every part of a printed table (None: a cell without one, such
    as a status where a busy machine made a point fail)."""
    cells: dict[tuple[str, str], tuple[float | None, float | None]] = {}
    header: list[str] = []
    for line in text.splitlines():
        if line.startswith("seq_len"):
            header = line.split()
        elif header and line[:1].isdigit():
            found = re.split(r"\s{2,}", line.strip())  # cells hold single spaces ("0.120 ms · 0.144×")
            assert len(found) == len(header), (line, header)
            for name, cell in zip(header[1:], found[1:]):
                match = CELL.fullmatch(cell)
                time, speedup = (match.group(2), match.group(3)) if match else (None, None)
                cells[(found[0], name)] = (float(time) if time else None, float(speedup) if speedup else None)
        elif not line.strip():
            header = []
    return cells


@pytest.mark.slow
def test_six_back_ends_with_two_plugins_at_80_columns_keep_the_plugins_and_their_speed_ups_match_the_rows(tmp_path):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "hf.py").write_text(PLUGINS)
    sweep = tmp_path / "sweep"
    backends = ",".join([*BACKENDS[:4], "plugins/hf.py:hf_sdpa_iscausal", "plugins/hf.py:hf_sdpa_mask"])
    out = run(["-m", "runners.sweep", "-m", f"backend={backends}", "seq_len=64,128", "causal=true",
               "experiment=smoke", "report=true", f"hydra.sweep.dir={sweep}"], tmp_path, timeout=900, columns=80)
    assert out.returncode in (0, 1), out.stderr[-3000:]  # 1: a point a busy machine made fail (its row says so)
    # the sweep's own end table (sdpa ran: the speed-ups are over it by default) kept both plugins
    end = out.stdout[out.stdout.index("\n\n"):out.stdout.index("results: ")]
    assert max(map(len, end.splitlines())) <= 80, end
    assert {name for _, name in tables(end)} == set(BACKENDS), end

    listed = run(["-m", "runners.rows", str(sweep), "--table", "--baseline", "sdpa"], tmp_path, timeout=300, columns=80)
    assert listed.returncode == 0, listed.stderr
    table = listed.stdout.split(f"{sweep}:", 1)[1]
    assert max(map(len, table.splitlines())) <= 80 and "left out to fit 80" not in table, table
    cells = tables(table)
    assert {name for _, name in cells} == set(BACKENDS), table
    rows = pd.read_csv(sweep / "results.csv")
    assert len(rows) == 12 and (rows["status"] == "ok").sum() >= 10, rows[["backend", "status", "error"]]
    median = rows[rows["status"] == "ok"].groupby(["seq_len", "backend"])["time_ms"].median()
    compared = 0
    for (n, name), (time_ms, speedup) in cells.items():
        if (int(n), name) not in median:  # not ok here: its cell holds the status, never a time or a speed-up
            assert time_ms is None or speedup is None, (n, name)
            continue
        assert time_ms == pytest.approx(median[(int(n), name)], rel=0.01), (n, name)
        if name == "sdpa" or (int(n), "sdpa") not in median:
            assert speedup is None  # the baseline's own cell, or a row where the baseline has no result
        else:  # sdpa's time over the cell's, from the rows (three significant figures printed)
            assert speedup == pytest.approx(median[(int(n), "sdpa")] / median[(int(n), name)], rel=0.01), (n, name)
            compared += 1
    assert compared >= 8, cells
    assert "speed-up over sdpa" in " ".join(table.split())

    # another baseline, and one that did not run: one line naming the back ends, exit 2
    other = run(["-m", "runners.rows", str(sweep), "--table", "--baseline", "hf_sdpa_mask"], tmp_path, timeout=300,
                columns=200)
    cells = tables(other.stdout.split(f"{sweep}:", 1)[1])
    if (64, "hf_sdpa_mask") in median and (64, "sdpa") in median:
        assert cells[("64", "sdpa")][1] == pytest.approx(median[(64, "hf_sdpa_mask")] / median[(64, "sdpa")],
                                                         rel=0.01)
    bad = run(["-m", "runners.rows", str(sweep), "--table", "--baseline", "sdpx"], tmp_path, timeout=300)
    assert bad.returncode == 2 and "error: --baseline: expected one of naive, sdpa, chunked, flex, hf_sdpa_iscausal, " \
                                   "hf_sdpa_mask (the back ends of these rows) or none, got 'sdpx'" in bad.stderr, bad.stderr

    # report.md: the same speed-ups in its table
    report = (sweep / "report" / "report.md").read_text()
    n = next(n for n in (128, 64) if (n, "sdpa") in median and (n, "hf_sdpa_mask") in median)
    ratio = median[(n, "sdpa")] / median[(n, "hf_sdpa_mask")]
    line = next(line for line in report.splitlines() if line.startswith(f"| {n} |"))
    assert f"{ratio:#.3g}×" in line and "hf_sdpa_mask" in report, line


@pytest.mark.slow
def test_the_sweeps_baseline_key_picks_the_reference_and_one_that_did_not_run_is_said(tmp_path):
    from runner_helpers import run_at_once, run_sweep

    args = ["-m", "backend=naive,sdpa", "seq_len=16,32", "metrics=[memory]", "experiment=smoke"]
    runs = run_at_once({
        "naive": lambda: run_sweep(*args, "baseline=naive", f"hydra.sweep.dir={tmp_path / 'a'}", fake=True,
                                   env={"COLUMNS": "120"}),
        "absent": lambda: run_sweep(*args, "baseline=flex", f"hydra.sweep.dir={tmp_path / 'b'}", fake=True,
                                    env={"COLUMNS": "120"})})
    naive, absent = runs["naive"], runs["absent"]
    assert naive.returncode == 0, naive.stderr[-2000:]
    table = naive.stdout.split("\n\n")[1]
    header, *body = table.splitlines()
    assert header.split() == ["seq_len", "naive", "sdpa"]
    assert body[1].split()[-1] == "1.00×" and "speed-up over naive" in " ".join(naive.stdout.split())  # a tie
    assert absent.returncode == 0, absent.stderr[-2000:]
    assert ("warning: baseline: expected one of naive, sdpa (the back ends of these rows) or none, got 'flex'; "
            "the table and report.md show no speed-ups") in absent.stderr, absent.stderr
    assert "×" not in absent.stdout.split("results: ")[0]


def test_the_report_is_asked_for_the_same_baseline():
    from pathlib import Path

    from runners.report_process import rerun_command

    assert rerun_command(Path("s/results.csv"), Path("s/report"), "naive").endswith("--out s/report --baseline naive")
    assert "--baseline" not in rerun_command(Path("s/results.csv"), Path("s/report"))
