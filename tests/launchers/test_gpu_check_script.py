"""scripts/gpu_check.sh: its dry run works on any machine and shows the whole check and its plan; bad
arguments fail early; the helper's steps (plan, merge, errors, fit) work on what a real run leaves.

The real run needs a GPU (docs/gpu.md); on CPU the dry run is what CI can check: every stage is
there, with the sizes and overrides docs/gpu.md lists, each stage's floor estimated from its composed
grid or its collected tests, and no stage is run, nothing written.
"""

from __future__ import annotations

import csv
import importlib.util
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
HELPER = ROOT / "scripts" / "gpu_check_helper.py"


def _run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def _helper():
    """scripts/gpu_check_helper.py as a module (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location("gpu_check_helper", HELPER)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_check_helper", module)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return sys.modules["gpu_check_helper"]


STAGES = ["env", "deps", "plan", "tests_gpu", "tests_compiled", "quadratic_cost", "sdpa_kernels",
          "scaling_stability", "flex", "compile_option", "fp8", "results", "side_by_side", "report"]
RESERVE_S = 10
DEFAULT_TOTAL_S = 480  # 8 minutes: with start-up, a rerun still fits in 15 minutes of GPU time


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[Path, Path, subprocess.CompletedProcess]:
    """One dry run with --pack (it composes every sweep and collects every test stage: tens of seconds
    on a busy 2-core CPU), shared by the tests that read it."""
    tmp = tmp_path_factory.mktemp("dry")
    out_dir, wheels = tmp / "out", tmp / "wheels"
    done = _run(str(out_dir), "--wheels", str(wheels), "--pack", "--dry-run", timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    return out_dir, wheels, done


def _plan(text: str) -> dict[str, dict[str, str]]:
    """The plan's table: stage -> points, estimate, floor, why (the `# NAME POINTS ESTs FLOORs WHY` lines)."""
    rows = {}
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[0] == "#" and parts[1] in STAGES and parts[3].endswith("s"):
            rows[parts[1]] = dict(points=parts[2], estimate=parts[3], floor=parts[4], why=parts[5])
    return rows


def _limits(text: str) -> dict[str, int]:
    """Stage name -> its limit, from the dry run's `# stage limits: NAME Ns ...` line."""
    line = next(line for line in text.splitlines() if line.startswith("# stage limits: "))
    words = line.removeprefix("# stage limits: ").split(";")[0].split()
    return {name: int(limit.rstrip("s")) for name, limit in zip(words[::2], words[1::2])}


def test_dry_run_prints_the_plan_and_every_stage_and_writes_nothing(dry_run) -> None:
    out_dir, wheels, done = dry_run
    text = done.stdout
    assert not out_dir.exists(), "a dry run must write nothing"
    commands = [line for line in text.splitlines() if line.startswith("+ ")]
    assert any("pip install -q --no-index --no-deps --target" in c and str(wheels) in c for c in commands)
    sweeps = [c for c in commands if "-m runners.sweep" in c]
    assert len(sweeps) == 6
    # the launch diagnostic: quadratic_cost's call vs kernel time at n = 1024 and 4096, triton beside sdpa
    assert any("scripts/launch_diagnostic.py" in c and "--seq-len 1024,4096" in c for c in commands)
    assert all("device=cuda" in c and "report=false" in c and "budget.max_point_s=" in c for c in sweeps)
    assert all("wandb.mode=disabled" in c for c in sweeps)  # the GPU image has no wandb
    joined = " ".join(sweeps)
    assert "experiment=quadratic_cost" in joined and "experiment=scaling_stability" in joined
    assert "backend.kernel=auto,flash,efficient,math,cudnn" in joined
    assert "precision=fp32,tf32,bf16,fp16" in joined
    assert "backend=flex" in joined and "backend=naive,chunked backend.compile=true" in joined  # compiled back ends
    assert any("-m analysis.report" in c and str(out_dir / "results.csv") in c for c in commands)
    assert any("report.tar.gz" in c for c in commands)
    assert any("gpu_check_helper.py errors" in c and str(out_dir / "errors.tar.gz") in c for c in commands)
    assert any("gpu_check_helper.py fit" in c and str(out_dir) in c for c in commands)
    # the plan: every stage, its points counted from the composed configs and collected tests
    plan = _plan(text)
    assert list(plan) == STAGES
    assert plan["quadratic_cost"]["points"] == "48" and plan["sdpa_kernels"]["points"] == "20"
    # the project's triton kernels beside sdpa (flash in bf16) over n = 1024..16384, causal and not, forward and
    # forward+backward, their compiles planned (the backward's with the forward's)
    assert ("experiment=quadratic_cost backend=naive,sdpa,chunked,triton mode=fwd,fwd_bwd precision=bf16 "
            "seq_len=1024,4096,16384") in joined
    assert "2 triton kernel compiles x 6 s (forward 3 + backward 3)" in plan["quadratic_cost"]["why"]
    # the side-by-side check reads quadratic_cost's rows, after the results stage rebuilt their CSV
    side = [c for c in commands if "gpu_side_by_side.py" in c]
    assert len(side) == 1 and re.search(r"gpu_side_by_side\.py --csv \S+/quadratic_cost --sizes 1024 4096 16384 >",
                                        side[0])
    assert commands.index(side[0]) > next(i for i, c in enumerate(commands) if "gpu_check_helper.py merge" in c)
    assert plan["flex"]["points"] == "2" and plan["compile_option"]["points"] == "2"
    assert plan["fp8"]["points"] == "8" and "precision=fp8_e4m3 " in joined  # the FP8 grid, cut to fit
    assert "backend.fp8_matmul=auto,dequant" in joined  # auto (scaled_mm on the GPU) beside its dequant twins
    assert int(plan["tests_gpu"]["points"]) > 0 and int(plan["tests_compiled"]["points"]) > 0
    assert f"cold fwd_bwd compiles x {_helper().COMPILE_S['fwd_bwd']:g} s" in plan["flex"]["why"] and "cold fwd compiles" in plan["compile_option"]["why"]
    assert "skipped" not in " ".join(row["why"] for row in plan.values())
    assert f"within the total {DEFAULT_TOTAL_S} s" in text


