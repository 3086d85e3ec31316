"""Target 2: how the chunked back end's peak memory grows with seq_len, and how it compares with naive.

    python benchmarks/chunked_memory.py            # chunked 1K..16K fwd and fwd_bwd, naive 1K..8K fwd
    python benchmarks/chunked_memory.py --quick    # tiny sizes: does it run

The memory is the project's own measurement: `selfattn.measure.memory.measure_peak` on the very
call a sweep point makes (`selfattn.measure.workload.build`), i.e. the growth of the process's
peak RSS (VmHWM, reset through /proc/self/clear_refs after malloc_trim) while the call runs,
inputs excluded. Every size runs in a fresh subprocess, so no allocator state (glibc arenas kept
by earlier, bigger calls) leaks from one size into the next; each subprocess first runs the same
back end and mode once at seq_len 256, so one-time costs (thread pools, lazy imports) are not
counted as the call's memory.

Targets (batch 1, 8 heads, head_dim 64, float32, non-causal unless --causal):
  exponent of a power-law fit of peak memory against seq_len over 1K..16K: <= 1.15 fwd, <= 1.3 fwd_bwd
  chunked forward peak at 8192: <= 5% of naive's
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from _common import add_common_args, Check, print_checks, print_header

import numpy as np
import torch

WARMUP_SEQ_LEN = 256


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384], help="chunked seq_len values")
    parser.add_argument("--naive-sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192], help="naive seq_len values (fwd)")
    parser.add_argument("--compare-size", type=int, default=8192, help="seq_len of the chunked/naive forward peak ratio")
    parser.add_argument("--modes", nargs="+", choices=["fwd", "fwd_bwd"], default=["fwd", "fwd_bwd"])
    parser.add_argument("--causal", action="store_true", help="measure causal attention instead")
    parser.add_argument("--in-process", action="store_true",
                        help="measure every size in this process (fast, but freed heap pages of earlier sizes can hide growth)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
    parser.add_argument("--child", nargs=3, metavar=("BACKEND", "MODE", "SEQ_LEN"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.naive_sizes, args.compare_size = [256, 512, 1024], [1024], 1024
    args.sizes, args.naive_sizes = sorted(set(args.sizes)), sorted(set(args.naive_sizes))
    if args.compare_size not in args.sizes or args.compare_size not in args.naive_sizes:
        parser.error(f"--compare-size: expected a value in both --sizes and --naive-sizes, got {args.compare_size}")
    return args


def child(backend: str, mode: str, seq_len: int, args: argparse.Namespace) -> dict:
    """Runs in the fresh subprocess: the peak of one call of the point, as a sweep measures it."""
    from selfattn import Point
    from selfattn.backends.resolved import resolve_point
    from selfattn.measure import predict_mem_bytes
    from selfattn.measure.accuracy import sample_rows
    from selfattn.measure.memory import measure_peak
    from selfattn.measure.workload import build

    def workload(n: int):
        point = Point(backend=backend, seq_len=n, heads=args.heads, head_dim=args.head_dim, causal=args.causal, mode=mode)
        return point, build(point, torch.float32, torch.device("cpu"), sample_rows(n, 32, 0), resolved=resolve_point(point, "cpu"))

    _, warm = workload(WARMUP_SEQ_LEN)
    warm.call()
    del warm
    point, work = workload(seq_len)
    peak, call_s = measure_peak(work.call, "cpu")
    predicted = predict_mem_bytes(point, resolve_point(point, "cpu"))
    return {"peak_mem_bytes": peak, "predicted_mem_bytes": predicted, "call_s": call_s}


def measure_in_subprocess(backend: str, mode: str, seq_len: int, args: argparse.Namespace) -> dict:
    if args.in_process:
        return child(backend, mode, seq_len, args)
    command = [sys.executable, __file__, "--child", backend, mode, str(seq_len), "--heads", str(args.heads),
               "--head-dim", str(args.head_dim)] + (["--causal"] if args.causal else [])
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{backend} {mode} n={seq_len}: subprocess failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def fit_exponent(sizes: list[int], peaks: list[int | None]) -> float | None:
    """Slope of log(peak) against log(seq_len): peak ~ seq_len ** slope."""
    pairs = [(n, p) for n, p in zip(sizes, peaks) if p]
    if len(pairs) < 2:
        return None
    return float(np.polyfit(np.log([n for n, _ in pairs]), np.log([p for _, p in pairs]), 1)[0])


def mib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / 2**20:.1f}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        backend, mode, seq_len = args.child
        print(json.dumps(child(backend, mode, int(seq_len), args)))
        return 0
    where = "all sizes in this process" if args.in_process else "each size in a fresh subprocess"
    print_header(f"target 2: chunked peak memory vs seq_len ({where})")
    print(f"   heads {args.heads}, head_dim {args.head_dim}, {'causal' if args.causal else 'non-causal'}, float32")
    print(f"\n{'backend':<8} {'mode':<8} {'seq_len':>7} {'peak MiB':>9} {'predicted MiB':>14} {'call s':>7}")
    runs = [("chunked", mode, n) for mode in args.modes for n in args.sizes] + [("naive", "fwd", n) for n in args.naive_sizes]
    peaks: dict[tuple[str, str, int], int | None] = {}
    for backend, mode, n in runs:
        result = measure_in_subprocess(backend, mode, n, args)
        peaks[(backend, mode, n)] = result["peak_mem_bytes"]
        print(f"{backend:<8} {mode:<8} {n:>7} {mib(result['peak_mem_bytes']):>9} "
              f"{mib(result['predicted_mem_bytes']):>14} {result['call_s']:>7.2f}", flush=True)

    limits = {"fwd": 1.15, "fwd_bwd": 1.3}
    span = f"{min(args.sizes)}..{max(args.sizes)}"
    checks = []
    for mode in args.modes:
        series = [peaks[("chunked", mode, n)] for n in args.sizes]
        # The fit over the whole span is flattened by fixed costs at small n; the slope between the
        # two largest sizes shows the asymptotic growth (1.0 = linear).
        tail = fit_exponent(args.sizes[-2:], series[-2:])
        checks.append(Check("2", f"chunked {mode} peak-memory exponent, n={span}", fit_exponent(args.sizes, series),
                            limits[mode], unit="", note="" if tail is None else f"slope over the last two sizes {tail:.2f}"))
    naive_exp = fit_exponent(args.naive_sizes, [peaks[("naive", "fwd", n)] for n in args.naive_sizes])
    n = args.compare_size
    if "fwd" in args.modes:
        chunked_peak, naive_peak = peaks[("chunked", "fwd", n)], peaks[("naive", "fwd", n)]
        ratio = chunked_peak / naive_peak if chunked_peak is not None and naive_peak else None
        checks.append(Check("2", f"chunked/naive fwd peak n={n}", ratio, 0.05, unit="",
                            note=f"naive's own exponent {naive_exp:.2f}" if naive_exp is not None else ""))
    misses = print_checks(checks)
    return 1 if misses and args.strict else 0


if __name__ == "__main__":
    raise SystemExit(main())
