"""A grid over the variants' axes with bad values: `invalid` rows naming the key, `unsupported` where the back
end says so (sdpa and softcap), and the good point measured. One subprocess sweep of 32 tiny points (~15 s)."""

from __future__ import annotations

import csv

import pytest

from runner_helpers import run_sweep

pytestmark = pytest.mark.slow


def test_a_grid_with_bad_values_gives_invalid_rows_and_unsupported_where_the_back_end_says(tmp_path):
    out = run_sweep("-m", "backend=naive,sdpa", "softcap=0,2", "window=[3,-2],[3,0]", "sink=nan,0.5",
                    "alibi=true,yes", "seq_len=16", "experiment=smoke", f"hydra.sweep.dir={tmp_path}", timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    with open(tmp_path / "results.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 32 and len({r["point_id"] for r in table}) == 32
    by = {(r["backend"], r["softcap"], r["window"], r["sink"], r["alibi"]): r for r in table}
    ok, unsupported = by[("naive", "2", "[3, 0]", "0.5", "true")], by[("sdpa", "2", "[3, 0]", "0.5", "true")]
    assert ok["status"] == "ok" and float(ok["max_abs_err"]) < 1e-5
    assert unsupported["status"] == "unsupported" and "does not support variant softcap" in unsupported["error"]
    assert "cannot apply tanh" in unsupported["error"]
    invalid = [r for r in table if r["status"] == "invalid"]
    assert len(invalid) == 30  # each refused naming its first bad key, its values kept as typed
    errors = {r["error"].split(":")[0] for r in invalid}
    assert errors == {"window", "softcap", "sink", "alibi"}
    assert by[("naive", "2", "[3, 0]", "nan", "true")]["error"] == "sink: expected None or a finite number, got nan"
    assert by[("naive", "2", "[3, 0]", "0.5", "yes")]["error"] == "alibi: expected true or false, got 'yes'"
    assert by[("sdpa", "0", "[3, 0]", "0.5", "true")]["error"] == (
        "softcap: expected None or a positive finite number, got 0")
    assert by[("sdpa", "2", "[3, -2]", "0.5", "true")]["error"].startswith("window: expected None, an integer >= 1")
