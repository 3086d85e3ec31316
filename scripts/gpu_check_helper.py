"""Small steps of scripts/gpu_check.sh that are easier in Python than in bash.

    python scripts/gpu_check_helper.py plan TOTAL_S RESERVE_S :: KIND NAME ARGS... :: ...   stage floors
    python scripts/gpu_check_helper.py merge OUT.csv SWEEP_DIR...   one CSV from several sweeps (rebuilt first)
    python scripts/gpu_check_helper.py summary OUT.csv              rows per sweep and status
    python scripts/gpu_check_helper.py errors OUT.tar.gz DIR        the jobs' error.txt files in one archive
    python scripts/gpu_check_helper.py fit OUT_DIR                  OUT_DIR cut to a few small files (--pack)

Only the standard library at the top: it must run before (or without) the project's dependencies.
`plan` composes the sweeps' configs with Hydra and `merge` rebuilds results.csv with runners.rows,
each importing them when it runs (and saying so when they are missing).
"""

from __future__ import annotations

import csv
import io
import math
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# What --pack leaves for a remote runner or batch system that copies back only a few small files: at
# most MAX_FILES files of at most MAX_FILE_BYTES each. `fit` makes OUT_DIR so; it keeps no folder.
MAX_FILES = 8
MAX_FILE_BYTES = 16 * 2**20
# Which files go first when there are too many: the tables and the report matter most.
KEEP_FIRST = ("results.csv", "summary.txt", "report.md", "report.tar.gz", "env.txt", "pytest.log", "sweep.log",
              "errors.tar.gz")


# --- the plan: every stage's floor, estimated from what it runs ------------------------------------
#
# Every stage is a fresh process. Its floor is START-UP + the sum of its points' (or tests') estimates,
# so a limit never cuts off the rows a stage exists for. The estimates (seconds, one H200), and why:
SWEEP_START_S = 10.0     # imports, CUDA start, Hydra, the device probes: 8-12 s before a first point
PYTEST_START_S = 10.0    # pytest's start: torch, CUDA, collecting the selected files
POINT_FIXED_S = 0.4      # a plain point beyond its timed calls: warm-up, memory call, float64 reference
                         # on the sampled rows, stability, the row's files (0.05-0.2 s measured on CPU
                         # at n = 256 per step; a GPU does each in well under 0.1 s)
POINT_TIMING_FACTOR = 1.25  # the timer's calls: budget.timing_s, plus do_bench's estimate calls (or, with fresh inputs,
                            # the kernel time's graph replays: 0.1 x timing_s, selfattn/measure/kernel_time.py)
COMPILE_S = {"fwd": 15.0, "fwd_bwd": 30.0}  # a cold compile (flex, compile=true): 5.5-8.3 s each on an H200
                                            # (torch 2.11, n = 4096, bf16), forward or forward+backward; about
                                            # twice that and more for a slower host, a cut row is the loss
TRITON_COMPILE_S = 3.0   # backend=triton: triton compiles its kernel once per variant (dtype, mask flags, block
                         # sizes), seconds each (fp32 with head_dim 128 longer); timed apart as compile_s,
                         # later points reuse it from triton's cache
TRITON_BACKWARD_COMPILE_S = 3.0  # and its three backward kernels with it (the back end's prepare compiles them
                                 # for every point: it is not told the mode); assumed as long as the forward's,
                                 # not measured on a GPU yet
TEST_S = 0.6             # a CUDA test at small sizes, on average: most take 0.1-0.5 s (a host-sync count,
                         # a forced kernel, a memory peak), a few 2-10 s (do_bench agreement, the OOM
                         # test's fresh process)
COMPILED_TEST_S = 40.0   # a test of the compiled back ends ("compiled" or "flex" in its id, as the stage
                         # selects them): a cold flex forward takes 10-20 s, forward+backward 20-40 s
                         # (one compiled back end per test: three in one outran its 60 s limit)
UNCOLLECTED_TESTS_S = 60.0  # a test stage whose collection did not finish in time (the plan's limit)
XDIST_START_S = 10.0     # pytest-xdist's workers (`-n N`): each starts torch and collects again, at once
PARALLEL_COMPILES = 5    # cold compiles at once before they slow each other (16 cores: inductor's
                         # compile workers share them): N workers make each compile N/5 times as long
                         # (eight at once on an H200: the slowest 43 s, all in 65 s)
