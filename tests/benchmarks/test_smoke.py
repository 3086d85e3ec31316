"""Smoke tests of benchmarks/*.py: each script's tiny mode runs and prints its figures beside targets.

They check that the scripts work, never how fast anything is (the figures are measured by
running the scripts themselves, see docs/performance.md). The scripts run in this process
(torch is already imported), which keeps the whole file to a few seconds.
"""

from __future__ import annotations

import csv
import importlib.util
import re
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
TARGET_LINE = re.compile(r"^(?P<target>[1-6])\s+\S.*\s(?:<=|>=)\s+\S+(?: \w+)?\s+(?:PASS|MISS)", re.MULTILINE)


def load(script: str):
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))  # the scripts import their shared _common module
    spec = importlib.util.spec_from_file_location(f"benchmark_{script}", BENCHMARKS / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "script, args, target",
    [
        ("chunked_speed", ["--quick"], "1"),
        ("chunked_memory", ["--quick", "--in-process", "--sizes", "128", "256", "--naive-sizes", "256",
                            "--compare-size", "256"], "2"),
        ("chunked_fwd_bwd", ["--quick"], "3"),
        ("timing_fidelity", ["--quick", "--cases", "sdpa:64"], "5"),
    ],
    ids=["target1-speed", "target2-memory", "target3-fwd_bwd", "target5-fidelity"],
)
def test_quick_mode_prints_targets(script, args, target, capsys):
    assert load(script).main(args) == 0
    out = capsys.readouterr().out
    targets = {m.group("target") for m in TARGET_LINE.finditer(out)}
    assert targets == {target}, out
    if script == "chunked_speed":  # rows 23.3 (two mask ratios) and 23.4 (chunked/sdpa, causal and not)
        issue23 = re.findall(r"^(23\.[34])\s+\S.*\s<=\s+\S+\s+(?:PASS|MISS)", out, re.MULTILINE)
        assert issue23.count("23.3") == 2 and issue23.count("23.4") == 2, out


def test_overhead_reads_a_sweep_csv(tmp_path, capsys):
    rows = [  # measure_s, point_wall_s, job_wall_s: overheads 0.3, 0.5, 0.7 s -> median 0.5 s
        {"status": "ok", "measure_s": 1.0, "point_wall_s": 1.2, "job_wall_s": 1.3},
        {"status": "ok", "measure_s": 2.0, "point_wall_s": 2.4, "job_wall_s": 2.5},
        {"status": "ok", "measure_s": 0.5, "point_wall_s": 1.0, "job_wall_s": 1.2},
        {"status": "skipped_budget", "measure_s": "", "point_wall_s": 0.1, "job_wall_s": 0.2},
    ]
    csv_path = tmp_path / "results.csv"
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert load("harness_overhead").main(["--results", str(csv_path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^4\s+median job_wall_s - measure_s\s+0\.5 s\s+<= 0\.5 s\s+PASS", out, re.MULTILINE), out
    assert "{'ok': 3, 'skipped_budget': 1}" in out


def test_chunk_sweep_marks_default_and_ranks_pairs(capsys):
    assert load("chunk_sizes").main(["--sizes", "64", "--q-chunks", "32", "256", "--kv-chunks", "512"]) == 0
    out = capsys.readouterr().out
    assert "q_chunk   256 kv_chunk   512" in out and out.count("seq_len 64,") == 2, out


def test_sweep_scale_tiny_prints_its_table_and_targets(capsys):
    assert load("sweep_scale").main(["--tiny"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^\s+20\s+yes .*\n\s+300\s+no \(built at the end\)", out, re.MULTILINE), out
    assert {m.group("target") for m in TARGET_LINE.finditer(out)} == {"1", "4"}, out


def test_suite_time_reads_pytests_summary_and_durations():
    """benchmarks/test_suite_time.py runs the whole suite (minutes): here only what it reads from pytest's output."""
    module = load("test_suite_time")
    text = ("....s.F\n============================= slowest durations =============================\n"
            "12.50s call     tests/a/test_x.py::test_slow[case-1]\n"
            "3.00s setup    tests/a/test_x.py::test_slow[case-1]\n"
            "4.25s call     tests/b/test_y.py::test_other\n"
            "0.01s teardown tests/b/test_y.py::test_other\n"
            "FAILED tests/b/test_y.py::test_broken - assert 1 == 2\n"
            "1 failed, 5 passed, 1 skipped, 2 warnings in 20.75s\n")
    counts, seconds, durations = module.parse_output(text)
    assert counts == "1 failed, 5 passed, 1 skipped, 2 warnings" and seconds == 20.75
    assert durations[0] == (12.5, "call", "tests/a/test_x.py::test_slow[case-1]") and len(durations) == 4
    assert module.per_test(durations) == [(15.5, "tests/a/test_x.py::test_slow[case-1]"),
                                          (4.26, "tests/b/test_y.py::test_other")]
    assert [name for _, name in module.per_file(durations)] == ["tests/a/test_x.py", "tests/b/test_y.py"]
    assert module.parse_output("no summary here\n") == ("", None, [])
