#!/usr/bin/env bash
# gpu_check.sh: the whole harness on one CUDA machine in 8 minutes (H200), in one call.
#
#   scripts/gpu_check.sh OUT_DIR [--wheels DIR] [--pack] [--total-s N] [--allow-cpu] [--dry-run]
#
# Runs, each stage under a limit that its work needs, so the whole (installing the wheels
# included) stays under --total-s (480 s: with start-up, a rerun still fits in 15 minutes of GPU time):
#   1. env      nvidia-smi and Python/torch/triton versions          -> OUT_DIR/env.txt
#   2. deps     hydra-core/omegaconf/seaborn from --wheels DIR if missing (pip --no-index --target)
#   3. plan     each stage's floor, estimated from what it runs: Hydra composes each sweep and
#               parses its points (plain, compiled forward, compiled forward+backward), pytest
#               collects each test stage; start-up + points x their estimates (the constants and
#               why: scripts/gpu_check_helper.py)                  -> summary.txt, sweep.log
#   4. tests    pytest -m gpu: tests/gpu and tests/measure first (and every other CUDA test but
#               the compiled ones), then the compiled back ends' CUDA tests apart, in bf16 only;
#               pytest-timeout per test, below the stage's limit    -> OUT_DIR/pytest.log
#   5. sweeps   quadratic_cost and scaling_stability at reduced size, every back end (the
#               project's triton kernel beside SDPA's flash kernel in quadratic_cost: bf16,
#               n = 1024..16384, causal and not, with its error), every SDPA kernel,
#               fp32/tf32/bf16/fp16; the compiled back ends (flex, naive and chunked with
#               compile=true) at one size, causal only, compile_s apart -> OUT_DIR/sweep.log
#      launch diagnostic  (after results, no stage of its own) quadratic_cost's bf16 rows of sdpa and triton
#               at n = 1024 and 4096: the call's time beside the kernel's own (CUDA graph replay), clocks,
#               power, throttling, MFU against the spec sheet (scripts/launch_diagnostic.py) -> OUT_DIR/sweep.log
#   6. results  each sweep's results.csv rebuilt from its row files (a sweep cut off by its
#               limit never wrote it whole), then one table          -> OUT_DIR/results.csv
#   7. report   python -m analysis.report (PNG figures)              -> OUT_DIR/report/
# then prints a summary (also OUT_DIR/summary.txt). A failing stage never stops the next one:
# everything that can be written is written. Exit status 0 when every stage passed, 1 when
# one failed, 2 for bad arguments or no CUDA device.
#
# --wheels DIR  install hydra-core, omegaconf, antlr4 and seaborn wheels from DIR when they are missing
# --pack        leave at most 8 files in OUT_DIR, none over 16 MiB, no folder: the report
#               folder as report.tar.gz (plus report.md), the jobs' error.txt tracebacks as
#               errors.tar.gz, the sweep folders in a temporary folder, logs over 16 MiB cut
#               to their head and tail (for a remote runner or batch system that copies back
#               only a few small files)
# --total-s N   the time limit for everything (default 480 s, 8 minutes)
# --allow-cpu   run the same pipeline on a machine without CUDA, at CPU sizes (a self-test)
# --dry-run     print the plan (stage, points, estimate, floor, why: the sweeps' configs are
#               composed and their points parsed, the test stages collected) and every command
#               with the limit each stage would get if every stage before it used all of its
#               own; runs no stage, writes nothing
#
# Needs no `pip install -e .`: it runs from the repository root with the root on PYTHONPATH.
# wandb is used (offline) when importable, else the sweeps run with wandb.mode=disabled.
# docs/gpu.md says how to run it and where its results are committed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
COMMAND="scripts/gpu_check.sh $*"   # as given, for the summary
PY=${PYTHON:-python3}
OUT="" WHEELS="" DRY=0 PACK=0 ALLOW_CPU=0 TOTAL_S=480
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

