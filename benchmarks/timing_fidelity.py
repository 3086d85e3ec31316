"""Target 5: does the harness's time agree with an independent torch.utils.benchmark measurement?

    python benchmarks/timing_fidelity.py            # sdpa at 2048 and chunked at 4096, 3 rounds each
    python benchmarks/timing_fidelity.py --quick    # tiny sizes, one round: does it run

Per round, the same point is measured twice, in alternating order: by the harness
(`selfattn.measure.measure_point`, its `time_ms` median) and independently, by a
`torch.utils.benchmark.Timer(...).blocked_autorange()` of the same call built here from
scratch (seeded inputs, `selfattn.attention` under no_grad). The independent Timer gets
`num_threads=torch.get_num_threads()` like the harness: Timer's default of one thread would time
a different computation. A call slower than `--min-run-time` gets a run time of 3 calls, so
both sides report a median of about three samples. Target: harness / independent within 10%
(the median over rounds; every round is printed).
"""

from __future__ import annotations

import argparse
import time

from _common import add_common_args, Check, print_checks, print_header

import numpy as np
import torch
import torch.utils.benchmark as torch_benchmark

import selfattn
from selfattn import Point
from selfattn.measure import Budget, measure_point

SAMPLES = 3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--cases", nargs="+", default=["sdpa:2048", "chunked:4096"], help="BACKEND:SEQ_LEN pairs")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per case")
    parser.add_argument("--timing-s", type=float, default=1.0, help="the harness's budget.timing_s (the sweep default)")
    parser.add_argument("--min-run-time", type=float, default=1.0, help="the independent Timer's min_run_time")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and one round (a smoke run)")
    args = parser.parse_args(argv)
    if args.quick:
        args.cases, args.repeats, args.timing_s, args.min_run_time = ["sdpa:128", "chunked:256"], 1, 0.05, 0.05
    cases = []
    for case in args.cases:
        backend, _, size = case.partition(":")
        if backend not in selfattn.BACKENDS or not size.isdigit() or int(size) < 1:
            parser.error(f"--cases: expected BACKEND:SEQ_LEN with BACKEND in {', '.join(selfattn.BACKENDS)}, got {case!r}")
        cases.append((backend, int(size)))
    args.cases = cases
    return args


def independent_ms(backend: str, n: int, args: argparse.Namespace) -> float:
    """Median per-call ms of the point's call, timed by torch's Timer alone."""
    q, k, v = selfattn.make_qkv(1, args.heads, n, n, args.head_dim, dtype=torch.float32, seed=0)

    def fn() -> torch.Tensor:
        with torch.no_grad():
            return selfattn.attention(q, k, v, backend=backend)

    start = time.perf_counter()
    fn()  # warm-up (Timer warms up again while it picks its block size)
    call_s = time.perf_counter() - start
    timer = torch_benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    min_run_time = args.min_run_time if call_s < args.min_run_time else SAMPLES * call_s
    return timer.blocked_autorange(min_run_time=min_run_time).median * 1e3


def harness_ms(backend: str, n: int, args: argparse.Namespace) -> float:
    point = Point(backend=backend, seq_len=n, heads=args.heads, head_dim=args.head_dim)
    row = measure_point(point, Budget(timing_s=args.timing_s))
    if row.status != "ok" or row.time_ms is None:
        raise RuntimeError(f"{backend} n={n}: measure_point returned status {row.status}: {row.error}")
    return float(row.time_ms)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print_header("target 5: harness time_ms vs an independent torch.utils.benchmark Timer")
    print(f"   heads {args.heads}, head_dim {args.head_dim}, fwd, float32; harness timing_s {args.timing_s}")
    print(f"\n{'backend':<8} {'seq_len':>7} {'round':>5} {'harness ms':>11} {'Timer ms':>9} {'ratio':>6}")
    checks = []
    for backend, n in args.cases:
        ratios = []
        for round_ in range(args.repeats):
            # Alternate who goes first, so a drift in load does not always favour the same side.
            if round_ % 2 == 0:
                harness, independent = harness_ms(backend, n, args), independent_ms(backend, n, args)
            else:
                independent, harness = independent_ms(backend, n, args), harness_ms(backend, n, args)
            ratios.append(harness / independent)
            print(f"{backend:<8} {n:>7} {round_ + 1:>5} {harness:>11.1f} {independent:>9.1f} {ratios[-1]:>6.3f}", flush=True)
        median = float(np.median(ratios))
        checks.append(Check("5", f"|harness/Timer - 1| {backend} n={n}", abs(median - 1.0), 0.10, unit="",
                            note=f"median ratio {median:.3f} over {len(ratios)} rounds"))
    misses = print_checks(checks)
    return 1 if misses and args.strict else 0


if __name__ == "__main__":
    raise SystemExit(main())
