"""The config's `timing` section (selfattn/measure/timing_options.py): checked in one line, carried from the parsed
job to the measurement (in this process and in the isolated worker), and recorded in every timed row."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest
from runners.config import parse_job
from selfattn.measure import timing
from selfattn.measure.timing_options import TimingOptions

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runners"))
from runner_helpers import run_at_once, run_sweep  # noqa: E402

POINT = {"backend": {"name": "sdpa"}, "precision": {"name": "fp32"}, "device": "cpu", "batch": 1, "heads": 1,
         "seq_len": 64, "q_len": None, "head_dim": 16, "d_model": None, "causal": False, "scale": "auto", "mode": "fwd",
         "scope": "core", "input_std": 1.0, "seed": 0, "grids": None, "grid_point": None,
         "budget": {"timing_s": 0.02, "accuracy_rows": 4, "measure_device_peak": False}}


@pytest.mark.parametrize("values, message", [
    ({"mode": "graph"}, "timing.mode: expected one of call, kernel, got 'graph'"),
    ({"l2": "hot"}, "timing.l2: expected one of auto, cold, warm, got 'hot'"),
])
def test_a_bad_value_is_one_line_naming_the_field_and_what_is_allowed(values, message):
    with pytest.raises(ValueError) as caught:
        TimingOptions(**values)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
    parsed = parse_job({**POINT, "timing": values})
    assert parsed.point is None and parsed.problem.startswith(message)


def test_auto_is_cold_on_cuda_and_warm_on_a_cpu_which_refuses_cold():
    assert TimingOptions().l2_on("cuda") == "cold" and TimingOptions().l2_on("cpu") == "warm"
    assert TimingOptions(l2="warm").l2_on("cuda") == "warm"
    with pytest.raises(ValueError, match=r"^timing\.l2: cold needs CUDA .* allowed there: auto, warm$"):
        TimingOptions(l2="cold").l2_on("cpu")
    assert TimingOptions(mode="kernel").mode_on("cpu") == "call"  # a CPU times calls


def test_the_parsed_job_carries_the_section_and_budget_no_longer_has_timing_mode():
    parsed = parse_job({**POINT, "timing": {"mode": "kernel", "l2": "warm"}})
    assert parsed.problem == "" and parsed.timing == TimingOptions(mode="kernel", l2="warm")
    assert parse_job(POINT).timing == TimingOptions()
    moved = parse_job({**POINT, "budget": {**POINT["budget"], "timing_mode": "kernel"}})
    assert moved.point is None and moved.problem.startswith("budget.timing_mode: unknown key")


def test_a_cpu_row_records_its_timing_mode_and_l2_state_and_a_cold_cpu_is_an_invalid_row():
    from selfattn.measure import Budget, measure_point

    parsed = parse_job(POINT)
    row = measure_point(parsed.point, Budget(timing_s=0.02, accuracy_rows=4, measure_device_peak=False), metrics=())
    assert row.status == "ok", row.error
    assert (row.timing_mode, row.l2) == ("call", "warm")
    cold = measure_point(parsed.point, parsed.budget, metrics=(), timing=TimingOptions(l2="cold"))
    assert cold.status == "invalid" and "timing.l2: cold needs CUDA" in cold.error, cold.error


class _FakeEvent:
    def record(self) -> None:
        pass

    def elapsed_time(self, other: "_FakeEvent") -> float:
        return 0.1


def test_warm_cuda_events_leave_the_flush_out(monkeypatch):
    flushes = []
    monkeypatch.setattr(timing, "_event", _FakeEvent)
    monkeypatch.setattr(timing, "_synchronize", lambda: None)

    class Buffer:
        def zero_(self):
            flushes.append(1)

    monkeypatch.setattr(timing, "_flush_buffer", Buffer)
    cold = timing.time_call(lambda: None, "cuda", 0.001, 0.001, between=lambda: None)
    assert cold.timer == "cuda_events" and len(flushes) == cold.samples
    flushes.clear()
    warm = timing.time_call(lambda: None, "cuda", 0.001, 0.001, flush_l2=False)  # no fresh step: still events
    assert warm.timer == "cuda_events" and warm.samples >= timing.MIN_SAMPLES and flushes == []


def test_the_command_line_refuses_a_bad_timing_value_in_one_line():
    runs = run_at_once({
        "mode": lambda: run_sweep("backend=sdpa", "device=cpu", "seq_len=64", "timing.mode=graph"),
        "cold": lambda: run_sweep("backend=sdpa", "device=cpu", "seq_len=64", "timing.l2=cold", "metrics=[]",
                                  "budget.timing_s=0.02", "wandb.mode=disabled", "hydra.run.dir=/tmp/i55_cold_cli"),
    })
    mode = runs["mode"]
    assert mode.returncode != 0 and "timing.mode: expected one of call, kernel, got 'graph'" in mode.stderr, mode.stderr
    cold = runs["cold"]
    assert cold.returncode != 0 and "timing.l2: cold needs CUDA" in cold.stderr, cold.stderr
    assert "Traceback" not in mode.stderr + cold.stderr


@pytest.mark.slow
def test_the_section_reaches_the_isolated_worker(tmp_path):
    """Isolated points (isolate=true: measured in runners/isolate_worker.py): a cold L2 asked of a CPU is refused
    there, and only there, so an invalid row saying so shows the section travelled to the worker."""
    common = ("backend=sdpa", "device=cpu", "heads=1", "head_dim=16", "metrics=[]", "budget.timing_s=0.02",
              "budget.accuracy_rows=4", "wandb.mode=disabled", "report=false", "isolate=true")
    runs = run_at_once({
        "cold": lambda: run_sweep("-m", *common, "seq_len=64,96", "timing.l2=cold", f"hydra.sweep.dir={tmp_path / 'cold'}",
                                  timeout=300),
        "warm": lambda: run_sweep("-m", *common, "seq_len=64", "timing.l2=warm", "timing.mode=kernel",
                                  f"hydra.sweep.dir={tmp_path / 'warm'}", timeout=300),
    })
    for name, out in runs.items():
        assert (tmp_path / name / "results.csv").exists(), (out.stdout[-2000:], out.stderr[-2000:])
    cold = pd.read_csv(tmp_path / "cold" / "results.csv", keep_default_na=False)
    assert list(cold["status"]) == ["invalid", "invalid"], cold[["status", "error"]]
    assert cold["error"].str.contains("timing.l2: cold needs CUDA").all(), list(cold["error"])
    warm = pd.read_csv(tmp_path / "warm" / "results.csv", keep_default_na=False)
    assert list(warm["status"]) == ["ok"] and list(warm["l2"]) == ["warm"], warm[["status", "error"]]
    assert list(warm["timing_mode"]) == ["call"]  # a CPU times calls, whatever timing.mode asks of CUDA