def test_stage_floors_fit_their_grids_and_the_limits_fit_one_call(dry_run) -> None:
    text = dry_run[2].stdout
    plan, limits = _plan(text), _limits(text)
    assert list(limits) == STAGES
    floors = {name: int(row["floor"].rstrip("s")) for name, row in plan.items()}
    estimates = {name: int(row["estimate"].rstrip("s")) for name, row in plan.items()}
    assert all(floors[name] >= estimates[name] for name in STAGES)  # a floor is never below its estimate
    least = _helper().MIN_COMPILED_STAGE_S  # cold compiles took 5.5-8.3 s each on an H200; the stages 28-32 s
    assert least >= 60 and floors["flex"] >= least and floors["compile_option"] >= least
    # the floors fit the default total, so every stage's limit is at least its floor
    assert sum(floors.values()) + RESERVE_S <= DEFAULT_TOTAL_S
    assert all(limits[name] >= floors[name] for name in STAGES)
    assert limits["flex"] >= least and limits["compile_option"] >= least
    assert sum(limits.values()) + RESERVE_S <= DEFAULT_TOTAL_S and f"total {DEFAULT_TOTAL_S}s" in text


def test_the_gpu_tests_run_first_and_every_test_has_a_timeout_below_its_stage(dry_run) -> None:
    text = dry_run[2].stdout
    limits = _limits(text)
    tests = [line for line in text.splitlines() if line.startswith("+ timeout ") and "-m pytest" in line]
    assert len(tests) == 2
    first, compiled = tests
    assert first.index("tests/gpu") < first.index("tests/measure") < first.index("tests/backends")
    assert "-k not compiled and not flex and not variants and not isolate" in first.replace("\\", "")
    assert "-k (compiled or flex) and not fp16 and not fp32 and not variants tests " in compiled.replace("\\", "")
    for line, name in ((first, "tests_gpu"), (compiled, "tests_compiled")):
        stage_limit = int(line.split()[2])
        per_test = int(line.split("--timeout=")[1].split()[0])
        assert stage_limit == limits[name] and 0 < per_test < stage_limit
    assert "-n 8" in compiled  # the compiled tests side by side (pytest-xdist on the GPU image)


