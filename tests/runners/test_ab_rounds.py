"""runners.ab (python -m runners.ab): the rounds' order, folders, stopping rule and refusals, with fake sweeps.

The real sweeps' end-to-end runs are in test_compare_sweeps.py; here each side's sweep is a stand-in that writes a
results.csv in milliseconds: a function in place of the subprocess, or a fake checkout's runners/sweep.py run
through the real command line (two commits: each side from its own folder)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis import rounds
from runners import ab
from selfattn.results import Row

ROOT = Path(__file__).resolve().parents[2]

# A checkout's stand-in for `python -m runners.sweep -m ... hydra.sweep.dir=DIR`: one ok row per seq_len, its time
# FACTOR x n/256 ms within 2%, and where it ran (its file, folder and interpreter) in DIR/ran.json.
FAKE_SWEEP = '''
import csv, json, os, random, sys
from selfattn.results import Row

FACTOR = {factor}
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
out = args["hydra.sweep.dir"]
os.makedirs(out, exist_ok=True)
rows = [Row(status="ok", backend=args.get("backend", "sdpa"), backend_source="builtin", precision="fp32",
            device="cpu", device_name="cpu-a", mode="fwd", scope="core", batch=1, heads=2, q_len=int(n),
            seq_len=int(n), head_dim=32, causal=False, scale="auto", input_std=1.0, seed=0, kv_heads=2,
            time_ms=FACTOR * int(n) / 256 * random.uniform(0.98, 1.02), time_samples=10, other_cpu_frac=0.02,
            num_threads=2, rel_rms_err=1e-7, point_id=f"p{{n}}", git_sha="{sha}",
            timestamp="2026-01-01T00:00:00Z").to_dict() for n in args["seq_len"].split(",")]
with open(os.path.join(out, "results.csv"), "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(dict(row, causal="false") for row in rows)
json.dump({{"file": __file__, "cwd": os.getcwd(), "python": sys.executable, "argv": sys.argv[1:]}},
          open(os.path.join(out, "ran.json"), "w"))
'''


def fake_checkout(folder: Path, factor: float, sha: str) -> Path:
    (folder / "runners").mkdir(parents=True)
    (folder / "runners" / "__init__.py").write_text("")
    (folder / "runners" / "sweep.py").write_text(FAKE_SWEEP.format(factor=factor, sha=sha))
    return folder


def fake_run(factors: dict[str, list[float]], calls: list):
    """A `run` for run_rounds: side X's sweep of round r writes rows at factors[X][r-1] x n/256 ms."""
    def run(side: ab.Side, command: list[str], log: Path) -> int:
        folder = Path(next(a for a in command if a.startswith("hydra.sweep.dir=")).split("=", 1)[1])
        number = int(folder.parent.name.split("-")[1])
        calls.append((number, side.name))
        factor = factors[side.name][(number - 1) % len(factors[side.name])]
        folder.mkdir(parents=True)
        rows = [Row(status="ok", backend="sdpa", backend_source="builtin", precision="fp32", device="cpu",
                    device_name="cpu-a", mode="fwd", scope="core", batch=1, heads=2, q_len=n, seq_len=n,
                    head_dim=32, causal=False, scale="auto", input_std=1.0, seed=0, kv_heads=2,
                    time_ms=factor * n / 256, time_samples=10, other_cpu_frac=0.02, num_threads=2,
                    point_id=f"p{n}", git_sha="abc", timestamp="2026-01-01T00:00:00Z").to_dict() for n in (256, 512)]
        pd.DataFrame(rows).assign(causal="false").to_csv(folder / "results.csv", index=False)
        log.write_text("fake sweep\n")
        return 0
    return run


def sides() -> tuple[ab.Side, ab.Side]:
    """The same command twice, from this folder and interpreter."""
    return ab.make_sides(None, None, None)


def test_rounds_alternate_and_stop_once_every_point_is_settled(tmp_path):
    calls: list = []
    jitter = [1.0, 1.02, 0.98, 1.01, 0.99, 1.0]
    cmp = ab.run_rounds(sides(), ["seq_len=256,512"], tmp_path / "out",
                        run=fake_run({"A": jitter, "B": [2 * j for j in jitter[::-1]]}, calls), say=lambda _: None)
    assert calls[:4] == [(1, "A"), (1, "B"), (2, "B"), (2, "A")] and len(calls) == 12  # AB, BA, ...; 6 rounds
    assert list(cmp.matched["verdict"]) == ["slower", "slower"]
    manifest = pd.read_csv(tmp_path / "out" / rounds.MANIFEST)
    assert list(manifest.columns) == list(rounds.MANIFEST_COLUMNS) and len(manifest) == 12
    assert list(manifest["order"][:4]) == [1, 2, 1, 2] and set(manifest["compared"]) == {"sweep"}
    assert manifest["folder"].iloc[0] == "round-01/A" and (tmp_path / "out" / "round-01" / "A.log").is_file()
    assert "hydra.sweep.dir=" in manifest["command"].iloc[0] and "report=false" in manifest["command"].iloc[0]


