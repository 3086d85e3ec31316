"""analysis.rounds: A and B measured interleaved in rounds, judged by how the rounds vary (python -m runners.ab).

Negative controls: a lopsided round (the two sides saw different load, or ran on different threads) is left out,
and counted it would have kept `slower` from being called; a machine busy whenever B ran is never called slower;
a slow drift of the machine that one run per side calls `slower` is `same` over alternating rounds; too few rounds
decide nothing."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import ab, rounds
from selfattn.results import Row

ROOT = Path(__file__).resolve().parents[2]
SEQ_LENS = (256, 512, 1024)


def write_rows(path: Path, backend: str, times_ms: dict[int, float], *, others: float = 0.02, threads: int = 2,
               device: str = "cpu", seed: int = 0) -> None:
    """One sweep's results.csv: an ok row per seq_len, its samples scattered 2% around its time."""
    rng = np.random.default_rng(seed)
    rows = []
    for n, time_ms in times_ms.items():
        samples = time_ms * rng.lognormal(0.0, 0.02, 40)
        rows.append(Row(status="ok", backend=backend, backend_source="builtin", precision="fp32", device=device,
                        device_name="cpu-a", mode="fwd", scope="core", batch=1, heads=2, q_len=n, seq_len=n,
                        head_dim=32, causal=False, scale="auto", input_std=1.0, seed=0, kv_heads=2,
                        time_ms=time_ms, time_ms_p20=float(np.quantile(samples, 0.2)),
                        time_ms_p80=float(np.quantile(samples, 0.8)), time_samples=40,
                        time_samples_ms=json.dumps([round(float(t), 6) for t in samples]), rel_rms_err=1e-7,
                        other_cpu_frac=others, num_threads=threads, noisy=False, noise="",
                        point_id=f"{backend}-{n}", git_sha="0123456789abcdef",
                        timestamp="2026-01-01T00:00:00Z").to_dict())
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows)
    for column in ("causal", "noisy"):
        frame[column] = frame[column].map({True: "true", False: "false"})
    frame.to_csv(path, index=False)


def write_rounds(folder: Path, ratios: list[float], *, backends=("sdpa", "sdpa"), base=None, others=None,
                 threads=None, device="cpu", seq_lens=SEQ_LENS) -> Path:
    """A folder as runners/ab.py leaves it: per round r, A at `base(r)` ms per point and B at ratios[r] x that.
    `others` and `threads`: per round (A's, B's), default alike."""
    base = base or (lambda r, side: 1.0)
    entries = []
    for r, ratio in enumerate(ratios, start=1):
        order = "AB" if r % 2 else "BA"
        for side in order:
            scale = base(r, side) * (ratio if side == "B" else 1.0)
            k = 0 if side == "A" else 1
            write_rows(folder / f"round-{r:02d}" / side / "results.csv", backends[k],
                       {n: scale * n / 256 for n in seq_lens}, device=device, seed=r * 2 + k,
                       others=others[r - 1][k] if others else 0.02, threads=threads[r - 1][k] if threads else 2)
            entries.append({"round": r, "side": side, "order": order.index(side) + 1,
                            "label": backends[k] if backends[0] != backends[1] else f"{side}: the same command",
                            "folder": f"round-{r:02d}/{side}", "exit_code": 0, "seconds": 1.0,
                            "compared": "backend" if backends[0] != backends[1] else "sweep", "cwd": ".",
                            "command": "python -m runners.sweep -m ..."})
    pd.DataFrame(entries, columns=list(rounds.MANIFEST_COLUMNS)).to_csv(folder / rounds.MANIFEST, index=False)
    return folder


@pytest.mark.parametrize("n, k", [(5, 0), (6, 1), (8, 1), (9, 2), (11, 2), (12, 3), (16, 4)])
def test_the_interval_rank_keeps_95_percent(n, k):
    assert rounds.interval_rank(n) == k
    cover = 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n if k else 0.0
    assert k == 0 or cover >= 0.95
    wider = 1 - 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n  # one more value inwards falls short
    assert wider < 0.95


def test_the_interval_holds_the_median_and_the_sign_test():
    median, lo, hi = rounds.median_interval(np.array([1.9, 2.1, 2.0, 1.8, 2.2, 2.05]))
    assert (lo, hi) == (1.8, 2.2) and median == pytest.approx(math.sqrt(2.0 * 2.05))
    assert rounds.sign_test_p(np.full(6, 2.0)) == pytest.approx(2 / 64)
    assert rounds.sign_test_p(np.array([0.9, 1.1, 0.95, 1.05, 1.0, 1.02])) == 1.0
    assert math.isnan(rounds.median_interval(np.array([2.0] * 5))[1])  # five rounds: no 95% interval