# Stage limits: each stage's floor comes from the plan (step 3), and its limit is its floor's share
# of the time left:
#   (time left - FINAL_RESERVE_S) x its floor / (its floor + the floors of the stages after it),
# so while the floors fit the total every stage gets at least its floor, a stage that ends early
# leaves its time to the next ones, and the limits never add up to more than --total-s. The dry
# run computes them as if each stage used all of its limit.
ORDER=(tests_gpu tests_compiled quadratic_cost sdpa_kernels scaling_stability flex compile_option fp8 results side_by_side
       report)
declare -A WEIGHT=() PER_TEST=() SKIP=()
FINAL_RESERVE_S=10  # packing, the size check and the summary after the last stage
MIN_STAGE_S=5       # a stage with less than this is skipped: it could not even start Python
SIM_USED=0          # the dry run's clock: seconds the stages so far would have used at most
HELPER=scripts/gpu_check_helper.py

# limit_for NAME: the seconds stage NAME may run now (see above); env, deps and plan run before
# the plan's floors are known and get their own floor as a fixed limit.
limit_for() {
  local name=$1 after=0 seen=0 stage used left
  [[ -z ${FIXED_LIMIT[$name]:-} ]] || { echo "${FIXED_LIMIT[$name]}"; return; }
  for stage in "${ORDER[@]}"; do
    [[ $stage == "$name" ]] && seen=1
    ((seen)) && after=$((after + ${WEIGHT[$stage]:-0}))
  done
  ((after > 0)) || { echo 0; return; }
  used=$( ((DRY)) && echo "$SIM_USED" || echo "$SECONDS" )
  left=$((TOTAL_S - used - FINAL_RESERVE_S))
  ((left > 0)) || left=0
  local share=$((left * ${WEIGHT[$name]:-0} / after))
  # a small stage (results) squeezed below MIN_STAGE_S by a short total still runs while time is left
  ((share >= MIN_STAGE_S || left < MIN_STAGE_S)) || share=$MIN_STAGE_S
  echo $share
}

# stage NAME LOG CMD...: run CMD under its computed limit, output to the terminal and appended
# to LOG; record how it ended, never stop the script.
stage() {
  local name=$1 log=$2; shift 2
  local limit rc=0 start=$SECONDS
  limit=$(limit_for "$name")
  LIMITS+=("$name ${limit}s")
  if [[ -n ${SKIP[$name]:-} ]]; then
    STAGES+=("$name|skipped: ${SKIP[$name]}|0|0"); FAILED=1
    say "== $name: skipped (${SKIP[$name]})" | { ((DRY)) && cat || tee -a "$log"; }
    return 0
  fi
  if ((DRY)); then
    say "+ timeout $limit $(q "$@")>> $log 2>&1"
    SIM_USED=$((SIM_USED + limit))
    return 0
  fi
  if ((limit < MIN_STAGE_S)); then
    STAGES+=("$name|skipped: no time left|0|$limit"); FAILED=1
    say "== $name: skipped, no time left" | tee -a "$log"
    return 0
  fi
  say "== $name (limit ${limit}s, $(date -u +%H:%M:%S) UTC): $(q "$@")" | tee -a "$log"
  timeout --kill-after=5 "$limit" "$@" 2>&1 | tee -a "$log" || rc=$?
  local status=ok
  if ((rc == 124 || rc == 137)); then status="timed out after ${limit}s"; FAILED=1
  elif ((rc != 0)); then status="exit $rc"; FAILED=1; fi
  STAGES+=("$name|$status|$((SECONDS - start))|$limit")
}
LIMITS=()

# --- the check's sizes: small enough for 8 minutes in total, large enough to mean something ---
# Cut to fit: quadratic_cost in bf16 only (sdpa_kernels covers the precisions), sdpa_kernels and
# the compiled stages causal only, scaling_stability at input_std 1; flex forward and
# forward+backward (the triton backward a CPU lacks), compile=true forward only (its backward is
# checked by the compiled CUDA test).
if ((ALLOW_CPU)); then
  DEVICE=cpu COST_SEQ=128,256 COST_PREC=fp32 KERNEL_SEQ=128 KERNEL_PREC=fp32,tf32,bf16
  STAB_SEQ=128 STAB_DIMS=16,64 STAB_STD=1.0 MAX_POINT_S=10 COMPILED_SEQ=256 COMPILED_PREC=fp32 FP8_SEQ=256
  SIDE_CHECKS=--print-only  # a CPU's sizes are below chunked's blocks: the table only
