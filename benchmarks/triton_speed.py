"""The project's Triton kernel (backend=triton) against SDPA's flash kernel on a GPU: time ratios and errors.

    python benchmarks/triton_speed.py             # n = 1024..16384, bf16, causal and not (batch 1, 16 heads, d 64)
    python benchmarks/triton_speed.py --quick     # n = 1024, 2048: does it run

Forward and backward (the project's backward kernels, triton_bwd.py): bf16, head_dim 64 and 128, n = 4096 and
16384 (--bwd-sizes), causal and not, one call = forward + dQ/dK/dV for a dense upstream, the same for sdpa's
flash kernel; the target is triton / flash <= BWD_TARGET, printed beside each ratio.

Each size runs both kernels interleaved, repeat after repeat, each call timed by the harness's CUDA timer
(selfattn.measure.timing.time_cuda: triton.testing.do_bench, an L2 flush between calls, the median), and
every ratio triton / sdpa is taken within a repeat (the median over repeats is printed, the spread beside it).
Both outputs are checked against the float64 reference on sampled query rows (max abs error). A fp32 line
at one size shows the dot's precision: exact fp32 (ieee) and TF32.

No figure here is a target: the kernel is the FA2 forward of docs/triton.md, written to be read, with no
autotuning, so the ratio says how far a readable kernel is from torch's flash kernel on this GPU.

On a machine without CUDA it says so and exits 0: the CPU runs the kernel only in triton's interpreter
(correctness, tests/backends/test_triton.py), whose times say nothing about the kernel.
"""

from __future__ import annotations

import argparse

from _common import add_common_args, fmt_ms, paired_ratio, print_header

import numpy as np
import torch

import selfattn
from selfattn.inputs import make_qkv

SAMPLED_ROWS = 64  # query rows the float64 reference computes (evenly spread, last row included)
BWD_TARGET = 1.5  # triton's forward + backward within 1.5x of sdpa flash's (bf16, n = 4096 and 16384, d 64 and 128)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser, strict=False)
    parser.set_defaults(heads=16)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384], help="seq_len values")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds per size")
    parser.add_argument("--timing-s", type=float, default=0.2, help="seconds of timed calls per kernel and round")
    parser.add_argument("--fp32-size", type=int, default=4096, help="seq_len of the fp32 (ieee vs tf32) line")
    parser.add_argument("--bwd-sizes", type=int, nargs="+", default=[4096, 16384], help="seq_len of the fwd_bwd lines")
    parser.add_argument("--quick", action="store_true", help="n = 1024, 2048, two rounds")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.repeats, args.timing_s, args.bwd_sizes = [1024, 2048], 2, 0.05, [1024]
    return args


def _max_err(out: torch.Tensor, q, k, v, causal: bool) -> float:
    rows = torch.linspace(0, q.shape[2] - 1, SAMPLED_ROWS).round().long().unique()
    ref = selfattn.attention_reference(q, k, v, causal=causal, rows=rows)
    return (out[:, :, rows.to(out.device)].double() - ref).abs().max().item()


def _time_ms(fn, timing_s: float) -> float:
    from selfattn.measure.timing import time_cuda

    return time_cuda(fn, timing_s, call_s_estimate=1e-3).median_ms


def _rounds(calls: dict, args: argparse.Namespace) -> dict[str, list[float]]:
    """Each call's ms per round, the calls taking turns within a round (args.repeats rounds)."""
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.repeats):
        for name, call in calls.items():
            times[name].append(_time_ms(call, args.timing_s))
    return times


def compare(n: int, causal: bool, dtype: torch.dtype, args: argparse.Namespace,
            kernels: dict[str, dict]) -> dict[str, list[float]]:
    """Per-round median ms of each named call, and prints one line with the errors."""
    q, k, v = make_qkv(1, args.heads, n, n, args.head_dim, dtype=dtype, device="cuda", seed=n)
    calls = {name: (lambda kw=kw: selfattn.attention(q, k, v, causal=causal, **kw)) for name, kw in kernels.items()}
    errors = {name: _max_err(call(), q, k, v, causal) for name, call in calls.items()}  # also compiles triton
    times = _rounds(calls, args)
    print(f"  n={n:>6} {'causal' if causal else 'full  '} " + "  ".join(
        f"{name} {fmt_ms(times[name])} ms err {errors[name]:.2g}" for name in calls), flush=True)
    return times


