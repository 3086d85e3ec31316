#!/usr/bin/env bash
# CI's lowest-versions stage: every direct dependency at exactly the floor pyproject.toml declares, in a venv of its
# own, runs the quick tests (-m "not slow"), a 24-row sweep whose report must draw every figure its rows call
# for, and the report of the default sweep's committed rows (its ten figures). The main stage (.ci/run) tests
# the newest versions; this one proves the floors are true.
# torch: its floor (2.13) is the CPU build on this machine's disk, so nothing of several GB is downloaded here.
# Usage: bash scripts/ci_lowest.sh   (from anywhere; LOWEST_KEEP=1 keeps the venv and the sweep, and says where)
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
work=$(mktemp -d /tmp/selfattn-lowest.XXXXXX)
say() { echo "ci-lowest: $*"; }
# The stage's duration on its last line, passed or failed: CI's whole run has a time budget this stage shares.
finish() {
    local rc=$?
    if [[ $rc -eq 0 ]]; then say "took $((SECONDS - started)) s"; else say "FAILED (exit $rc) after $((SECONDS - started)) s"; fi
    if [[ -z ${LOWEST_KEEP:-} ]]; then rm -rf "$work"; else say "kept $work"; fi
}
trap finish EXIT

python3 -m venv "$work/venv"
# Active from here on, as a user's venv is: a test that runs a script calling `python3` (scripts/gpu_check.sh)
# gets the floors too, not whichever python3 the machine has on its PATH.
export VIRTUAL_ENV=$work/venv PATH=$work/venv/bin:$PATH
py=$work/venv/bin/python
mapfile -t pins < <(python3 scripts/floor_pins.py pyproject.toml test triton)
say "installing the floors: ${pins[*]}"
"$py" -m pip install -q --disable-pip-version-check "${pins[@]}"
"$py" -m pip install -q --disable-pip-version-check --no-deps -e .
"$py" -m pip check  # the floors and what they pulled in agree with each other
say "installed ($((SECONDS - started)) s): $("$py" -m pip list --format=freeze 2>/dev/null \
    | grep -iE '^(torch|numpy|pandas|matplotlib|seaborn|scipy|hydra-core|omegaconf|tabulate|wandb|submitit|pytest)==' \
    | tr '\n' ' ')"

# The quick tier, as the main stage runs the whole suite (workers chosen by tests/conftest.py). All of it, not a
# chosen subset: nearly every module reaches a dependency (torch's kernels and compiler, pandas, matplotlib, Hydra,
# wandb, submitit), and a list of the files that do would go stale as the code grows.
tests_started=$SECONDS
"$py" -m pytest -q -m "not slow" -p no:cacheprovider --durations=10
say "quick tests passed ($((SECONDS - tests_started)) s)"

# 24 rows (3 back ends x 4 sizes x 2 masks): the sweep's own report, then the report command, which must draw every
# figure these rows call for (--all-figures: exit 1 otherwise) and at least one.
sweep=$work/sweep
"$py" -m runners.sweep -m backend=naive,sdpa,chunked seq_len=64,128,256,512 causal=true,false \
    "hydra.sweep.dir=$sweep" wandb.mode=disabled
rows=$("$py" -c 'import csv, sys; print(sum(1 for _ in csv.DictReader(open(sys.argv[1]))))' "$sweep/results.csv")
[[ $rows -eq 24 ]] || { say "expected 24 rows in $sweep/results.csv, found $rows"; exit 1; }
"$py" -m analysis.report "$sweep/results.csv" --out "$work/report" --all-figures
drawn=$(find "$work/report/figures" -name '*.png' | wc -l)
[[ $drawn -ge 1 ]] || { say "the 24-row report drew no figure"; exit 1; }
# The default sweep's rows (committed): the ten figures of its report, drawn by seaborn and scipy at their floors.
"$py" -m analysis.report tests/analysis/data/default_sweep_results.csv --out "$work/report_default" --all-figures
default_drawn=$(find "$work/report_default/figures" -name '*.png' | wc -l)
[[ $default_drawn -ge 10 ]] || { say "the default sweep's report drew $default_drawn figures, not 10"; exit 1; }
say "passed: quick tests, 24 rows, $drawn + $default_drawn figures, with every direct dependency at its floor"
