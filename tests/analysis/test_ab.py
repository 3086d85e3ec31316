"""analysis.ab (python -m analysis.compare A B): matching, the verdict rule, accuracy, the CSV, figure and exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import ab
from selfattn.results import Row

ROOT = Path(__file__).resolve().parents[2]


def rows_csv(path: Path, backend: str, factor: float, *, seq_lens=(64, 128, 256), seed: int = 0, noisy=False,
             err: float = 1e-7, samples: int = 60, device_name: str = "cpu-a") -> Path:
    """A results.csv of ok rows whose samples are lognormal around factor x a base time per seq_len."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in seq_lens:
        times = (n / 64) * factor * rng.lognormal(0.0, 0.02, samples)
        rows.append(Row(status="ok", backend=backend, backend_source="builtin", precision="fp32", device="cpu",
                        device_name=device_name, mode="fwd", scope="core", batch=1, heads=2, q_len=n, seq_len=n,
                        head_dim=16, causal=False, scale="auto", input_std=1.0, seed=0, kv_heads=2,
                        time_ms=float(np.median(times)), time_ms_p20=float(np.quantile(times, 0.2)),
                        time_ms_p80=float(np.quantile(times, 0.8)), time_samples=samples,
                        time_samples_ms=json.dumps([round(float(t), 6) for t in times]), rel_rms_err=err,
                        noisy=noisy, noise="spread 30% > 10%" if noisy else "", point_id=f"{backend}-{n}",
                        git_sha="0123456789abcdef", timestamp="2026-01-01T00:00:00Z").to_dict())
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows)
    frame["causal"] = frame["causal"].map({True: "true", False: "false"})
    frame["noisy"] = frame["noisy"].map({True: "true", False: "false"})
    frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("ratio, lo, hi, p, reachable, noisy, want", [
    (1.5, 1.4, 1.6, 1e-6, True, False, "slower"),
    (0.5, 0.45, 0.55, 1e-6, True, False, "faster"),
    (1.05, 1.03, 1.07, 1e-9, True, False, "same"),  # significant, but within the ratio
    (1.05, 0.9, 1.2, 0.3, True, False, "same"),  # within the ratio, not significant
    (1.5, 0.9, 2.0, 0.01, True, False, "not significant"),  # beyond the ratio, not significant: never "same"
    (3.0, 2.5, 3.5, 1e-9, False, False, "too few samples"),
    (1.5, 1.0, 2.0, 1e-9, True, True, "noisy"),  # a noisy row: not decided
    (3.0, 2.8, 3.2, 1e-20, True, True, "noisy"),  # even a narrow interval far beyond the ratio (within-run only)
])
def test_verdict_rule(ratio, lo, hi, p, reachable, noisy, want):
    assert ab.verdict(ratio, lo, hi, p, reachable, noisy) == want


def test_a_cpu_change_must_pass_the_cpu_factor_and_a_cuda_change_asvs():
    assert ab.min_ratio_for("cuda") == ab.MIN_RATIO == 1.1 and ab.min_ratio_for("cpu") == ab.CPU_MIN_RATIO == 1.3
    # two quiet runs of one command on a CPU differed by 1.22x, "significant": the same there, slower on CUDA
    assert ab.verdict(1.22, 1.19, 1.23, 1e-20, True, False, ab.min_ratio_for("cpu")) == "same"
    assert ab.verdict(1.22, 1.19, 1.23, 1e-20, True, False, ab.min_ratio_for("cuda")) == "slower"
    assert ab.verdict(1.35, 1.3, 1.4, 1e-20, True, False, ab.min_ratio_for("cpu")) == "slower"


def test_accuracy_names_the_less_exact_side():
    assert ab.accuracy_verdict(1e-7, 1e-7, "fp32") == "same"
    assert ab.accuracy_verdict(1e-7, 5e-6, "fp32") == "less exact"
    assert ab.accuracy_verdict(5e-6, 1e-7, "fp32") == "more exact"
    assert ab.accuracy_verdict(1e-3, 1.5e-3, "fp16") == "same"  # within twice plus fp16's epsilon


def test_bootstrap_interval_holds_the_ratio():
    rng = np.random.default_rng(1)
    a, b = rng.lognormal(0, 0.05, 80), 1.3 * rng.lognormal(0, 0.05, 80)
    lo, hi = ab.ratio_interval(a, b)
    assert lo < np.median(b) / np.median(a) < hi and 1.2 < lo and hi < 1.4
    assert ab.ratio_interval(a, b) == (lo, hi)  # seeded: the same rows give the same interval