MIN_COMPILED_STAGE_S = 60.0  # a stage with a compiled point: cold compiles spread 2x, never less (28-32 s
                             # measured for flex's and compile_option's two points on an H200)
FIXED_S = {              # steps whose work does not depend on a grid
    "env": (10.0, "nvidia-smi, Python/torch/triton versions (torch import, CUDA start)"),
    "deps": (10.0, "pip install --no-index of the hydra-core, omegaconf, antlr4 wheels (3-5 s)"),
    "plan": (35.0, "this plan: Hydra composes each sweep, pytest collects each test stage (at once; one collection "
                   "alone took 14 s on an H200 machine)"),
    "results": (6.0, "runners.rows rebuilds each sweep's results.csv from its row files, then the merge"),
    "side_by_side": (5.0, "benchmarks/gpu_side_by_side.py: quadratic_cost's rows as one table and its two checks "
                          "(pandas, no torch)"),
    "report": (25.0, "python -m analysis.report: claims and PNG figures from ~100 merged rows"),
}
PER_TEST_TIMEOUT_S = 30.0  # pytest-timeout per test; a stage of compiled tests gives each its whole floor
                           # but its start-up. Always below the stage's limit: a hung test fails, and pytest
                           # still prints its summary line
SEP = "::"


@dataclass
class StagePlan:
    name: str
    kind: str                 # fixed | tests | sweep
    estimate_s: float = 0.0
    floor_s: int = 0
    points: int | None = None  # sweep points or tests; None for a fixed step
    why: str = ""
    per_test_timeout_s: int | None = None
    problem: str = ""         # why the stage cannot be planned (it is skipped)


ROOT = Path(__file__).resolve().parents[1]


def _conf_dir() -> Path:
    return ROOT / "conf"


def _on_path() -> None:
    """The checkout's packages importable, as gpu_check.sh's PYTHONPATH makes them."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def sweep_points(args: list[str]) -> list[Any]:
    """The ParsedJob of every job `python -m runners.sweep ARGS` would launch (Hydra's basic sweeper).

    The experiment's `hydra.sweeper.params` and the command line's sweeps are split as the sweeper
    splits them; each job's config is composed (once per choice of config groups, the other
    overrides set on it) and parsed by runners.config.parse_job, as the job itself parses it.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    _on_path()
    from runners import config, hydra_private

    config.register_resolvers()
    parser = OverridesParser.create()
    # -m and hydra.* (the sweep folder) do not change a point
    args = [a for a in args if a not in ("-m", "--multirun") and not a.lstrip("+~").startswith("hydra.")]
    # the config groups: conf/'s folders and the ones runners/config.py stores from the code (backend, precision)
    groups = {p.name for p in _conf_dir().iterdir() if p.is_dir()} | set(config.NODES)
    fixed = [a for a in args if not parser.parse_override(a).is_sweep_override()]
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(_conf_dir()), version_base="1.3"):
            base = compose("config", overrides=fixed, return_hydra_config=True)
            params = base.hydra.sweeper.get("params")
            params = (OmegaConf.to_container(params, resolve=True) if params is not None else None) or {}
            arguments = [f"{k}={v}" for k, v in params.items()] + args
            batches = hydra_private.split_sweep(parser.parse_overrides(arguments))  # behind its version check
            if batches is None:
                raise RuntimeError("this Hydra's basic sweeper cannot split the grid (runners/hydra_private.py)")
            jobs = [job for batch in batches for job in batch]
            composed: dict[tuple[str, ...], Any] = {}
            parsed = []
            for job in jobs:
                overrides = parser.parse_overrides(job)
                chosen = tuple(o.input_line for o in overrides if o.get_key_element().lstrip("+~") in groups)
                if chosen not in composed:
                    composed[chosen] = compose("config", overrides=list(chosen))
                cfg = composed[chosen].copy()
                for o in overrides:
                    if o.input_line not in chosen:
                        OmegaConf.update(cfg, o.get_key_element().lstrip("+~"), o.value(), force_add=True)
                parsed.append(config.parse_job(OmegaConf.to_container(cfg, resolve=True)))
    finally:
        GlobalHydra.instance().clear()
    return parsed


