#!/usr/bin/env bash
# gpu_check.sh: the whole harness on one CUDA machine in under 6 minutes (H200), in one call.
#
#   scripts/gpu_check.sh OUT_DIR [--wheels DIR] [--pack] [--total-s N] [--allow-cpu] [--dry-run]
#
# Runs, each stage under a limit computed from the time left, so the whole (installing the
# wheels included) stays under --total-s (330 s, 6 minutes with margin on one H200):
#   1. env      nvidia-smi and Python/torch/triton versions          -> OUT_DIR/env.txt
#   2. deps     hydra-core/omegaconf from --wheels DIR if missing (pip --no-index --target)
#   3. tests    pytest -m gpu (every @pytest.mark.gpu test)          -> OUT_DIR/pytest.log
#   4. sweeps   quadratic_cost and scaling_stability at reduced size, every back end, every
#               SDPA kernel, fp32/tf32/bf16/fp16; the compiled back ends (flex, naive with
#               compile=true) at one size, fwd and fwd_bwd, compile_s apart -> OUT_DIR/sweep.log
#   5. results  the sweeps' rows in one table                        -> OUT_DIR/results.csv
#   6. report   python -m analysis.report (PNG figures)              -> OUT_DIR/report/
# then prints a summary (also OUT_DIR/summary.txt). A failing stage never stops the next one:
# everything that can be written is written. Exit status 0 when every stage passed, 1 when
# one failed, 2 for bad arguments or no CUDA device.
#
# --wheels DIR  install hydra-core, omegaconf and antlr4 wheels from DIR when they are missing
# --pack        leave at most 8 files in OUT_DIR, none over 16 MiB, no folder: the report
#               folder as report.tar.gz (plus report.md), the sweep folders in a temporary
#               folder, logs over 16 MiB cut to their head and tail (for the device tool,
#               which brings back 8 files of 16 MiB at most)
# --total-s N   the time limit for everything (default 330 s, under 6 minutes)
# --allow-cpu   run the same pipeline on a machine without CUDA, at CPU sizes (a self-test)
# --dry-run     print every command, with the limit each stage would get if every stage
#               before it used all of its own; runs nothing, writes nothing
#
# Needs no `pip install -e .`: it runs from the repository root with the root on PYTHONPATH.
# wandb is used (offline) when importable, else the sweeps run with wandb.mode=disabled.
# docs/gpu.md says how to run it and where its results are committed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
COMMAND="scripts/gpu_check.sh $*"   # as given, for the summary
PY=${PYTHON:-python3}
OUT="" WHEELS="" DRY=0 PACK=0 ALLOW_CPU=0 TOTAL_S=330
SITE=${GPU_CHECK_SITE:-/tmp/gpu_check_site}

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case $1 in
    --wheels) WHEELS=${2:?--wheels needs a folder}; shift 2 ;;
    --wheels=*) WHEELS=${1#*=}; shift ;;
    --total-s) TOTAL_S=${2:?--total-s needs seconds}; shift 2 ;;
    --total-s=*) TOTAL_S=${1#*=}; shift ;;
    --pack) PACK=1; shift ;;
    --allow-cpu) ALLOW_CPU=1; shift ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage ;;
    -*) echo "error: unknown option $1 (allowed: --wheels DIR, --pack, --total-s N, --allow-cpu, --dry-run)" >&2; exit 2 ;;
    *) [[ -z $OUT ]] || { echo "error: OUT_DIR given twice ($OUT, $1)" >&2; exit 2; }; OUT=$1; shift ;;
  esac
done
[[ -n $OUT ]] || { echo "error: OUT_DIR: missing (usage: scripts/gpu_check.sh OUT_DIR [--wheels DIR] [--pack] [--dry-run])" >&2; exit 2; }
[[ $TOTAL_S =~ ^[0-9]+$ ]] && ((TOTAL_S >= 60)) || { echo "error: --total-s: expected an integer >= 60, got $TOTAL_S" >&2; exit 2; }
if [[ -n $WHEELS && $DRY == 0 ]] && ! compgen -G "$WHEELS/*.whl" >/dev/null; then
  echo "error: --wheels: no *.whl files in $WHEELS" >&2; exit 2