else
  DEVICE=cuda COST_SEQ=1024,4096,16384 COST_PREC=bf16 KERNEL_SEQ=4096 KERNEL_PREC=fp32,tf32,bf16,fp16
  STAB_SEQ=2048 STAB_DIMS=16,128,1024 STAB_STD=1.0 MAX_POINT_S=5 COMPILED_SEQ=4096 COMPILED_PREC=bf16 FP8_SEQ=4096
  SIDE_CHECKS=
fi
if ((PACK)); then
  WORK=$( ((DRY)) && echo "/tmp/gpu_check_sweeps.XXXXXX" || mktemp -d "${TMPDIR:-/tmp}/gpu_check_sweeps.XXXXXX")
else
  WORK=$OUT/sweeps
fi
REPORT=$OUT/report

((DRY)) && say "# dry run: the plan and the commands gpu_check.sh would run from $ROOT (no stage is run)" \
  && say "# PYTHONPATH=$PYTHONPATH PYTHONUNBUFFERED=1 HYDRA_FULL_ERROR=1, total limit ${TOTAL_S}s"
if ((DRY)); then say "+ mkdir -p $(q "$OUT" "$WORK")"; else mkdir -p "$OUT" "$WORK"; fi

# The steps before the plan: their floors (the helper's fixed estimates) are their limits.
declare -A FIXED_LIMIT=()
while read -r tag name floor _; do
  [[ $tag == stage ]] && FIXED_LIMIT[$name]=$floor
done < <("$PY" "$HELPER" plan "$TOTAL_S" "$FINAL_RESERVE_S" :: fixed env :: fixed deps :: fixed plan)
for name in env deps plan; do
  [[ -n ${FIXED_LIMIT[$name]:-} ]] || { echo "error: $HELPER plan gave no floor for $name" >&2; exit 2; }
done

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
ENV_S=${FIXED_LIMIT[env]}
LIMITS+=("env ${ENV_S}s")
if ((DRY)); then
  say "+ { date -u; hostname; git rev-parse HEAD; timeout $ENV_S nvidia-smi; timeout $ENV_S $PY -c '<versions and device>'; } > $OUT/env.txt"
  SIM_USED=$((SIM_USED + ENV_S))
else
  # Every line may fail (no hostname binary, no git, no driver): none may stop the script under set -e.
  { date -u || true; hostname 2>/dev/null || cat /proc/sys/kernel/hostname 2>/dev/null || echo "hostname: unknown";
    git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo "git: no repository";
    timeout "$ENV_S" nvidia-smi 2>&1 || echo "nvidia-smi: not available";
    timeout "$ENV_S" "$PY" -c "$ENV_PY" 2>&1 || echo "python: the version probe failed"; } >"$OUT/env.txt" || true
  cat "$OUT/env.txt"
  if ! ((ALLOW_CPU)) && ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "error: no CUDA device visible to torch here; --dry-run prints the commands, --allow-cpu runs them at CPU sizes" >&2
    exit 2
  fi
fi

# 2. deps: hydra-core, omegaconf and seaborn (the figures') (pure-Python wheels) where the image lacks them.
if ((DRY)); then
  say "# if $PY -c 'import hydra, omegaconf, seaborn' fails:"
  if [[ -n $WHEELS ]]; then
    stage deps "$OUT/sweep.log" "$PY" -m pip install -q --no-index --no-deps --target "$SITE" "$WHEELS/*.whl"
    say "+ export PYTHONPATH=$SITE:\$PYTHONPATH"
  else
    say "#   (no --wheels given: the sweeps fail, the tests still run)"
  fi