def plan_sweep(name: str, args: list[str]) -> StagePlan:
    """A sweep stage's floor: start-up + per point (timed calls + fixed work, + a cold compile)."""
    stage = StagePlan(name, "sweep")
    try:
        jobs = sweep_points(args)
        from selfattn.backends import get_backend
    except Exception as exc:  # Hydra missing, a bad override: the stage cannot run either
        stage.problem = f"cannot compose its config ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        return stage
    plain, compiled, invalid = [], Counter(), 0
    triton_variants: set[tuple] = set()
    seconds = SWEEP_START_S
    for job in jobs:
        if job.point is None:
            invalid += 1  # an invalid row: written at once
            continue
        point_s = POINT_FIXED_S + POINT_TIMING_FACTOR * job.budget.timing_s
        plain.append(point_s)
        seconds += point_s
        if get_backend(job.point.backend).compiles(dict(job.point.backend_options)):
            compiled[job.point.mode] += 1
            seconds += COMPILE_S[job.point.mode]
        if job.point.backend == "triton":  # one kernel compile per variant, then triton's cache
            triton_variants.add((job.point.precision, job.point.causal, job.point.window is not None,
                                 job.point.pad_frac, job.point.documents, tuple(sorted(job.point.backend_options.items()))))
    triton_compile_s = TRITON_COMPILE_S + TRITON_BACKWARD_COMPILE_S
    seconds += triton_compile_s * len(triton_variants)
    stage.points, stage.estimate_s = len(jobs), seconds
    timing = sorted({f"{POINT_FIXED_S:g} + {POINT_TIMING_FACTOR:g} x timing_s {j.budget.timing_s:g}"
                     for j in jobs if j.point is not None})
    parts = [f"{SWEEP_START_S:g} s start", f"{len(plain)} points x {max(plain, default=0):.2f} s ({'; '.join(timing)})"]
    parts += [f"{n} cold {mode} compiles x {COMPILE_S[mode]:g} s" for mode, n in sorted(compiled.items())]
    if triton_variants:
        parts.append(f"{len(triton_variants)} triton kernel compiles x {triton_compile_s:g} s "
                     f"(forward {TRITON_COMPILE_S:g} + backward {TRITON_BACKWARD_COMPILE_S:g})")
    if invalid:
        parts.append(f"{invalid} invalid (no time)")
    stage.why = " + ".join(parts)
    stage.floor_s = math.ceil(seconds)
    if compiled and stage.floor_s < MIN_COMPILED_STAGE_S:
        stage.floor_s = int(MIN_COMPILED_STAGE_S)
        stage.why += f"; raised to {MIN_COMPILED_STAGE_S:g} s, the least for a stage that compiles"
    return stage


