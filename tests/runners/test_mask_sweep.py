"""Mask functions through the real command line: attention-gym's masks (small equivalents in its convention,
tests/plugins_for_tests/gym_masks.py, since attention-gym is not installed) passed by path, on naive, sdpa,
chunked and flex at several n, `ok` against the float64 reference with FLOPs = 4·B·H·D·(visible pairs); a kernel
one key off is `incorrect`; a back end that does not take a mask function is `unsupported`."""

from __future__ import annotations

import csv

import pytest

from runner_helpers import run_sweep

GYM = "tests.plugins_for_tests.gym_masks"
# the factories' defaults (gym_masks.py), as plain predicates on (position p, key j): an independent count
VISIBLE = {
    "generate_prefix_lm_mask": lambda p, j: j < 24 or j <= p,
    "generate_dilated_sliding_window": lambda p, j: 0 <= p - j < 16 and (p - j) % 2 == 0,
    "generate_global_sliding_window": lambda p, j: j <= p and (p - j < 8 or j < 4),
}


def _rows(folder) -> list[dict[str, str]]:
    with open(folder / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def _pairs(name: str, q_len: int, seq_len: int) -> int:
    offset = seq_len - q_len  # the harness passes bottom-right positions
    return sum(VISIBLE[name](i + offset, j) for i in range(q_len) for j in range(seq_len))


@pytest.mark.slow
@pytest.mark.timeout(1500)  # flex compiles a kernel per mask and shape on a CPU (~20 s each, more on a busy machine)
def test_attention_gym_masks_by_path_are_ok_on_every_back_end_with_exact_flops(tmp_path):
    masks = ",".join(f"{GYM}:{name}" for name in VISIBLE)
    common = ("-m", "experiment=smoke", "heads=2", "kv_heads=1", f"mask={masks}", "budget.accuracy_rows=48",
              "metrics=[accuracy]")
    grids = {"eager": ("backend=naive,sdpa,chunked", "seq_len=64,80", "q_len=null,48"),
             "flex": ("backend=flex", "seq_len=64,80")}
    rows = []
    for name, grid in grids.items():
        out = run_sweep(*common, *grid, f"hydra.sweep.dir={tmp_path / name}", timeout=1400)
        assert out.returncode == 0, out.stderr[-3000:]
        rows += _rows(tmp_path / name)
    assert len(rows) == 3 * 2 * 2 * 3 + 2 * 3
    for row in rows:
        assert row["status"] == "ok", (row["backend"], row["mask"], row["seq_len"], row["error"])
        batch, heads, dim = int(row["batch"]), int(row["heads"]), int(row["head_dim"])
        pairs = _pairs(row["mask"].rsplit(":", 1)[-1], int(row["q_len"]), int(row["seq_len"]))
        assert float(row["flops"]) == 4 * batch * heads * dim * pairs
        assert float(row["mask_density"]) == pytest.approx(pairs / (int(row["q_len"]) * int(row["seq_len"])))
        assert float(row["max_abs_err"]) < 1e-4


@pytest.mark.slow
def test_a_kernel_one_key_off_is_incorrect_and_a_back_end_without_mask_functions_is_unsupported(tmp_path):
    out = run_sweep("-m", "experiment=smoke", f"backend={GYM}:one_key_more,{GYM}:plain_kernel,naive",
                    "mask=prefix_lm", "mask.prefix=16", "budget.accuracy_rows=32", f"hydra.sweep.dir={tmp_path}",
                    timeout=300)
    rows = {row["backend"]: row for row in _rows(tmp_path)}
    assert rows["naive"]["status"] == "ok", rows["naive"]["error"]
    assert rows["one_key_more"]["status"] == "incorrect", rows["one_key_more"]["error"]
    assert rows["plain_kernel"]["status"] == "unsupported"
    assert "does not support mask mask_mod" in rows["plain_kernel"]["error"]
    assert out.returncode == 1  # a point that failed: the sweep says so


@pytest.mark.slow
def test_an_incorrect_row_names_the_known_mistake_its_errors_follow(tmp_path):
    runs = {
        "top_left": ("backend=" + f"{GYM}:top_left_causal", "causal=true", "q_len=24"),
        "window": ("backend=" + f"{GYM}:window_one_wider", "window=5"),
        "empty": ("backend=" + f"{GYM}:empty_rows_averaged", f"mask={GYM}:late_keys"),
    }
    reasons = {}
    for name, args in runs.items():
        folder = tmp_path / name
        run_sweep("-m", "experiment=smoke", *args, "budget.accuracy_rows=64", f"hydra.sweep.dir={folder}", timeout=300)
        (row,) = _rows(folder)
        assert row["status"] == "incorrect", (name, row["error"])
        reasons[name] = row["error"]
    assert "hint: the output matches a top-left aligned causal mask" in reasons["top_left"]
    assert "hint: the output matches window=6, a window counted one key off" in reasons["window"]
    assert "hint: wrong only in rows that see no key" in reasons["empty"]