def compare_fwd_bwd(n: int, causal: bool, head_dim: int, args: argparse.Namespace) -> dict[str, list[float]]:
    """Per-round median ms of forward + backward (dq, dk, dv of a dense upstream), triton against sdpa flash,
    and one line with each one's largest gradient error against float64 (on the whole, small enough at these n)."""
    q, k, v = make_qkv(1, args.heads, n, n, head_dim, dtype=torch.bfloat16, device="cuda", seed=n, requires_grad=True)
    upstream = torch.randn_like(q)
    kernels = {"triton": {"backend": "triton"}, "sdpa": {"backend": "sdpa", "kernel": "flash"}}

    def call(kw: dict):
        out = selfattn.attention(q, k, v, causal=causal, **kw)
        return torch.autograd.grad(out, (q, k, v), upstream)

    calls = {name: (lambda kw=kw: call(kw)) for name, kw in kernels.items()}
    grads = {name: fn() for name, fn in calls.items()}  # compiles triton's kernels
    diff = max((a.float() - b.float()).abs().max().item() for a, b in zip(grads["triton"], grads["sdpa"]))
    times = _rounds(calls, args)
    print(f"  n={n:>6} d={head_dim:<4} {'causal' if causal else 'full  '} " + "  ".join(
        f"{name} {fmt_ms(times[name])} ms" for name in calls) + f"  max |d triton - d flash| {diff:.2g}", flush=True)
    return times


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print_header("triton (the project's FA2 forward) vs sdpa flash, on a GPU")
    if not torch.cuda.is_available():
        print("needs a CUDA GPU: on a CPU the triton back end runs only in triton's interpreter, ~1000x slower than "
              "SDPA, which proves values (tests/backends/test_triton.py), never speed. Nothing measured.")
        return 0
    from selfattn.backends import triton as backend

    if backend.missing("cuda"):
        print(f"triton back end unavailable: {backend.missing('cuda')}. Nothing measured.")
        return 0
    print(f"   {torch.cuda.get_device_name()} | batch 1, {args.heads} heads, head_dim {args.head_dim} | "
          f"{args.repeats} rounds x {args.timing_s:g} s per kernel")
    pair = {"triton": {"backend": "triton"}, "sdpa": {"backend": "sdpa", "kernel": "flash"}}
    print("\nbf16, forward: per-round median times, max abs error against float64 on sampled rows")
    ratios = []
    for causal in (False, True):
        for n in args.sizes:
            times = compare(n, causal, torch.bfloat16, args, pair)
            per_round = np.asarray(times["triton"]) / np.asarray(times["sdpa"])
            ratios.append((n, causal, paired_ratio(times["triton"], times["sdpa"]), per_round.min(), per_round.max()))
    print("\ntriton / sdpa(flash) forward time, median of the per-round ratios [min-max over rounds]")
    for n, causal, ratio, low, high in ratios:
        print(f"  n={n:>6} {'causal' if causal else 'full  '}  {ratio:.2f}x  [{low:.2f}-{high:.2f}]")
    print("\nbf16, forward + backward: per-round median times, the gradients' largest difference from flash's")
    bwd_ratios = []
    for head_dim in (64, 128):
        for causal in (False, True):
            for n in args.bwd_sizes:
                times = compare_fwd_bwd(n, causal, head_dim, args)
                bwd_ratios.append((n, head_dim, causal, paired_ratio(times["triton"], times["sdpa"])))
    print(f"\ntriton / sdpa(flash) forward + backward time (target <= {BWD_TARGET:g}x)")
    for n, head_dim, causal, ratio in bwd_ratios:
        verdict = "PASS" if ratio <= BWD_TARGET else "MISS"
        print(f"  n={n:>6} d={head_dim:<4} {'causal' if causal else 'full  '}  {ratio:.2f}x  {verdict}")
    print(f"\nfp32, causal, n={args.fp32_size}: the dot's precision (sdpa flash takes no fp32: efficient instead)")
    compare(args.fp32_size, True, torch.float32, args,
            {"triton-ieee": {"backend": "triton", "dot_precision": "ieee"},
             "triton-tf32": {"backend": "triton", "dot_precision": "tf32"},
             "sdpa-efficient": {"backend": "sdpa", "kernel": "efficient"}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