def test_an_unsettled_point_gets_more_rounds_up_to_the_limit(tmp_path):
    calls: list = []
    lines: list[str] = []
    # B is 1.2x, 1.5x, 1.5x A by turns: the median lies past the CPU factor, the interval reaches back inside it
    cmp = ab.run_rounds(sides(), ["seq_len=256,512"], tmp_path / "out", max_rounds=9,
                        run=fake_run({"A": [1.0], "B": [1.2, 1.5, 1.5]}, calls), say=lines.append)
    assert len(calls) == 18 and set(cmp.matched["verdict"]) == {"not significant"}
    assert "after round 6: 0 of 2 points settled" in lines and "after round 9: 0 of 2 points settled" in lines
    # the same command twice, one round in three 1.5x apart: `same` by its median, but its interval reaches past
    # the factor, so the rounds go on to the limit (a median of more rounds moves less)
    calls.clear()
    cmp = ab.run_rounds(sides(), ["seq_len=256,512"], tmp_path / "same", max_rounds=8,
                        run=fake_run({"A": [1.0], "B": [1.0, 1.02, 1.5]}, calls), say=lambda _: None)
    assert len(calls) == 16 and set(cmp.matched["verdict"]) == {"same"}


def test_a_sweep_that_refuses_stops_the_rounds(tmp_path):
    def refuses(side, command, log):
        log.write_text("error: seq_len: expected an int\n")
        return 2
    with pytest.raises(ab.SideFailed, match="round 1, A: the sweep exited 2") as failed:
        ab.run_rounds(sides(), ["seq_len=x"], tmp_path / "out", run=refuses, say=lambda _: None)
    assert "expected an int" in str(failed.value)


def test_the_sides(tmp_path):
    a, b = ab.make_sides(["sdpa", "chunked"], None, None)
    assert (a.label, b.label) == ("sdpa", "chunked") and a.overrides == ("backend=sdpa",) and a.path == ""
    assert a.python == b.python == sys.executable and a.cwd == b.cwd == Path.cwd()
    before, after = tmp_path / "before", tmp_path / "after"
    (before / ".venv" / "bin").mkdir(parents=True)
    (before / ".venv" / "bin" / "python").write_text("")
    after.mkdir()
    a, b = ab.make_sides(None, [str(before), str(after)], None)
    assert a.python == str(before / ".venv" / "bin" / "python") and b.python == sys.executable  # its venv, else this
    assert (a.cwd, b.cwd, a.path, b.path) == (before, after, str(before), str(after))
    assert a.label == f"{before}, python {a.python}" and a.overrides == ()
    a, b = ab.make_sides(None, None, None)
    assert (a.label, b.label) == ("A: the same command", "B: the same command")
    command = ab.sweep_command(a, ["seq_len=64", "report=true"], tmp_path / "r")
    assert command[1:4] == ["-m", "runners.sweep", "-m"] and "report=false" not in command
    assert "wandb.mode=disabled" in command and f"hydra.sweep.dir={tmp_path / 'r'}" in command


@pytest.mark.parametrize("args, message", [
    (["hydra.sweep.dir=x"], "hydra.sweep.dir: set by the A/B"),
    (["--backends", "sdpa", "naive", "backend=sdpa"], "backend: given by --backends"),
    (["--rounds", "4"], "--rounds: expected 6 <= --rounds"),
    (["--checkouts", ".", "/nowhere"], "--checkouts: /nowhere is not a checkout"),
    (["seq_len"], "'seq_len': expected KEY=VALUE"),
    (["--fail-on", "worse"], "--fail-on: expected some of"),
])
def test_refusals(args, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as refused:
        ab.main([*args, "--out", str(tmp_path / "out")])
    assert refused.value.code == 2 and message in capsys.readouterr().err


def test_an_existing_rounds_folder_is_not_overwritten(tmp_path, capsys):
    (tmp_path / rounds.MANIFEST).write_text("round\n")
    with pytest.raises(SystemExit):
        ab.main(["seq_len=64", "--out", str(tmp_path)])
    assert "already holds rounds" in capsys.readouterr().err


@pytest.mark.slow
def test_two_checkouts_through_the_command_line(tmp_path):
    """Each side's sweeps run from its own checkout (its code first on the path): B's code is twice as slow."""
    before = fake_checkout(tmp_path / "before", 1.0, "aaaa")
    after = fake_checkout(tmp_path / "after", 2.0, "bbbb")
    out = subprocess.run([sys.executable, "-m", "runners.ab", "--checkouts", str(before), str(after), "-m",
                          "seq_len=256,512", "--out", str(tmp_path / "ab"), "--fail-on", "slower"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1 and "failing on slower" in out.stderr, out.stdout + out.stderr
    cmp = pd.read_csv(tmp_path / "ab" / "comparison.csv")
    assert list(cmp["verdict"]) == ["slower", "slower"] and (cmp["rounds"] == 6).all()
    assert cmp["repro_a"].str.startswith("git checkout aaaa").all() and cmp["repro_b"].str.startswith("git checkout bbbb").all()
    for number in (1, 6):
        for side, checkout in (("A", before), ("B", after)):
            ran = json.loads((tmp_path / "ab" / f"round-{number:02d}" / side / "ran.json").read_text())
            assert ran["file"] == str(checkout / "runners" / "sweep.py") and ran["cwd"] == str(checkout)
            assert ran["argv"][0] == "-m" and "report=false" in ran["argv"]
    assert f"A = {before}" in out.stdout and "round 6: B" in out.stdout and "after round 6: 2 of 2 points settled" in out.stdout
    again = subprocess.run([sys.executable, "-m", "analysis.compare", str(tmp_path / "ab"), "--out",
                            str(tmp_path / "again")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and pd.read_csv(tmp_path / "again" / "comparison.csv")["verdict"].tolist() == ["slower"] * 2