def _collect(args: list[str]) -> subprocess.Popen:
    """pytest collecting what `pytest ARGS` would run (without xdist's -n: one process lists the same)."""
    args = [a for i, a in enumerate(args) if a not in ("-n", "--numprocesses") and not a.startswith("--numprocesses=")
            and not (i > 0 and args[i - 1] in ("-n", "--numprocesses"))]
    return subprocess.Popen([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                            cwd=_conf_dir().parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def is_compiled_test(node_id: str) -> bool:
    """A test of the compiled back ends (torch.compile, flex): what `-k "compiled or flex"` selects."""
    return "compiled" in node_id.lower() or "flex" in node_id.lower()


def _workers(args: list[str]) -> int:
    """pytest-xdist's `-n N` among the arguments (1 without it)."""
    for i, arg in enumerate(args):
        value = args[i + 1] if arg in ("-n", "--numprocesses") and i + 1 < len(args) else (
            arg.split("=", 1)[1] if arg.startswith("--numprocesses=") else None)
        if value is not None:
            return int(value) if value.isdigit() else 1
    return 1


def collect_deadline() -> float:
    """When every collection must have listed its tests (time.monotonic()): GPU_CHECK_COLLECT_S from now, one
    deadline for all the collections, which run at once (gpu_check.sh sets it a little under the plan's limit;
    a wait per stage let two stages wait twice as long as the plan had)."""
    return time.monotonic() + float(os.environ.get("GPU_CHECK_COLLECT_S", "300"))


def plan_tests(name: str, args: list[str], collecting: subprocess.Popen, deadline: float | None = None) -> StagePlan:
    """A pytest stage's floor: start-up + its collected tests (a compiled one at COMPILED_TEST_S); the
    collection is waited for until `deadline` (collect_deadline(), by default from now)."""
    stage = StagePlan(name, "tests")
    deadline = collect_deadline() if deadline is None else deadline
    wait_s = float(os.environ.get("GPU_CHECK_COLLECT_S", "300"))
    try:
        out, _ = collecting.communicate(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        collecting.kill()
        collecting.communicate()
        stage.points, stage.estimate_s = None, PYTEST_START_S + UNCOLLECTED_TESTS_S
        stage.floor_s = math.ceil(stage.estimate_s)
        stage.per_test_timeout_s = int(UNCOLLECTED_TESTS_S)  # unknown tests: any may need the whole stage
        stage.why = f"pytest did not list its tests within {wait_s:g} s: {PYTEST_START_S:g} s start + {UNCOLLECTED_TESTS_S:g} s assumed"
        return stage
    ids = [line.strip() for line in out.splitlines() if "::" in line and not line.startswith(("ERROR", "FAILED"))]
    if not ids:
        stage.problem = "pytest collected no test (" + (out.strip().splitlines() or ["no output"])[-1] + ")"
        stage.estimate_s, stage.floor_s, stage.points = PYTEST_START_S, int(PYTEST_START_S), 0
        stage.why = f"{PYTEST_START_S:g} s start, no test"
        stage.per_test_timeout_s = int(PER_TEST_TIMEOUT_S)
        return stage
    heavy = [i for i in ids if is_compiled_test(i)]
    workers = _workers(args)
    stage.points = len(ids)
    seconds = PYTEST_START_S + TEST_S * (len(ids) - len(heavy))
    stage.why = f"{PYTEST_START_S:g} s start + {len(ids) - len(heavy)} tests x {TEST_S:g} s"
    if heavy and workers > 1:  # xdist: the compiled tests in rounds of `workers` at once
        rounds, slower = math.ceil(len(heavy) / workers), max(1.0, workers / PARALLEL_COMPILES)
        seconds += XDIST_START_S + rounds * COMPILED_TEST_S * slower
        stage.why += (f" + {XDIST_START_S:g} s for {workers} workers + {len(heavy)} compiled in {rounds} round(s)"
                      f" x {COMPILED_TEST_S:g} s x {slower:g} ({workers} compiling at once)")
    elif heavy:
        seconds += COMPILED_TEST_S * len(heavy)
        stage.why += f" + {len(heavy)} compiled x {COMPILED_TEST_S:g} s"
    stage.estimate_s = seconds
    stage.floor_s = math.ceil(seconds)
    per_test = stage.floor_s - PYTEST_START_S - (XDIST_START_S if workers > 1 else 0) if heavy else PER_TEST_TIMEOUT_S
    stage.per_test_timeout_s = int(max(5.0, min(per_test, stage.floor_s - PYTEST_START_S / 2)))
    return stage


def plan(total_s: int, reserve_s: int, specs: list[list[str]]) -> list[StagePlan]:
    """Each stage's estimate and floor, in order (specs: [KIND, NAME, ARGS...] each)."""
    deadline = collect_deadline()
    collecting = {spec[1]: _collect(spec[2:]) for spec in specs if spec[0] == "tests"}  # at once, meanwhile compose
    stages = []
    for kind, name, *args in specs:
        if kind == "fixed":
            seconds, why = FIXED_S[name]
            stages.append(StagePlan(name, kind, seconds, math.ceil(seconds), why=why))
        elif kind == "tests":
            stages.append(plan_tests(name, args, collecting[name], deadline))
        elif kind == "sweep":
            stages.append(plan_sweep(name, args))
        else:
            raise ValueError(f"plan: unknown stage kind {kind!r} (fixed, tests, sweep)")
    return stages


def print_plan(stages: list[StagePlan], total_s: int, reserve_s: int) -> int:
    """The plan as a table (lines starting with '#') and one `stage NAME FLOOR PER_TEST_TIMEOUT` line
    per stage the script reads; a stage that cannot be planned reads `stage NAME 0 0 PROBLEM`."""
    print(f"# plan: each stage's floor = its start-up + its points' (or tests') estimates; "
          f"limits = shares of the time left by floor (total {total_s} s, {reserve_s} s kept for packing)")
    print(f"# {'stage':18s} {'points':>6s} {'estimate':>8s} {'floor':>6s}  why")
    for s in stages:
        points = "-" if s.points is None else str(s.points)
        why = s.why if not s.problem else f"skipped: {s.problem}"
        if s.per_test_timeout_s:
            why += f"; pytest --timeout={s.per_test_timeout_s} per test"
        print(f"# {s.name:18s} {points:>6s} {s.estimate_s:7.0f}s {s.floor_s:5d}s  {why}")
    need = sum(s.floor_s for s in stages) + reserve_s
    fits = need <= total_s
    print(f"# plan: {need} s of floors with the reserve, {'within' if fits else 'OVER'} the total {total_s} s"
          + ("" if fits else f" by {need - total_s} s: every limit is cut to its share"))
    for s in stages:
        print(f"stage {s.name} {0 if s.problem else s.floor_s} {s.per_test_timeout_s or 0}"
              + (f" {s.problem}" if s.problem else ""))
    return 0


def parse_plan_args(argv: list[str]) -> tuple[int, int, list[list[str]]]:
    """TOTAL_S RESERVE_S :: KIND NAME ARGS... :: KIND NAME ARGS... (the :: between stages)."""
    total_s, reserve_s, rest = int(argv[0]), int(argv[1]), argv[2:]
    specs: list[list[str]] = []
    for arg in rest:
        if arg == SEP:
            specs.append([])
        elif not specs:
            raise ValueError(f"plan: expected {SEP} before {arg!r}")
        else:
            specs[-1].append(arg)
    if any(len(spec) < 2 for spec in specs):
        raise ValueError("plan: every stage needs KIND NAME")
    return total_s, reserve_s, specs


def rebuild(sweep_dirs: list[Path]) -> None:
    """Build each sweep's results.csv from its row files first (`python -m runners.rows DIR`): a sweep
    cut off by its stage's timeout wrote its rows but not its CSV (the multirun's end never came)."""
    folders = [d for d in sweep_dirs if d.is_dir()]
    if not folders:
        return
    _on_path()
    try:
        from runners import rows
    except ImportError as exc:
        print(f"merge: cannot rebuild results.csv from row files ({exc}); merging what is there", file=sys.stderr)
        return
    for folder in folders:
        for sweep in rows.sweep_folders(folder):
            try:
                path, kept = rows.rebuild_csv(sweep)  # type: ignore[misc]  (wait=True always builds)
            except OSError as exc:
                print(f"merge: {sweep}: could not rebuild results.csv ({exc}); using what is there", file=sys.stderr)
                continue
            print(f"merge: {path}: {len(kept)} rows, rebuilt from its row files")


def merge(out_csv: Path, sweep_dirs: list[Path]) -> int:
    """Concatenate each sweep's results.csv (rebuilt from its row files) into out_csv (union of
    columns, first-seen order)."""
    rebuild(sweep_dirs)
    columns: list[str] = []
    rows: list[dict[str, str]] = []
    for sweep_dir in sweep_dirs:
        path = sweep_dir / "results.csv" if sweep_dir.is_dir() else sweep_dir
        if not path.is_file():
            print(f"merge: {path}: missing (that sweep wrote no row)", file=sys.stderr)
            continue
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            columns.extend(c for c in reader.fieldnames or [] if c not in columns)
            rows.extend(reader)
    if not rows:
        print(f"merge: no rows in {', '.join(map(str, sweep_dirs))}", file=sys.stderr)
        return 1
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    with open(out_csv, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
    print(f"merge: {len(rows)} rows -> {out_csv}")
    return 0


def summary(csv_path: Path) -> int:
    """One line per sweep (statuses), then one per back end/kernel/precision with ok counts."""
    if not csv_path.is_file():
        print(f"results: {csv_path} missing")
        return 1
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    device_names = sorted({r.get("device_name", "") for r in rows} - {""})
    print(f"results: {len(rows)} rows on {', '.join(device_names) or 'an unknown device'}")
    by_sweep: dict[str, Counter] = {}
    for row in rows:
        by_sweep.setdefault(row.get("sweep_id") or "?", Counter())[row.get("status") or "?"] += 1
    for sweep, counts in by_sweep.items():
        print(f"  {sweep}: " + ", ".join(f"{n} {s}" for s, n in counts.most_common()))
    by_variant: dict[tuple[str, str, str], Counter] = {}
    for row in rows:
        key = (row.get("backend", ""), row.get("kernel", "") or "-", row.get("precision", ""))
        by_variant.setdefault(key, Counter())[row.get("status") or "?"] += 1
    print("  back end / kernel / precision: ok of rows (other statuses)")
    for (backend, kernel, precision), counts in sorted(by_variant.items()):
        others = ", ".join(f"{n} {s}" for s, n in counts.most_common() if s != "ok")
        print(f"    {backend:8s} {kernel:14s} {precision:5s} {counts['ok']}/{sum(counts.values())}"
              + (f" ({others})" if others else ""))
    return 0


ERROR_FILE = "error.txt"  # selfattn.measure.failures.ERROR_FILE: a failed job's traceback beside its row


def errors(archive: Path, folder: Path) -> int:
    """Every error.txt under `folder` into one .tar.gz (paths from `folder`: sweep/job/error.txt)."""
    found = sorted(folder.rglob(ERROR_FILE)) if folder.is_dir() else []
    if not found:
        print(f"errors: no {ERROR_FILE} under {folder}")
        return 0
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        for path in found:
            tar.add(path, arcname=str(path.relative_to(folder)))
    print(f"errors: {len(found)} {ERROR_FILE} files -> {archive}")
    return 0


def _cut(path: Path, limit: int) -> None:
    """Keep a text file's head and tail (the tail holds the outcome) within `limit` bytes."""
    data = path.read_bytes()
    marker = f"\n[... {len(data) - limit + 200} bytes cut by gpu_check_helper.py fit ...]\n".encode()
    head = limit // 8
    tail = limit - head - len(marker) - 200
    path.write_bytes(data[:head] + marker + data[-tail:])


def _shrink_archive(path: Path, limit: int) -> list[str]:
    """Rebuild a .tar.gz without its largest files until it fits; returns the names left out."""
    with tarfile.open(path) as archive:
        members = [m for m in archive.getmembers() if m.isfile()]
        blobs = {m.name: archive.extractfile(m).read() for m in members}  # type: ignore[union-attr]
    dropped: list[str] = []
    kept = sorted(members, key=lambda m: m.size)
    while kept:
        with tarfile.open(path, "w:gz") as archive:
            for member in kept:
                archive.addfile(member, fileobj=io.BytesIO(blobs[member.name]))
        if path.stat().st_size <= limit:
            break
        dropped.append(kept.pop().name)  # the largest first
    return dropped


def fit(out_dir: Path, max_files: int = MAX_FILES, max_bytes: int = MAX_FILE_BYTES) -> int:
    """Make out_dir hold at most `max_files` plain files of at most `max_bytes`, no folder."""
    if not out_dir.is_dir():
        print(f"fit: {out_dir}: not a folder", file=sys.stderr)
        return 1
    for folder in [p for p in out_dir.iterdir() if p.is_dir()]:
        shutil.rmtree(folder)
        print(f"fit: removed folder {folder.name}/ (pack it first: --pack archives the report)")
    for path in sorted(out_dir.iterdir()):
        if path.stat().st_size <= max_bytes:
            continue
        if path.name.endswith(".tar.gz"):
            dropped = _shrink_archive(path, max_bytes)
            print(f"fit: {path.name}: left out {len(dropped)} of its largest files to stay under {max_bytes} bytes: "
                  + ", ".join(dropped))
        else:
            _cut(path, max_bytes)
            print(f"fit: {path.name}: cut to its head and tail ({max_bytes} bytes)")
    files = sorted(out_dir.iterdir(), key=lambda p: (KEEP_FIRST.index(p.name) if p.name in KEEP_FIRST else 99, p.name))
    for extra in files[max_files:]:
        extra.unlink()
        print(f"fit: removed {extra.name}: more than {max_files} files")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "plan":
        total_s, reserve_s, specs = parse_plan_args(argv[1:])
        return print_plan(plan(total_s, reserve_s, specs), total_s, reserve_s)
    if len(argv) == 3 and argv[0] == "errors":
        return errors(Path(argv[1]), Path(argv[2]))
    if len(argv) >= 3 and argv[0] == "merge":
        return merge(Path(argv[1]), [Path(p) for p in argv[2:]])
    if len(argv) == 2 and argv[0] == "summary":
        return summary(Path(argv[1]))
    if len(argv) == 2 and argv[0] == "fit":
        return fit(Path(argv[1]))
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