@pytest.mark.parametrize("median, lo, hi, counted, measured, device, want", [
    (2.0, 1.8, 2.2, 6, 6, "cpu", "slower"),
    (0.5, 0.4, 0.6, 6, 6, "cpu", "faster"),
    (1.0, 0.9, 1.1, 6, 6, "cpu", "same"),
    (1.2, 1.15, 1.25, 6, 6, "cpu", "same"),  # within a CPU's factor
    (1.2, 1.15, 1.25, 6, 6, "cuda", "slower"),  # beyond CUDA's
    (1.0, 0.6, 1.6, 8, 8, "cpu", "same"),  # no change of the factor's size found; the interval says how loosely
    (1.5, 1.0, 2.2, 6, 6, "cpu", "not significant"),  # beyond the factor, the interval reaches back: never "same"
    (1.35, 1.2, 1.4, 6, 6, "cpu", "not significant"),  # the median is past R, the interval is not
    (2.0, 1.8, 2.2, 5, 9, "cpu", "noisy"),  # rounds left out: too few counted
    (2.0, math.nan, math.nan, 4, 10, "cpu", "noisy"),
    (2.0, 1.8, 2.2, 5, 5, "cpu", "too few samples"),  # too few ran
])
def test_the_verdict_rule(median, lo, hi, counted, measured, device, want):
    assert rounds.verdict(median, lo, hi, counted, measured, ab.min_ratio_for(device)) == want


def test_a_round_counts_only_when_both_sides_measured_alike():
    a = pd.Series({"device": "cpu", "num_threads": 2, "other_cpu_frac": 0.50})
    near, far = 0.50 + 0.8 * rounds.BALANCE_LIMIT, 0.50 + 1.2 * rounds.BALANCE_LIMIT
    assert rounds.left_out_reason(a, a) == ""
    assert rounds.left_out_reason(a, a.copy().replace({0.50: near})) == ""  # within BALANCE_LIMIT
    assert rounds.left_out_reason(a, a.copy().replace({0.50: far})) == "others' load differed"
    assert rounds.left_out_reason(a, a.copy().replace({2: 1})) == "threads differed"
    assert rounds.left_out_reason(a, a.copy().replace({0.50: math.nan})) == ""  # not measured: nothing to say
    cuda = pd.Series({"device": "cuda", "num_threads": 2, "other_cpu_frac": 0.0})
    assert rounds.left_out_reason(cuda, cuda.copy().replace({0.0: 0.9})) == ""  # a GPU's time: not the host's load


def test_the_same_twice_is_same_and_twice_the_work_slower(tmp_path):
    jitter = [1.02, 0.97, 1.05, 0.99, 1.01, 0.96]
    same = rounds.compare_rounds(write_rounds(tmp_path / "same", jitter))
    assert list(same.matched["verdict"]) == ["same"] * 3 and (same.matched["rounds"] == 6).all()
    assert np.allclose(same.matched["ratio_lo"], 0.96) and np.allclose(same.matched["ratio_hi"], 1.05)
    assert same.label_a == "A: the same command" and "6 rounds" in same.note and "reaching past" not in same.note
    loose = rounds.compare_rounds(write_rounds(tmp_path / "loose", [1.0, 0.7, 1.02, 1.4, 0.99, 1.01]))
    assert list(loose.matched["verdict"]) == ["same"] * 3  # the median; its interval [0.7, 1.4] reaches past 1.3
    assert "3 of the `same` points have an interval reaching past the factor" in loose.note
    twice = rounds.compare_rounds(write_rounds(tmp_path / "twice", [2 * j for j in jitter], backends=("sdpa", "twice")))
    assert list(twice.matched["verdict"]) == ["slower"] * 3 and (twice.matched["point_id_b"].str.startswith("twice")).all()
    assert np.allclose(twice.matched["p_value"], 2 / 64) and (twice.matched["accuracy"] == "same").all()
    half = rounds.compare_rounds(write_rounds(tmp_path / "half", [j / 2 for j in jitter]))
    assert set(half.matched["verdict"]) == {"faster"}


def test_a_lopsided_round_is_left_out_and_would_have_decided_otherwise(tmp_path):
    ratios = [2.02, 1.97, 2.05, 1.99, 2.01, 1.96, 1.0]  # round 7: A's sweep ran while something else took the CPU
    others = [(0.02, 0.03)] * 6 + [(0.40, 0.02)]
    cmp = rounds.compare_rounds(write_rounds(tmp_path / "lopsided", ratios, others=others))
    assert list(cmp.matched["verdict"]) == ["slower"] * 3 and (cmp.matched["rounds"] == 6).all()
    assert (cmp.matched["rounds_run"] == 7).all() and (cmp.matched["left_out"] == "others' load differed (1)").all()
    assert "rounds left out at" in ab.table_text(cmp)
    # the negative control: the same round, its two sides alike, counts, and the interval reaches down to 1.0
    counted = rounds.compare_rounds(write_rounds(tmp_path / "counted", ratios))
    assert list(counted.matched["verdict"]) == ["not significant"] * 3 and np.allclose(counted.matched["ratio_lo"], 1.0)
    threads = [(2, 2)] * 6 + [(1, 2)]
    cmp = rounds.compare_rounds(write_rounds(tmp_path / "threads", ratios, threads=threads))
    assert list(cmp.matched["verdict"]) == ["slower"] * 3 and (cmp.matched["left_out"] == "threads differed (1)").all()