def test_the_plan_composes_each_sweep_and_parses_its_points() -> None:
    helper = _helper()
    common = ["device=cuda", "report=false", "budget.max_point_s=120", "wandb.mode=disabled"]
    jobs = helper.sweep_points(["-m", "name=flex_check", "backend=flex", "mode=fwd,fwd_bwd", "causal=true",
                                "seq_len=4096", "precision=bf16", "budget.timing_s=0.1", *common,
                                "hydra.sweep.dir=/nowhere/flex"])
    assert [(j.point.backend, j.point.mode, j.point.causal, j.point.seq_len, j.point.precision) for j in jobs] == [
        ("flex", "fwd", True, 4096, "bf16"), ("flex", "fwd_bwd", True, 4096, "bf16")]
    assert all(j.point.device == "cuda" and j.budget.timing_s == 0.1 for j in jobs)
    # an experiment's own sweep, the command line's values winning over it, at the GPU's sizes
    jobs = helper.sweep_points(["experiment=scaling_stability", "head_dim=16,1024", "input_std=1.0", *common])
    assert len(jobs) == 2 * 2 * 4  # head_dim x scale x the GPU's four precisions
    assert {j.point.seq_len for j in jobs} == {4096} and {j.point.head_dim for j in jobs} == {16, 1024}
    assert {j.point.precision for j in jobs} == {"fp32", "tf32", "bf16", "fp16"}
    stage = helper.plan_sweep("flex", ["name=flex_check", "backend=flex", "mode=fwd,fwd_bwd", *common])
    assert stage.points == 2 and stage.floor_s >= helper.MIN_COMPILED_STAGE_S and not stage.problem
    assert stage.estimate_s >= helper.SWEEP_START_S + helper.COMPILE_S["fwd"] + helper.COMPILE_S["fwd_bwd"]
    bad = helper.plan_sweep("typo", ["experiment=no_such_study"])
    assert bad.problem.startswith("cannot compose its config") and bad.floor_s == 0


def test_a_plan_over_the_total_says_so(capsys) -> None:
    helper = _helper()
    stages = [helper.StagePlan("flex", "sweep", 70.0, 80, 2, "why"), helper.StagePlan("report", "fixed", 25.0, 25)]
    helper.print_plan(stages, 100, 10)
    out = capsys.readouterr().out
    assert "115 s of floors with the reserve, OVER the total 100 s by 15 s" in out
    assert "stage flex 80 0" in out.splitlines() and "stage report 25 0" in out.splitlines()


def _row(point_id: str, status: str = "ok") -> dict:
    return {"status": status, "point_id": point_id, "backend": "naive", "seq_len": 128, "sweep_id": "cut",
            "timestamp": "2026-12-01T00:00:00Z"}


