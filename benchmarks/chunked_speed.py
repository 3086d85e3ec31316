"""Target 1: the chunked forward against torch SDPA and naive, causal and not, and its masked rows.

    python benchmarks/chunked_speed.py            # n = 4096, 8192 vs SDPA; n = 2048, 4096 vs naive
    python benchmarks/chunked_speed.py --quick    # tiny sizes, one repeat: does it run

Figures (the chunked speed target; batch 1, 8 heads, head_dim 64, float32):
  chunked / SDPA forward time at 4096 and 8192, causal and not: <= 1.5x
  chunked / naive forward time from 2048 up: < 1x
  chunked causal / non-causal time at 8192: near 0.5 (checked as <= 0.6; the printed block-work
      fraction is what skipping hidden key blocks can reach at best with the default chunks)
  query rows whose first key block is (partly) masked: no NaN, and the same values as the float64
      reference, for odd chunk sizes and q_len < seq_len (the bottom-right aligned mask).
All calls of one size run interleaved, repeat after repeat; every ratio is taken within a repeat.
"""

from __future__ import annotations

import argparse
import warnings

from _common import add_common_args, Check, fmt_ms, paired_ratio, print_checks, print_header, time_interleaved

import torch

import selfattn
from selfattn.backends import BACKENDS

BACKEND_NAMES = ("sdpa", "chunked", "naive")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--sdpa-sizes", type=int, nargs="+", default=[4096, 8192], help="seq_len compared with SDPA")
    parser.add_argument("--naive-sizes", type=int, nargs="+", default=[2048, 4096], help="seq_len compared with naive")
    parser.add_argument("--causal-size", type=int, default=8192, help="seq_len of the causal/non-causal ratio")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds per size")
    parser.add_argument("--min-run-time", type=float, default=0.5, help="seconds per blocked_autorange of a fast call")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and one repeat (a smoke run)")
    args = parser.parse_args(argv)
    if args.quick:
        args.sdpa_sizes, args.naive_sizes, args.causal_size, args.repeats, args.min_run_time = [256], [256], 256, 1, 0.05
    for name in ("repeats", "heads", "head_dim", "causal_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: expected an integer >= 1, got {getattr(args, name)}")
    return args


def causal_work_fraction(n: int, q_chunk: int, kv_chunk: int) -> float:
    """Share of the n x n scores the chunked causal forward computes (whole blocks up to the diagonal)."""
    # A query block [m0, m1) visits keys [0, m1) (the last key block is cut at m1), whatever kv_chunk.
    area = sum((min(m0 + q_chunk, n) - m0) * min(m0 + q_chunk, n) for m0 in range(0, n, q_chunk))
    return area / (n * n)


def time_size(n: int, backends: list[str], args: argparse.Namespace) -> dict[tuple[str, bool], list[float]]:
    q, k, v = selfattn.make_qkv(1, args.heads, n, n, args.head_dim, dtype=torch.float32, seed=0)

    def call(backend: str, causal: bool):
        def fn() -> torch.Tensor:
            with torch.no_grad():
                return selfattn.attention(q, k, v, backend=backend, causal=causal)

        return fn

    fns = {(b, c): call(b, c) for c in (False, True) for b in backends}
    return time_interleaved(fns, args.repeats, args.min_run_time)  # type: ignore[arg-type]


def masked_rows_checks() -> tuple[int, float, list[str]]:
    """Chunked causal on shapes whose blocks straddle the diagonal: (non-finite count, max |err|, notes)."""
    cases = [  # (q_len, seq_len, q_chunk, kv_chunk)
        (300, 300, 64, 48), (300, 300, 1, 7), (300, 300, 128, 1), (100, 300, 64, 48),
        (1, 300, 64, 48), (257, 1000, 256, 512), (257, 1000, None, None),
    ]
    nonfinite, worst = 0, 0.0
    for q_len, seq_len, q_chunk, kv_chunk in cases:
        q, k, v = selfattn.make_qkv(1, 2, q_len, seq_len, 16, dtype=torch.float32, seed=1)
        options = {} if q_chunk is None else {"q_chunk": q_chunk, "kv_chunk": kv_chunk}
        out = selfattn.attention(q, k, v, backend="chunked", causal=True, **options)
        ref = selfattn.attention_reference(q, k, v, causal=True)
        nonfinite += int((~torch.isfinite(out)).sum())
        worst = max(worst, float((out.double() - ref).abs().max()))
    return nonfinite, worst, contract_notes()


