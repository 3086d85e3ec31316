"""The accuracy sample always holds the first, last and block-edge query rows (selfattn/measure/boundary.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from selfattn.measure.accuracy import sample_rows
from selfattn.measure.boundary import judged_row_count, judged_rows, point_rows, query_block, required_rows
from selfattn.point import Point

SIZES, SEEDS = (512, 1024, 2048), (0, 1, 2, 3)


def test_required_rows_are_the_ends_and_both_sides_of_each_block_edge():
    assert required_rows(10) == [0, 9]
    assert required_rows(10, 4) == [0, 3, 4, 7, 8, 9]
    assert required_rows(1) == [0]
    assert required_rows(8, 64) == [0, 7]


@pytest.mark.parametrize("q_len, count, block", [(2048, 128, None), (2048, 128, 64), (4096, 16, 64), (100, 128, 8),
                                                 (1000, 128, 333)])
def test_judged_rows_hold_every_required_row_and_are_sorted_distinct(q_len, count, block):
    rows = judged_rows(q_len, count, seed=3, block=block)
    assert rows.tolist() == sorted(set(rows.tolist()))
    assert set(required_rows(q_len, block)) <= set(rows.tolist())
    assert len(rows) == judged_row_count(q_len, count, block) == min(q_len, max(count, len(required_rows(q_len, block))))


def test_the_random_rows_stay_random_and_seeded():
    a, b = judged_rows(2048, 128, seed=0), judged_rows(2048, 128, seed=1)
    assert torch.equal(a, judged_rows(2048, 128, seed=0)) and not torch.equal(a, b)
    assert float(a.float().median()) > 600  # not piled up at the low rows


def test_the_old_random_sample_missed_the_last_row_at_these_points():
    # the negative control of the end-to-end test below: without required rows, most of its points lack the last row
    missed = [(n, s) for n in SIZES for s in SEEDS if n - 1 not in sample_rows(n, 16, s).tolist()]
    assert len(missed) >= 10


def test_the_block_sizes_come_from_each_back_ends_plan():
    from selfattn.backends.resolved import resolve_point

    chunked = Point(backend="chunked", seq_len=1024, backend_options={"q_chunk": 100})
    assert query_block(chunked, resolve_point(chunked, "cpu")) == 100
    auto = Point(backend="chunked", seq_len=1024, causal=True)
    from selfattn.backends.chunked import CAUSAL_CHUNKS

    assert query_block(auto, resolve_point(auto, "cpu")) == CAUSAL_CHUNKS[0]
    rows = point_rows(chunked, 16, resolve_point(chunked, "cpu")).tolist()
    assert {99, 100, 199, 200, 999, 1000, 1023, 0} <= set(rows)
    sdpa = Point(backend="sdpa", seq_len=1024)
    assert query_block(sdpa, resolve_point(sdpa, "cpu")) is None


@pytest.mark.slow
def test_a_last_row_bug_is_caught_at_every_size_and_seed(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runners"))
    from runner_helpers import ROOT, run_sweep

    sweep = tmp_path / "sweep"
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    out = run_sweep("-m", "backend=plugins_for_tests.cheats:last_row_bug", "experiment=smoke", "heads=1", "head_dim=16",
                    f"seq_len={','.join(map(str, SIZES))}", f"seed={','.join(map(str, SEEDS))}",
                    "budget.accuracy_rows=16", "metrics=[accuracy]", f"hydra.sweep.dir={sweep}", env=env, timeout=600)
    rows = pd.read_csv(sweep / "results.csv", keep_default_na=False)
    assert len(rows) == len(SIZES) * len(SEEDS), (out.stdout[-2000:], out.stderr[-2000:])
    for _, row in rows.iterrows():
        assert row["status"] == "incorrect", (row["seq_len"], row["seed"], row["status"])
        assert row["error"].startswith("output error"), row["error"]
        assert int(row["accuracy_rows"]) == 16