def test_merge_rebuilds_the_csv_of_a_sweep_cut_off_by_its_limit(tmp_path: Path) -> None:
    """A sweep killed after its results.csv was last built (or before it ever was) still gives every row."""
    sys.path.insert(0, str(ROOT))
    from runners import row_store

    cut, whole = tmp_path / "cut", tmp_path / "whole"
    for folder in (cut, whole):
        folder.mkdir()
        (folder / "sweep.json").write_text("{}")
    for i in range(3):  # three finished jobs; the CSV was built after the first only
        path = row_store.write_row(cut / str(i), _row(f"p{i}"))
        row_store.index_row(cut, path, _row(f"p{i}"))
        if i == 0:
            (cut / "results.csv").write_text("status,point_id\nok,p0\n")
    (cut / "3").mkdir()  # a job killed mid-point: no row
    path = row_store.write_row(whole / "0", _row("q0", "error"))
    row_store.index_row(whole, path, _row("q0", "error"))  # never built at all
    out_csv = tmp_path / "out" / "results.csv"
    done = subprocess.run([sys.executable, str(HELPER), "merge", str(out_csv), str(cut), str(whole), str(tmp_path / "gone")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    with open(out_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["point_id"] for r in rows) == ["p0", "p1", "p2", "q0"]
    assert "rebuilt from its row files" in done.stdout and "merge: 4 rows" in done.stdout


def test_error_tracebacks_are_packed_into_one_file(tmp_path: Path) -> None:
    work = tmp_path / "work"
    for sweep, job in (("flex", "0"), ("compile_option", "1")):
        (work / sweep / job).mkdir(parents=True)
        (work / sweep / job / "error.txt").write_text(f"Traceback: {sweep} {job}\n")
    (work / "flex" / "1").mkdir()
    (work / "flex" / "1" / "row.json").write_text("{}")
    archive = tmp_path / "out" / "errors.tar.gz"
    done = subprocess.run([sys.executable, str(HELPER), "errors", str(archive), str(work)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == ["compile_option/1/error.txt", "flex/0/error.txt"]
        assert tar.extractfile("flex/0/error.txt").read() == b"Traceback: flex 0\n"  # type: ignore[union-attr]
    # the eighth file: fit keeps it beside the seven others
    out = archive.parent
    for name in ("env.txt", "pytest.log", "sweep.log", "results.csv", "summary.txt", "report.md", "report.tar.gz"):
        (out / name).write_text(name)
    assert subprocess.run([sys.executable, str(HELPER), "fit", str(out)], capture_output=True, timeout=60).returncode == 0
    assert len(list(out.iterdir())) == 8 and archive.is_file()
    # no traceback: no archive, and nothing fails
    empty = subprocess.run([sys.executable, str(HELPER), "errors", str(tmp_path / "none.tar.gz"), str(tmp_path / "nowhere")],
                           capture_output=True, text=True, timeout=60)
    assert empty.returncode == 0 and "no error.txt" in empty.stdout and not (tmp_path / "none.tar.gz").exists()


def test_fit_leaves_what_the_device_tool_brings_back(tmp_path: Path) -> None:
    import io
    import tarfile

    out = tmp_path / "out"
    (out / "report" / "figures").mkdir(parents=True)
    (out / "report" / "figures" / "fig.png").write_bytes(b"x")
    for name in ("env.txt", "pytest.log", "results.csv", "summary.txt", "report.md", "extra1.txt", "extra2.txt"):
        (out / name).write_text(name)
    (out / "sweep.log").write_bytes(b"first line\n" + b"x" * (17 * 2**20) + b"\nthe last line\n")
    with tarfile.open(out / "report.tar.gz", "w:gz") as archive:  # incompressible figures, 18 MiB in all
        for i, size in enumerate((2 * 2**20, 16 * 2**20)):
            data = __import__("os").urandom(size)
            info = tarfile.TarInfo(f"report/figures/fig{i}.png")
            info.size = size
            archive.addfile(info, io.BytesIO(data))
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check_helper.py"), "fit", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    left = sorted(out.iterdir())
    assert len(left) <= 8 and all(p.is_file() and p.stat().st_size <= 16 * 2**20 for p in left)
    names = {p.name for p in left}
    assert {"results.csv", "report.md", "report.tar.gz", "summary.txt", "sweep.log"} <= names
    log = (out / "sweep.log").read_bytes()
    assert log.startswith(b"first line") and log.endswith(b"the last line\n") and b"bytes cut" in log
    with tarfile.open(out / "report.tar.gz") as archive:
        assert archive.getnames() == ["report/figures/fig0.png"]  # the largest figure left out, said in the output
    assert "fig1.png" in done.stdout


@pytest.mark.parametrize("args, message", [
    ((), "OUT_DIR: missing"),
    (("out", "--frobnicate"), "unknown option --frobnicate"),
    (("out", "--total-s", "ten"), "--total-s: expected an integer"),
    (("a", "b"), "OUT_DIR given twice"),
], ids=["no-out-dir", "unknown-option", "bad-total", "two-out-dirs"])
def test_bad_arguments_fail_with_one_line(args: tuple[str, ...], message: str) -> None:
    done = _run(*args)
    assert done.returncode == 2
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_missing_wheels_folder_fails_before_running_anything(tmp_path: Path) -> None:
    done = _run(str(tmp_path / "out"), "--wheels", str(tmp_path / "nowhere"))
    assert done.returncode == 2 and "--wheels: no *.whl files" in done.stderr
    assert not (tmp_path / "out").exists()


def test_the_fallback_floors_name_every_planned_stage() -> None:
    """When the plan itself fails, the script's hard-coded floors stand in: a stage missing there got 0 s and the
    5 s minimum (the first H200 run's fp8 stage: 8 points cut off after 5 s)."""
    text = SCRIPT.read_text()
    order = text.split("ORDER=(", 1)[1].split(")", 1)[0].split()
    fallback = text.split("  WEIGHT=([", 1)[1].split(")\n", 1)[0]
    named = {entry.split("]=")[0].lstrip("[") for entry in ("[" + fallback).split()}
    assert set(order) == named, f"stages without a fallback floor: {set(order) - named}; unknown: {named - set(order)}"


def test_the_collections_share_one_deadline(monkeypatch) -> None:
    """Two test stages collect at once; each waits only for what is left of one deadline, so the plan ends within
    GPU_CHECK_COLLECT_S however many stages there are (a wait per stage ran the first H200 plan past its limit)."""
    helper = _helper()
    monkeypatch.setenv("GPU_CHECK_COLLECT_S", "1")
    slow = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], stdout=subprocess.PIPE, text=True)
            for _ in range(3)]
    deadline = helper.collect_deadline()
    started = time.monotonic()
    stages = [helper.plan_tests(f"tests_{i}", [], proc, deadline) for i, proc in enumerate(slow)]
    assert time.monotonic() - started < 2.5
    assert all(stage.points is None and "did not list" in stage.why for stage in stages)