def contract_notes() -> list[str]:
    """What happens to query rows that see no key at all (causal with q_len > seq_len)."""
    q, k, v = selfattn.make_qkv(1, 2, 8, 5, 16, dtype=torch.float32, seed=2)  # rows 0..2 see no key
    notes = []
    for name in BACKEND_NAMES:
        try:
            selfattn.attention(q, k, v, backend=name, causal=True)
            public = "returns"
        except ValueError as err:
            public = f"ValueError ({str(err)[:60]}...)"
        # Below the public check (the raw back end), for the record: what each would compute.
        options = selfattn.default_options(name)
        try:
            with warnings.catch_warnings():  # torch's own "will produce NaNs" warning: the note says it
                warnings.simplefilter("ignore")
                raw = BACKENDS[name].attention(q, k, v, causal=True, scale=0.25, **options)
            blind = raw[:, :, :3]
            raw_text = "NaN" if torch.isnan(blind).all() else "zeros" if (blind == 0).all() else "other values"
        except Exception as err:  # noqa: BLE001 - reported, not handled
            raw_text = f"{type(err).__name__}"
        notes.append(f"{name:<8} selfattn.attention: {public}; raw back end on the key-less rows: {raw_text}")
    return notes


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print_header("target 1: chunked forward vs SDPA and naive")
    opts = selfattn.default_options("chunked")
    print(f"   chunked defaults {opts}; heads {args.heads}, head_dim {args.head_dim}, repeats {args.repeats}")
    sizes = sorted(set(args.sdpa_sizes) | set(args.naive_sizes) | {args.causal_size})
    times = {}
    print(f"\n{'seq_len':>7} {'backend':<8} {'causal':<6} per-repeat ms")
    for n in sizes:
        backends = ["sdpa", "chunked"] + (["naive"] if n in args.naive_sizes else [])
        times[n] = time_size(n, backends, args)
        for (backend, causal), ms in times[n].items():
            print(f"{n:>7} {backend:<8} {str(causal):<6} {fmt_ms(ms)}", flush=True)

    checks = []
    for n in args.sdpa_sizes:
        for causal in (False, True):
            ratio = paired_ratio(times[n][("chunked", causal)], times[n][("sdpa", causal)])
            checks.append(Check("1", f"chunked/sdpa fwd n={n} {'causal' if causal else 'non-causal'}", ratio, 1.5))
    for n in args.naive_sizes:
        for causal in (False, True):
            ratio = paired_ratio(times[n][("chunked", causal)], times[n][("naive", causal)])
            checks.append(Check("1", f"chunked/naive fwd n={n} {'causal' if causal else 'non-causal'}", ratio, 1.0))
    n = args.causal_size
    fraction = causal_work_fraction(n, opts["q_chunk"], opts["kv_chunk"])
    sdpa_causal = paired_ratio(times[n][("sdpa", True)], times[n][("sdpa", False)])
    checks.append(Check(
        "1", f"chunked causal/non-causal fwd n={n}", paired_ratio(times[n][("chunked", True)], times[n][("chunked", False)]),
        0.6, note=f"block work {fraction:.2f}; sdpa's own ratio {sdpa_causal:.2f}",
    ))
    nonfinite, worst, notes = masked_rows_checks()
    checks.append(Check("1", "non-finite outputs, causal blocks on the diagonal", nonfinite, 0, unit="",
                        note=f"max |err| vs float64 {worst:.1e}"))
    misses = print_checks(checks)
    print("\nRows that see no key (causal, q_len > seq_len):")
    for line in notes:
        print("  " + line)
    return 1 if misses and args.strict else 0


if __name__ == "__main__":
    raise SystemExit(main())