def test_a_machine_busy_whenever_b_ran_is_never_called_slower(tmp_path):
    """The same command twice, but B's sweeps always met a busy machine: no round counts, so `noisy`. Its negative
    control: the same ratios measured alike are a real slowdown."""
    ratios = [1.7, 1.75, 1.68, 1.72, 1.7, 1.71]
    busy_b = rounds.compare_rounds(write_rounds(tmp_path / "busy", ratios, others=[(0.02, 0.45)] * 6))
    assert list(busy_b.matched["verdict"]) == ["noisy"] * 3 and (busy_b.matched["rounds"] == 0).all()
    alike = rounds.compare_rounds(write_rounds(tmp_path / "alike", ratios))
    assert list(alike.matched["verdict"]) == ["slower"] * 3


def test_a_drifting_machine_is_the_same_over_alternating_rounds_not_in_one_run_each(tmp_path):
    """The machine slows by 10% a sweep: each round's second sweep is 10% slower than its first, A's in one round,
    B's in the next. Rounds judge the code the same; the first round's A against the last round's B (one run each,
    as two sweeps run one after the other) calls it slower."""
    def base(r: int, side: str) -> float:  # the sweep's place in time: AB, BA, AB, ... -> 1.1 per sweep
        position = 2 * (r - 1) + (("AB" if r % 2 else "BA").index(side))
        return 1.1 ** position
    folder = write_rounds(tmp_path / "drift", [1.0] * 6, base=base)
    cmp = rounds.compare_rounds(folder)
    assert list(cmp.matched["verdict"]) == ["same"] * 3
    assert np.allclose(cmp.matched["ratio"], 1.0)
    one_run = ab.compare_sweeps(str(folder / "round-01" / "A"), str(folder / "round-06" / "B"))
    assert list(one_run.matched["verdict"]) == ["slower"] * 3  # 1.1**11 = 2.85x, each row's samples narrow


def test_too_few_rounds_and_points_only_one_side_has(tmp_path):
    cmp = rounds.compare_rounds(write_rounds(tmp_path / "five", [2.0] * 5))
    assert set(cmp.matched["verdict"]) == {"too few samples"}
    folder = write_rounds(tmp_path / "only", [1.0] * 6)
    write_rows(folder / "round-03" / "B" / "results.csv", "sdpa", {256: 1.0, 512: 2.0, 1024: 4.0, 2048: 16.0}, seed=6)
    cmp = rounds.compare_rounds(folder)
    assert cmp.only_b == ["seq_len=2048"] and set(cmp.matched["verdict"]) == {"same"}
    assert cmp.matched.set_index("seq_len").loc[512, "rounds_run"] == 6


def test_the_command_line_judges_a_rounds_folder_and_says_when_there_were_none(tmp_path):
    folder = write_rounds(tmp_path / "ab", [2.0, 2.1, 1.9, 2.05, 1.95, 2.0], backends=("sdpa", "twice"))
    out = subprocess.run([sys.executable, "-m", "analysis.compare", str(folder), "--out", str(tmp_path / "cmp"),
                          "--fail-on", "slower"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "failing on slower" in out.stderr, out.stdout + out.stderr
    assert "6 rounds, A and B alternating" in out.stdout and "over rounds of A and B" in out.stdout
    assert ab.ONE_RUN_NOTE.split(":")[0] not in out.stdout
    written = pd.read_csv(tmp_path / "cmp" / "comparison.csv")
    assert list(written.columns) == list(ab.COLUMNS) and set(written["verdict"]) == {"slower"}
    assert (tmp_path / "cmp" / "comparison.png").stat().st_size > 0
    # two finished sweeps: no rounds, the old rule, and the output says so
    out = subprocess.run([sys.executable, "-m", "analysis.compare", str(folder / "round-01" / "A"),
                          str(folder / "round-02" / "A"), "--out", str(tmp_path / "one")], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "measured once each, not interleaved in rounds" in out.stdout, out.stderr
    assert "Mann-Whitney" in out.stdout


def test_settled_means_more_rounds_would_not_move_the_verdict_much():
    matched = pd.DataFrame({"verdict": ["slower", "same", "same", "not significant", "noisy"],
                            "ratio_lo": [1.8, 0.9, 0.7, 1.0, np.nan], "ratio_hi": [2.2, 1.1, 1.6, 1.9, np.nan],
                            "min_ratio": [1.3] * 5})
    assert rounds.settled(matched).tolist() == [True, True, False, False, False]