fi
[[ $OUT == /* ]] || OUT=$PWD/$OUT
[[ -z $WHEELS || $WHEELS == /* ]] || WHEELS=$PWD/$WHEELS
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HYDRA_FULL_ERROR=1

END_S=$((SECONDS + TOTAL_S))
STAGES=()     # "name|status|seconds" per stage, for the summary
FAILED=0

# Shell-quote for printing; plain words (commas included, as in Hydra sweeps) stay readable.
q() { local a; for a in "$@"; do [[ $a =~ ^[A-Za-z0-9_./=,:+@%-]+$ ]] && printf '%s ' "$a" || printf '%q ' "$a"; done; }
say() { printf '%s\n' "$*"; }

# Stage limits: each stage gets a share of the time left, by weight: its limit is
#   (time left - FINAL_RESERVE_S) x its weight / (its weight + the weights of the stages after it),
# so a stage that ends early leaves its time to the next ones, and the limits never add up to
# more than --total-s. The dry run computes them as if each stage used all of its limit.
ORDER=(deps tests quadratic_cost sdpa_kernels scaling_stability flex compile_option results report)
declare -A WEIGHT=([deps]=15 [tests]=100 [quadratic_cost]=70 [sdpa_kernels]=40 [scaling_stability]=45
                   [flex]=25 [compile_option]=20 [results]=8 [report]=40)
FINAL_RESERVE_S=15  # packing, the size check and the summary after the last stage
MIN_STAGE_S=5       # a stage with less than this is skipped: it could not even start Python
SIM_USED=0          # the dry run's clock: seconds the stages so far would have used at most

# limit_for NAME: the seconds stage NAME may run now (see above).
limit_for() {
  local name=$1 after=0 seen=0 stage used left
  for stage in "${ORDER[@]}"; do
    [[ $stage == "$name" ]] && seen=1
    ((seen)) && after=$((after + WEIGHT[$stage]))
  done
  used=$( ((DRY)) && echo "$SIM_USED" || echo "$SECONDS" )
  left=$((TOTAL_S - used - FINAL_RESERVE_S))
  ((left > 0)) || left=0
  echo $((left * WEIGHT[$name] / after))
}

# stage NAME LOG CMD...: run CMD under its computed limit, output to the terminal and appended
# to LOG; record how it ended, never stop the script.
stage() {
  local name=$1 log=$2; shift 2
  local limit rc=0 start=$SECONDS
  limit=$(limit_for "$name")
  LIMITS+=("$name ${limit}s")
  if ((DRY)); then
    say "+ timeout $limit $(q "$@")>> $log 2>&1"
    SIM_USED=$((SIM_USED + limit))
    return 0
  fi
  if ((limit < MIN_STAGE_S)); then
    STAGES+=("$name|skipped: no time left|0"); FAILED=1
    say "== $name: skipped, no time left" | tee -a "$log"
    return 0
  fi
  say "== $name (limit ${limit}s, $(date -u +%H:%M:%S) UTC): $(q "$@")" | tee -a "$log"
  timeout --kill-after=5 "$limit" "$@" 2>&1 | tee -a "$log" || rc=$?
  local status=ok
  if ((rc == 124 || rc == 137)); then status="timed out after ${limit}s"; FAILED=1
  elif ((rc != 0)); then status="exit $rc"; FAILED=1; fi
  STAGES+=("$name|$status|$((SECONDS - start))")
}
LIMITS=()

# --- the check's sizes: small enough for ~6 minutes in total, large enough to mean something ---
if ((ALLOW_CPU)); then
  DEVICE=cpu COST_SEQ=128,256 COST_PREC=fp32 KERNEL_SEQ=128 KERNEL_PREC=fp32,tf32,bf16
  STAB_SEQ=128 STAB_DIMS=16,64 STAB_STD=1.0 MAX_POINT_S=10 COMPILED_SEQ=256 COMPILED_PREC=fp32
else
  DEVICE=cuda COST_SEQ=1024,2048,4096,8192,16384 COST_PREC=fp32,bf16 KERNEL_SEQ=4096 KERNEL_PREC=fp32,tf32,bf16,fp16
  STAB_SEQ=2048 STAB_DIMS=16,64,256,1024 STAB_STD=1.0,2.0 MAX_POINT_S=5 COMPILED_SEQ=4096 COMPILED_PREC=bf16
fi
if ((PACK)); then
  WORK=$( ((DRY)) && echo "/tmp/gpu_check_sweeps.XXXXXX" || mktemp -d "${TMPDIR:-/tmp}/gpu_check_sweeps.XXXXXX")
else
  WORK=$OUT/sweeps
fi
REPORT=$OUT/report

((DRY)) && say "# dry run: the commands gpu_check.sh would run from $ROOT (nothing is run)" \
  && say "# PYTHONPATH=$PYTHONPATH PYTHONUNBUFFERED=1 HYDRA_FULL_ERROR=1, total limit ${TOTAL_S}s"
if ((DRY)); then say "+ mkdir -p $(q "$OUT" "$WORK")"; else mkdir -p "$OUT" "$WORK"; fi

# 1. env: what machine this is (the rows carry it too; this is for a person reading the folder).
ENV_PY='import platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda)
try:
    import triton; print("triton", triton.__version__)
except ImportError: print("triton: not installed")
print("cuda available:", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device:", p.name, f"capability {p.major}.{p.minor}", f"{p.total_memory / 2**30:.1f} GiB")'
if ((DRY)); then
  say "+ { date -u; hostname; git rev-parse HEAD; nvidia-smi; $PY -c '<versions and device>'; } > $OUT/env.txt"
else
  { date -u; hostname; git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo "git: no repository";
    nvidia-smi 2>&1 || echo "nvidia-smi: not available"; "$PY" -c "$ENV_PY" 2>&1 || true; } >"$OUT/env.txt"
  cat "$OUT/env.txt"
  if ! ((ALLOW_CPU)) && ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "error: no CUDA device visible to torch here; --dry-run prints the commands, --allow-cpu runs them at CPU sizes" >&2
    exit 2
  fi
fi

# 2. deps: hydra-core and omegaconf (pure-Python wheels) where the image lacks them.
if ((DRY)); then
  say "# if $PY -c 'import hydra, omegaconf' fails:"
  if [[ -n $WHEELS ]]; then
    stage deps "$OUT/sweep.log" "$PY" -m pip install -q --no-index --no-deps --target "$SITE" "$WHEELS/*.whl"
    say "+ export PYTHONPATH=$SITE:\$PYTHONPATH"
  else
    say "#   (no --wheels given: the sweeps fail, the tests still run)"
  fi
elif ! "$PY" -c 'import hydra, omegaconf' 2>/dev/null; then
  if [[ -n $WHEELS ]]; then
    stage deps "$OUT/sweep.log" "$PY" -m pip install -q --no-index --no-deps --target "$SITE" "$WHEELS"/*.whl
    export PYTHONPATH="$SITE:$PYTHONPATH"
  else
    STAGES+=("deps|hydra-core/omegaconf missing and no --wheels DIR given|0"); FAILED=1
  fi
fi
WANDB=wandb.mode=disabled
if ((DRY)); then
  say "# wandb: offline when $PY -c 'import wandb' works, else wandb.mode=disabled (shown below)"
elif "$PY" -c 'import wandb' 2>/dev/null; then
  WANDB=wandb.mode=offline
fi

# 3. tests: every gpu-marked test; collection errors elsewhere must not hide them.
stage tests "$OUT/pytest.log" "$PY" -m pytest -m gpu tests -q -p no:cacheprovider --continue-on-collection-errors

# 4. sweeps: one folder each, never the report (step 6 draws it once from all rows).
COMMON=(device=$DEVICE report=false budget.max_point_s=$MAX_POINT_S budget.accuracy_rows=32 "$WANDB")
stage quadratic_cost "$OUT/sweep.log" "$PY" -m runners.sweep experiment=quadratic_cost \
  precision=$COST_PREC seq_len=$COST_SEQ budget.timing_s=0.2 "${COMMON[@]}" hydra.sweep.dir="$WORK/quadratic_cost"
stage sdpa_kernels "$OUT/sweep.log" "$PY" -m runners.sweep experiment=quadratic_cost name=sdpa_kernels \
  backend=sdpa backend.kernel=auto,flash,efficient,math,cudnn precision=$KERNEL_PREC seq_len=$KERNEL_SEQ \
  budget.timing_s=0.1 "${COMMON[@]}" hydra.sweep.dir="$WORK/sdpa_kernels"
stage scaling_stability "$OUT/sweep.log" "$PY" -m runners.sweep experiment=scaling_stability \
  head_dim=$STAB_DIMS input_std=$STAB_STD seq_len=$STAB_SEQ "${COMMON[@]}" hydra.sweep.dir="$WORK/scaling_stability"

# The compiled back ends at one size, masked or not, fwd and fwd_bwd: flex (triton on CUDA, with a
# backward, unlike on a CPU), then naive and chunked with compile=true. Compiling is part of these
# points (compile_s, apart from time_ms), so max_point_s leaves room for it.
COMPILED=(seq_len=$COMPILED_SEQ causal=false,true mode=fwd,fwd_bwd precision=$COMPILED_PREC budget.timing_s=0.1
          device=$DEVICE report=false budget.max_point_s=120 budget.accuracy_rows=32 "$WANDB")
stage flex "$OUT/sweep.log" "$PY" -m runners.sweep -m name=flex_check backend=flex "${COMPILED[@]}" \
  hydra.sweep.dir="$WORK/flex"
stage compile_option "$OUT/sweep.log" "$PY" -m runners.sweep -m name=compile_check backend=naive,chunked \
  backend.compile=true "${COMPILED[@]}" hydra.sweep.dir="$WORK/compile_option"

# 5. results: whatever rows exist, even of a sweep cut short (rows are written as jobs finish).
stage results "$OUT/sweep.log" "$PY" scripts/gpu_check_helper.py merge "$OUT/results.csv" \
  "$WORK/quadratic_cost" "$WORK/sdpa_kernels" "$WORK/scaling_stability" "$WORK/flex" "$WORK/compile_option"

# 6. report: figures, fitted exponents and the chapter's claims, from the merged rows.
stage report "$OUT/sweep.log" "$PY" -m analysis.report "$OUT/results.csv" --out "$REPORT" --formats png
if ((PACK)); then
  if ((DRY)); then
    say "+ cp $REPORT/report.md $OUT/report.md && tar -czf $OUT/report.tar.gz -C $OUT report && rm -rf $REPORT"
  elif [[ -d $REPORT ]]; then
    cp "$REPORT/report.md" "$OUT/report.md" 2>/dev/null || true
    tar -czf "$OUT/report.tar.gz" -C "$OUT" report && rm -rf "$REPORT"
  fi
fi
((DRY)) && say "# stage limits: ${LIMITS[*]}; ${FINAL_RESERVE_S}s reserved for packing and the summary; total ${TOTAL_S}s"

# --- summary: stages, test outcome, rows per sweep and variant ---
if ((DRY)); then
  say "+ $PY scripts/gpu_check_helper.py summary $OUT/results.csv > $OUT/summary.txt"
  ((PACK)) && say "+ $PY scripts/gpu_check_helper.py fit $OUT"
  say "# dry run done: nothing was run"
  exit 0
fi
{
  say "gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ), ${SECONDS}s of ${TOTAL_S}s, device=$DEVICE, out=$OUT"
  say "command: $COMMAND (commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown))"
  for entry in "${STAGES[@]}"; do
    IFS='|' read -r name status secs <<<"$entry"
    printf '  %-18s %-40s %4ss\n' "$name" "$status" "$secs"
  done
  say "tests: $(grep -E '(passed|failed|error|skipped|deselected|no tests ran)' "$OUT/pytest.log" 2>/dev/null | tail -1 || echo 'no pytest log')"
  "$PY" scripts/gpu_check_helper.py summary "$OUT/results.csv" 2>&1 || true
  say "files: $(cd "$OUT" && ls -p | tr '\n' ' ')"
  say "sweep folders: $WORK"
} | tee "$OUT/summary.txt"
# What the device tool brings back: at most 8 files of at most 16 MiB, no folder (logs cut to fit).
if ((PACK)); then "$PY" scripts/gpu_check_helper.py fit "$OUT" || FAILED=1; fi
exit $FAILED
