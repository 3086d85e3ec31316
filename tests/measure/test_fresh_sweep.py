"""End to end, through the real command line: kernels that game the timer (tests/plugins_for_tests/cheats.py)
beside an honest built-in, with fresh input values between timed calls (selfattn/measure/fresh.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runners"))
from runner_helpers import ROOT, end_cells_of, run_sweep  # noqa: E402

PLUGINS = "plugins_for_tests.cheats"
CHEATS = ("memo_identity", "memo_fingerprint", "pointer_cache", "right_first_call", "precomputed", "sleeper",
          "precomputed_sleeper")


def end_cells(stdout: str) -> dict[str, str]:
    """Each back end's cell in the end table (one point: a header line of names, a line of cells under it, in as
    many parts as the terminal's width needed)."""
    return end_cells_of(stdout, {"sdpa", *CHEATS})


def starred(stdout: str) -> list[str]:
    """The back ends whose cell the end table marks fastest (`*`)."""
    return [name for name, cell in end_cells(stdout).items() if cell.startswith("*")]


@pytest.mark.slow
def test_cheating_kernels_compute_every_call_or_are_incorrect(tmp_path):
    backends = ",".join(["sdpa", *(f"{PLUGINS}:{name}" for name in CHEATS)])
    sweep = tmp_path / "sweep"
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    out = run_sweep("-m", f"backend={backends}", "experiment=smoke", "seq_len=256", "heads=2", "head_dim=32",
                    "budget.timing_s=0.1", "budget.accuracy_rows=16", "budget.measure_device_peak=true", "metrics=[]",
                    f"hydra.sweep.dir={sweep}", env=env, timeout=600)
    rows = pd.read_csv(sweep / "results.csv", keep_default_na=False).set_index("backend")
    assert len(rows) == 1 + len(CHEATS), (out.stdout[-3000:], out.stderr[-3000:])
    status = rows["status"].to_dict()
    assert status["sdpa"] == "ok", rows.loc["sdpa", "error"]
    # memoized on identity or on the values: with new values before every timed call they compute every time,
    # so they are ok at a computing kernel's time, far above the lookup the pointer-keyed cache is timed at
    lookup_ms = float(rows.loc["pointer_cache", "time_ms"])
    for name in ("memo_identity", "memo_fingerprint"):
        assert status[name] == "ok", rows.loc[name, "error"]
        assert float(rows.loc[name, "time_ms"]) > 10 * lookup_ms, (name, rows.loc[name, "time_ms"], lookup_ms)
        assert rows.loc[name, "timer"] == "cpu_fresh"
    # lookups faster than the device can compute: below the physical floor (selfattn/measure/floor.py), both numbers
    for name in ("pointer_cache", "precomputed"):
        assert status[name] == "incorrect", (name, status[name], rows.loc[name, "error"])
        error = rows.loc[name, "error"]
        assert "is below the physical floor" in error and "TFLOP/s matmul peak" in error, error
        assert float(rows.loc[name, "time_ms"]) < float(rows.loc[name, "floor_ms"]) / 4
    # stale answers above the floor: a kernel right only on an input's first call, a precomputed answer that sleeps
    for name in ("right_first_call", "precomputed_sleeper"):
        assert status[name] == "incorrect", (name, status[name], rows.loc[name, "error"])
        assert "timed call (on its own fresh inputs)" in rows.loc[name, "error"], rows.loc[name, "error"]
    # honest rows keep within the floor's slack (a peak measured while others load the machine can put a fast kernel
    # just under floor_ms itself); the sleeper is right (ok) but its timed calls waited: noisy, and says so
    for name in ("sdpa", "memo_identity", "memo_fingerprint", "sleeper"):
        assert float(rows.loc[name, "time_ms"]) >= float(rows.loc[name, "floor_ms"]) / 4, name
        assert rows.loc[name, "floor_of"] == "flops"
    assert status["sleeper"] == "ok", rows.loc["sleeper", "error"]
    assert str(rows.loc["sleeper", "noisy"]) == "True" and "idle: the process used" in rows.loc["sleeper", "noise"]
    assert "idle" not in rows.loc["sdpa", "noise"] and float(rows.loc["sdpa", "own_cpu_frac"]) > 0.1
    # The table's fastest is a kernel that computes every call, never a lookup: the lookups' and stale answers'
    # cells are marked incorrect, no result. Which computing kernel wins is the machine's to say (the memoized ones
    # run a plain attention every call, as fast as sdpa at this size; a busy machine may slow sdpa's point).
    cells = end_cells(out.stdout)
    assert set(cells) == {"sdpa", *CHEATS}, out.stdout[-3000:]
    for name in ("pointer_cache", "precomputed", "right_first_call", "precomputed_sleeper"):
        assert cells[name].endswith("(incorrect)"), (name, cells[name])
    (fastest,) = starred(out.stdout)
    assert fastest in ("sdpa", "memo_identity", "memo_fingerprint"), out.stdout[-3000:]
    assert float(rows.loc[fastest, "time_ms"]) > 10 * lookup_ms, (fastest, rows.loc[fastest, "time_ms"], lookup_ms)
