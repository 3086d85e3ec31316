"""Target 3: the chunked forward + backward against torch SDPA's, at seq_len 4096.

    python benchmarks/chunked_fwd_bwd.py            # n = 4096, non-causal (the target) and causal
    python benchmarks/chunked_fwd_bwd.py --quick    # tiny size, one repeat: does it run

One call is what a sweep's mode=fwd_bwd point times: the forward, then torch.autograd.grad of
the output against a fixed dense upstream gradient for q, k and v. Target: chunked / SDPA
<= 2.5x (batch 1, 8 heads, head_dim 64, float32). The two run interleaved, repeat after repeat.
"""

from __future__ import annotations

import argparse

from _common import add_common_args, Check, fmt_ms, paired_ratio, print_checks, print_header, time_interleaved

import torch

import selfattn


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096], help="seq_len values")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds per size")
    parser.add_argument("--min-run-time", type=float, default=0.5, help="seconds per blocked_autorange of a fast call")
    parser.add_argument("--quick", action="store_true", help="tiny size and one repeat (a smoke run)")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.repeats, args.min_run_time = [256], 1, 0.05
    if args.repeats < 1 or min(args.sizes) < 1:
        parser.error("--repeats and --sizes: expected integers >= 1")
    return args


def fwd_bwd_call(n: int, backend: str, causal: bool, heads: int, head_dim: int):
    q, k, v = selfattn.make_qkv(1, heads, n, n, head_dim, dtype=torch.float32, seed=0, requires_grad=True)
    upstream = torch.randn(q.shape, generator=torch.Generator().manual_seed(1))

    def fn():
        out = selfattn.attention(q, k, v, backend=backend, causal=causal)
        return torch.autograd.grad(out, (q, k, v), upstream)

    return fn


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print_header("target 3: chunked fwd_bwd vs SDPA fwd_bwd")
    from selfattn.backends.capability import Ask
    from selfattn.backends.resolved import resolve

    defaults = resolve("chunked", {}, Ask("cpu", "fp32")).options
    print(f"   chunked defaults {defaults}; heads {args.heads}, head_dim {args.head_dim}")
    checks = []
    print(f"\n{'seq_len':>7} {'backend':<8} {'causal':<6} per-repeat ms")
    for n in args.sizes:
        fns = {
            (backend, causal): fwd_bwd_call(n, backend, causal, args.heads, args.head_dim)
            for causal in (False, True)
            for backend in ("sdpa", "chunked")
        }
        times = time_interleaved(fns, args.repeats, args.min_run_time)  # type: ignore[arg-type]
        for (backend, causal), ms in times.items():
            print(f"{n:>7} {backend:<8} {str(causal):<6} {fmt_ms(ms)}", flush=True)
        for causal in (False, True):
            ratio = paired_ratio(times[("chunked", causal)], times[("sdpa", causal)])
            checks.append(Check("3", f"chunked/sdpa fwd_bwd n={n} {'causal' if causal else 'non-causal'}", ratio, 2.5))
    misses = print_checks(checks)
    return 1 if misses and args.strict else 0


if __name__ == "__main__":
    raise SystemExit(main())