def run_compare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "analysis.compare", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_two_files_same_and_slower_through_the_command_line(tmp_path):
    base = rows_csv(tmp_path / "a" / "results.csv", "sdpa", 1.0, seed=1)
    again = rows_csv(tmp_path / "b" / "results.csv", "sdpa", 1.0, seed=2, device_name="cpu-b")
    slow = rows_csv(tmp_path / "c" / "results.csv", "sdpa", 1.4, seed=3, seq_lens=(64, 128, 512), err=1e-5)
    out = run_compare(str(base), str(again), "--out", str(tmp_path / "same"), "--fail-on", "slower")
    assert out.returncode == 0, out.stderr
    same = pd.read_csv(tmp_path / "same" / "comparison.csv")
    assert list(same.columns[:11]) == list(ab.COLUMNS[:11])
    assert (same["verdict"] == "same").all() and len(same) == 3
    assert (tmp_path / "same" / "comparison.png").stat().st_size > 0

    out = run_compare(str(tmp_path / "a"), str(tmp_path / "c"), "--out", str(tmp_path / "slow"), "--fail-on", "slower")
    assert out.returncode == 1, out.stdout  # CI: a slower point fails
    slow_cmp = pd.read_csv(tmp_path / "slow" / "comparison.csv")
    assert (slow_cmp["verdict"] == "slower").all() and len(slow_cmp) == 2
    assert (slow_cmp["ratio_lo"] < slow_cmp["ratio"]).all() and (slow_cmp["ratio"] < slow_cmp["ratio_hi"]).all()
    assert (slow_cmp["p_value"] < ab.ALPHA).all() and (slow_cmp["accuracy"] == "less exact").all()
    assert "only in" in out.stdout and "seq_len=256" in out.stdout and "seq_len=512" in out.stdout  # one side only
    assert "less exact:" in out.stdout and "git checkout 0123456789ab && python -m runners.sweep backend=sdpa" in out.stdout
    assert "failing on slower" in out.stderr


def test_backends_of_one_sweep_and_bad_input(tmp_path):
    a = pd.read_csv(rows_csv(tmp_path / "x" / "a.csv", "naive", 1.0), dtype=str, keep_default_na=False)
    b = pd.read_csv(rows_csv(tmp_path / "x" / "b.csv", "chunked", 0.5, seed=4), dtype=str, keep_default_na=False)
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    pd.concat([a, b]).to_csv(sweep / "results.csv", index=False)
    cmp = ab.compare_backends(str(sweep), "naive", "chunked")
    assert list(cmp.matched["verdict"]) == ["faster"] * 3 and not cmp.only_a and not cmp.only_b
    out = run_compare(str(sweep), "--backends", "naive", "flash", "--out", str(tmp_path / "o"))
    assert out.returncode == 2 and "--backends: 'flash' is not a back end" in out.stderr
    out = run_compare(str(sweep), "--out", str(tmp_path / "o"))
    assert out.returncode == 2 and "PATH: expected 2 paths" in out.stderr
    out = run_compare(str(sweep), str(sweep), "--fail-on", "worse", "--out", str(tmp_path / "o"))
    assert out.returncode == 2 and "--fail-on: expected some of" in out.stderr
    out = run_compare(str(tmp_path / "nowhere"), str(sweep), "--out", str(tmp_path / "o"))
    assert out.returncode == 2 and out.stderr.startswith("compare: A: ") and len(out.stderr.splitlines()) == 1


def test_noisy_rows_are_not_called_same(tmp_path):
    rows_a = ab.load_side(str(rows_csv(tmp_path / "a.csv", "sdpa", 1.0, seed=5)), "A")
    rows_b = ab.load_side(str(rows_csv(tmp_path / "b.csv", "sdpa", 1.0, seed=6, noisy=True)), "B")
    cmp = ab.match(rows_a, rows_b, ["seq_len", "backend"], "a", "b")
    assert set(cmp.matched["verdict"]) == {"noisy"} and (cmp.matched["noise_b"] != "").all()


def test_the_device_study_still_imports_from_the_module():
    from analysis.compare import device_speedups, pick_baseline, speedup_table  # noqa: F401  (the report's study)


def test_the_device_table_carries_the_command_of_its_largest_point(tmp_path):
    from analysis.compare import device_speedups, speedup_table
    from analysis.load import load

    rows = load([rows_csv(tmp_path / "a" / "results.csv", "sdpa", 1.0, device_name="cpu-a"),
                 rows_csv(tmp_path / "b" / "results.csv", "sdpa", 2.0, device_name="cpu-b")], warn=False).rows
    table = speedup_table(device_speedups(rows, "cpu-a"))
    assert len(table) == 1 and table["largest_n"].iloc[0] == 256
    assert "python -m runners.sweep backend=sdpa device=cpu heads=2 seq_len=256" in table["repro_at_largest_n"].iloc[0]
    assert "seq_len=256" in table["baseline_repro_at_largest_n"].iloc[0]


def test_an_option_added_between_two_commits_still_matches(tmp_path):
    before = rows_csv(tmp_path / "a" / "results.csv", "chunked", 1.0)
    after = pd.read_csv(rows_csv(tmp_path / "b" / "results.csv", "chunked", 1.0, seed=7), dtype=str, keep_default_na=False)
    after["backend_options"] = '{"new_option": 3}'  # B's commit added an option (at its default in every row)
    after.to_csv(tmp_path / "b" / "results.csv", index=False)
    cmp = ab.compare_sweeps(str(before), str(tmp_path / "b" / "results.csv"))
    assert len(cmp.matched) == 3 and not cmp.only_a and not cmp.only_b
    other = pd.read_csv(tmp_path / "b" / "results.csv", dtype=str, keep_default_na=False)
    other["backend_options"] = ['{"q_chunk": 64}'] + ['{"q_chunk": 32}'] * 2  # an option both know, set apart at one
    other.to_csv(tmp_path / "b" / "results.csv", index=False)
    first = pd.read_csv(before, dtype=str, keep_default_na=False).assign(backend_options='{"q_chunk": 32}')
    first.to_csv(before, index=False)
    cmp = ab.compare_sweeps(str(before), str(tmp_path / "b" / "results.csv"))
    assert len(cmp.matched) == 2 and len(cmp.only_a) == 1 and len(cmp.only_b) == 1