elif ! "$PY" -c 'import hydra, omegaconf, seaborn' 2>/dev/null; then
  if [[ -n $WHEELS ]]; then
    stage deps "$OUT/sweep.log" "$PY" -m pip install -q --no-index --no-deps --target "$SITE" "$WHEELS"/*.whl
    export PYTHONPATH="$SITE:$PYTHONPATH"
  else
    STAGES+=("deps|hydra-core/omegaconf/seaborn missing and no --wheels DIR given|0|0"); FAILED=1
  fi
fi
WANDB=wandb.mode=disabled
if ((DRY)); then
  say "# wandb: offline when $PY -c 'import wandb' works, else wandb.mode=disabled (shown below)"
elif "$PY" -c 'import wandb' 2>/dev/null; then
  WANDB=wandb.mode=offline
fi

# --- what each stage runs (the plan reads these same arrays) ---
# tests: every gpu-marked test, the CUDA basics first: tests/gpu and tests/measure, then every other
# test folder, all but the compiled back ends' tests ("compiled" or "flex" in their ids: cold triton
# compiles), which run apart, in one dtype (bf16), XDIST_WORKERS at once when pytest-xdist is there
# (they check values and host syncs, not times: compiling side by side cannot spoil them).
# Collection errors elsewhere must not hide them.
OTHER_TESTS=()
for path in tests/*; do
  case ${path#tests/} in gpu|measure|conftest.py|__pycache__|__init__.py) ;; *) OTHER_TESTS+=("$path") ;; esac
done
PYTEST=("$PY" -m pytest -q -p no:cacheprovider --continue-on-collection-errors)
XDIST_WORKERS=8  # the compiled tests (8) in one round: 16 cores and 139 GiB hold them
# The attention variants' CUDA tests (tests/gpu/test_sdpa_variants.py, test_flex_variants.py's) do not fit the 480 s
# plan beside these: run them apart, `python -m pytest -m gpu -k variants` (docs/gpu.md).
# Nor does the isolated worker's CUDA test (tests/gpu/test_isolate_gpu.py: two interpreters start and import torch and
# CUDA, far from a small test's 0.6 s): run it apart, `python -m pytest -m gpu -k isolate`.
# Nor do the mask and score functions' CUDA tests (tests/gpu/test_mod_functions_gpu.py): seven cold flex compiles, six
# of them in tests whose ids the plan reads as 0.6 s tests, the seventh a ninth compiled test (a second round of
# workers, 64 s): run them apart, `python -m pytest -m gpu tests/gpu/test_mod_functions_gpu.py`.
APART=(--ignore=tests/gpu/test_mod_functions_gpu.py)
TESTS_GPU=("${APART[@]}" -m gpu -k "not compiled and not flex and not variants and not isolate" tests/gpu tests/measure
           "${OTHER_TESTS[@]}")
TESTS_COMPILED=("${APART[@]}" -m gpu -k "(compiled or flex) and not fp16 and not fp32 and not variants" tests)
if ((DRY)) || "$PY" -c 'import xdist' 2>/dev/null; then
  TESTS_COMPILED=(-n "$XDIST_WORKERS" "${TESTS_COMPILED[@]}")
fi

# sweeps: one folder each, never the report (step 7 draws it once from all rows).
COMMON=(device=$DEVICE report=false budget.max_point_s=$MAX_POINT_S budget.accuracy_rows=32 "$WANDB")
# quadratic_cost with the triton back end too: its bf16 rows beside sdpa's (auto runs flash there: the kernel column
# says "auto:flash"), causal and not, forward and forward+backward (the project's backward kernels beside flash's),
# each with its error against float64 (benchmarks/triton_speed.py prints the ratios); n in 4x steps (1K, 4K, 16K:
# enough for the exponent and the side_by_side stage's checks; 2K and 8K do not fit beside fwd_bwd); 0.08 s of timed
# calls per point (dozens to hundreds of calls at these sizes) leaves room for its kernel compiles.
SWEEP_COST=(experiment=quadratic_cost backend=naive,sdpa,chunked,triton mode=fwd,fwd_bwd precision=$COST_PREC
            seq_len=$COST_SEQ budget.timing_s=0.08 "${COMMON[@]}" hydra.sweep.dir="$WORK/quadratic_cost")
# sdpa_kernels: 0.08 s of timed calls per point, as quadratic_cost's (a call at n = 4096 takes 0.1-2 ms, the math kernel
# in fp32 the longest: dozens of calls and more), so the floors fit 480 s beside the side_by_side stage and the launch
# diagnostic's CUDA tests.
SWEEP_KERNELS=(experiment=quadratic_cost name=sdpa_kernels backend=sdpa backend.kernel=auto,flash,efficient,math,cudnn
               precision=$KERNEL_PREC seq_len=$KERNEL_SEQ causal=true budget.timing_s=0.08 "${COMMON[@]}"
               hydra.sweep.dir="$WORK/sdpa_kernels")
SWEEP_STABILITY=(experiment=scaling_stability head_dim=$STAB_DIMS input_std=$STAB_STD seq_len=$STAB_SEQ "${COMMON[@]}"
                 hydra.sweep.dir="$WORK/scaling_stability")
# The compiled back ends at one size, causal: flex (triton on CUDA, with a backward, unlike on a
# CPU) forward and forward+backward, then naive and chunked with compile=true forward. Compiling is
# part of these points (compile_s, apart from time_ms), so max_point_s leaves room for it.
COMPILED=(seq_len=$COMPILED_SEQ causal=true precision=$COMPILED_PREC budget.timing_s=0.1
          device=$DEVICE report=false budget.max_point_s=120 budget.accuracy_rows=32 "$WANDB")
SWEEP_FLEX=(-m name=flex_check backend=flex mode=fwd,fwd_bwd "${COMPILED[@]}" hydra.sweep.dir="$WORK/flex")
SWEEP_COMPILE=(-m name=compile_check backend=naive,chunked backend.compile=true mode=fwd "${COMPILED[@]}"
               hydra.sweep.dir="$WORK/compile_option")
# FP8 (experiment fp8's question at one size, to fit the total): e4m3, per-tensor vs block scaling, without
# and with the Hadamard rotation, on inputs with 0.1% outliers (the block + Hadamard claim's pairs), each
# with its products through torch._scaled_mm (fp8_matmul=auto: on capability >= 8.9) and its dequant twin,
# so one GPU's rows compare the two paths' time and error. (e5m2 runs dequantized on CUDA whatever the
# option: cuBLASLt has no e5m2 x e5m2 kernel; its rows come from experiment fp8.)
SWEEP_FP8=(-m name=fp8_check backend=naive precision=fp8_e4m3 backend.fp8_scaling=tensor,block
           backend.hadamard=false,true backend.fp8_matmul=auto,dequant input_outliers=0.001 seq_len=$FP8_SEQ
           budget.timing_s=0.1 "${COMMON[@]}" hydra.sweep.dir="$WORK/fp8")
SWEEP_DIRS=("$WORK/quadratic_cost" "$WORK/sdpa_kernels" "$WORK/scaling_stability" "$WORK/flex" "$WORK/compile_option"
            "$WORK/fp8")

# 3. plan: each stage's floor from what it runs; a stage it cannot plan (no Hydra: the sweeps
# cannot run either) is skipped. Written to sweep.log and the summary.
PLAN_ARGS=(:: fixed env :: fixed deps :: fixed plan
           :: tests tests_gpu "${TESTS_GPU[@]}" :: tests tests_compiled "${TESTS_COMPILED[@]}"
           :: sweep quadratic_cost "${SWEEP_COST[@]}" :: sweep sdpa_kernels "${SWEEP_KERNELS[@]}"
           :: sweep scaling_stability "${SWEEP_STABILITY[@]}"
           :: sweep flex "${SWEEP_FLEX[@]}" :: sweep compile_option "${SWEEP_COMPILE[@]}" :: sweep fp8 "${SWEEP_FP8[@]}"
           :: fixed results :: fixed side_by_side :: fixed report)
PLAN_TEXT="" plan_rc=0
LIMITS+=("plan ${FIXED_LIMIT[plan]}s")
if ((DRY)); then
  say "+ $PY $HELPER plan $TOTAL_S $FINAL_RESERVE_S :: ... (each stage's command; run now, it composes and collects)"
  PLAN_TEXT=$("$PY" "$HELPER" plan "$TOTAL_S" "$FINAL_RESERVE_S" "${PLAN_ARGS[@]}" 2>&1) || plan_rc=$?
  SIM_USED=$((SIM_USED + FIXED_LIMIT[plan]))
else
  PLAN_TEXT=$(GPU_CHECK_COLLECT_S=$((FIXED_LIMIT[plan] - 3)) timeout --kill-after=5 "${FIXED_LIMIT[plan]}" "$PY" "$HELPER" plan "$TOTAL_S" "$FINAL_RESERVE_S" \
              "${PLAN_ARGS[@]}" 2>&1) || plan_rc=$?
fi
printf '%s\n' "$PLAN_TEXT" | grep '^#' || true
((DRY)) || printf '%s\n' "$PLAN_TEXT" >>"$OUT/sweep.log"
while read -r tag name floor per_test problem; do
  [[ $tag == stage && -n ${floor:-} ]] || continue
  WEIGHT[$name]=$floor PER_TEST[$name]=$per_test
  [[ -z ${problem:-} ]] || SKIP[$name]=$problem
done <<<"$PLAN_TEXT"
if ((plan_rc != 0)) || [[ -z ${WEIGHT[report]:-} ]]; then
  # The plan did not finish: the floors it printed in its last dry run stand in (docs/gpu.md).
  say "# plan failed (exit $plan_rc): using the floors of the last dry run"
  STAGES+=("plan|exit $plan_rc: the last dry run's floors used|0|${FIXED_LIMIT[plan]}"); FAILED=1
  # every stage of ORDER (tests/launchers/test_gpu_check_script.py checks): one left out got 0 s and was skipped
  WEIGHT=([tests_gpu]=72 [tests_compiled]=84 [quadratic_cost]=46 [sdpa_kernels]=20 [scaling_stability]=22
          [flex]=60 [compile_option]=60 [fp8]=15 [results]=6 [side_by_side]=5 [report]=25)
  PER_TEST=([tests_gpu]=30 [tests_compiled]=60)
  SKIP=()
fi

# 4. tests, each test under pytest-timeout below its stage's limit (where the plugin is installed).
test_stage() {
  local name=$1; shift
  local limit per_test timeout_arg=()
  limit=$(limit_for "$name")
  per_test=${PER_TEST[$name]:-30}
  ((per_test <= limit - 5)) || per_test=$((limit - 5))
  ((per_test >= 1)) || per_test=1
  if ((DRY)) || "$PY" -c 'import pytest_timeout' 2>/dev/null; then
    timeout_arg=(--timeout="$per_test")
  else
    say "# $name: pytest-timeout is not installed: no per-test timeout" | tee -a "$OUT/pytest.log"
  fi
  stage "$name" "$OUT/pytest.log" "${PYTEST[@]}" "${timeout_arg[@]}" "$@"
}
test_stage tests_gpu "${TESTS_GPU[@]}"
test_stage tests_compiled "${TESTS_COMPILED[@]}"

# 5. sweeps
stage quadratic_cost "$OUT/sweep.log" "$PY" -m runners.sweep "${SWEEP_COST[@]}"
stage sdpa_kernels "$OUT/sweep.log" "$PY" -m runners.sweep "${SWEEP_KERNELS[@]}"
stage scaling_stability "$OUT/sweep.log" "$PY" -m runners.sweep "${SWEEP_STABILITY[@]}"
stage flex "$OUT/sweep.log" "$PY" -m runners.sweep "${SWEEP_FLEX[@]}"
stage compile_option "$OUT/sweep.log" "$PY" -m runners.sweep "${SWEEP_COMPILE[@]}"
stage fp8 "$OUT/sweep.log" "$PY" -m runners.sweep "${SWEEP_FP8[@]}"

# 6. results: every sweep's results.csv rebuilt from its row files (a sweep cut off by its limit
# has rows but no whole CSV), then one table, even of sweeps cut short.
stage results "$OUT/sweep.log" "$PY" "$HELPER" merge "$OUT/results.csv" "${SWEEP_DIRS[@]}"

# 6b. side_by_side: quadratic_cost's naive, chunked, triton and sdpa rows as one table (time, TFLOP/s, peak memory;
# fwd and fwd_bwd, causal or not), failing when chunked is below half of naive's TFLOP/s at n >= 4096 or its peak
# memory grows faster than linearly (benchmarks/gpu_side_by_side.py, which can also measure the grid by itself).
stage side_by_side "$OUT/sweep.log" "$PY" "$ROOT/benchmarks/gpu_side_by_side.py" --csv "$WORK/quadratic_cost" \
  --sizes ${COST_SEQ//,/ } $SIDE_CHECKS

# --- launch diagnostic: every CUDA row carries the call's time beside the kernel's own (the call's CUDA graph
# replayed: selfattn/measure/kernel_time.py), the SM clock, power and throttle state over its timed window (NVML,
# where nvidia-ml-py is installed) and MFU against the spec sheet (spec_peaks.py). Printed here for quadratic_cost's
# bf16 rows of the project's triton kernel and SDPA at n = 1024 and 4096 (the H200's 0.078-0.083 ms a call against
# 0.015-0.017 ms a replay, in the harness's own columns): no stage of its own, no time beyond the sweep's.
LAUNCH_ARGS=("$OUT/results.csv" --backend sdpa,triton --seq-len 1024,4096 --precision bf16)
if ((DRY)); then
  say "+ $PY scripts/launch_diagnostic.py $(q "${LAUNCH_ARGS[@]}")>> $OUT/sweep.log"
else
  "$PY" scripts/launch_diagnostic.py "${LAUNCH_ARGS[@]}" 2>&1 | tee -a "$OUT/sweep.log" || true
fi
# --- end of the launch diagnostic

# 7. report: figures, fitted exponents and the chapter's claims, from the merged rows.
stage report "$OUT/sweep.log" "$PY" -m analysis.report "$OUT/results.csv" --out "$REPORT" --formats png
if ((PACK)); then
  if ((DRY)); then
    say "+ cp $REPORT/report.md $OUT/report.md && tar -czf $OUT/report.tar.gz -C $OUT report && rm -rf $REPORT"
    say "+ $PY $HELPER errors $OUT/errors.tar.gz $WORK   # the jobs' error.txt tracebacks: the eighth file"
  else
    if [[ -d $REPORT ]]; then
      cp "$REPORT/report.md" "$OUT/report.md" 2>/dev/null || true
      tar -czf "$OUT/report.tar.gz" -C "$OUT" report && rm -rf "$REPORT"
    fi
    "$PY" "$HELPER" errors "$OUT/errors.tar.gz" "$WORK" || true
  fi
fi
((DRY)) && say "# stage limits: ${LIMITS[*]}; ${FINAL_RESERVE_S}s reserved for packing and the summary; total ${TOTAL_S}s"

# --- summary: the plan, stages (seconds of their limit), test outcome, rows per sweep and variant ---
if ((DRY)); then
  say "+ $PY $HELPER summary $OUT/results.csv > $OUT/summary.txt"
  ((PACK)) && say "+ $PY $HELPER fit $OUT"
  say "# dry run done: no stage was run"
  exit 0
fi
{
  say "gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ), ${SECONDS}s of ${TOTAL_S}s, device=$DEVICE, out=$OUT"
  say "command: $COMMAND (commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown))"
  printf '%s\n' "$PLAN_TEXT" | grep '^#' || true
  for entry in "${STAGES[@]}"; do
    IFS='|' read -r name status secs limit <<<"$entry"
    printf '  %-18s %-40s %4ss of %4ss\n' "$name" "$status" "$secs" "$limit"
  done
  say "tests: $(grep -E '(passed|failed|errors?|skipped|deselected|no tests ran).* in [0-9.]+s( \(.*\))?( =+)?$' "$OUT/pytest.log" 2>/dev/null | tr '\n' ';' || echo 'no pytest result line')"
  "$PY" "$HELPER" summary "$OUT/results.csv" 2>&1 || true
  say "files: $(cd "$OUT" && ls -p | tr '\n' ' ')"
  say "sweep folders: $WORK"
} | tee "$OUT/summary.txt"
# --pack: at most 8 files of at most 16 MiB, no folder (logs cut to fit), for a narrow way back.
if ((PACK)); then "$PY" "$HELPER" fit "$OUT" || FAILED=1; fi
exit $FAILED
