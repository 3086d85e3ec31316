"""The chunked back end's chunk sizes: a measured q_chunk x kv_chunk sweep behind its defaults.

    python benchmarks/chunk_sizes.py              # 4096 and 8192, causal and not, fwd
    python benchmarks/chunk_sizes.py --quick      # tiny sizes: does it run

For each seq_len and causal setting, every (q_chunk, kv_chunk) pair runs interleaved with SDPA
(one round by default: the 8192 calls take seconds each); a cell is chunked time / SDPA time of
the same round. `*` marks the pair auto runs there (`chunked.chunk_sizes` without a window: DEFAULT_CHUNKS,
or CAUSAL_CHUNKS causal), `<` the fastest pair of that setting. The last tables rank the pairs, without a
mask and causal apart, by their geometric-mean slowdown against each setting's fastest pair: the
pair that mask's default should be.
"""

from __future__ import annotations

import argparse
import itertools

from _common import add_common_args, paired_ratio, print_header, time_interleaved, time_once_s

import numpy as np
import torch

import selfattn


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser, strict=False)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--q-chunks", type=int, nargs="+", default=[128, 256, 512])
    parser.add_argument("--kv-chunks", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--repeats", type=int, default=1, help="interleaved rounds per setting")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and grid (a smoke run)")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.q_chunks, args.kv_chunks = [256], [64, 128], [64, 128]
    if min(args.sizes + args.q_chunks + args.kv_chunks) < 1 or args.repeats < 1:
        parser.error("--sizes, --q-chunks, --kv-chunks, --repeats: expected integers >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print_header("chunk-size sweep of the chunked forward (cells: chunked time / SDPA time)")
    from selfattn.backends.chunked import chunk_sizes
    from selfattn.masks import Masks

    from selfattn.backends.capability import Ask
    from selfattn.backends.resolved import resolve

    default = resolve("chunked", {}, Ask("cpu", "fp32")).options
    default_pairs = {causal: chunk_sizes(Masks(causal=causal), None, None) for causal in (False, True)}  # auto's
    print(f"   defaults {default}; heads {args.heads}, head_dim {args.head_dim}, float32, {args.repeats} round(s)")
    pairs = list(itertools.product(args.q_chunks, args.kv_chunks))
    slowdowns: dict[bool, dict[tuple[int, int], list[float]]] = {c: {pair: [] for pair in pairs} for c in (False, True)}
    for n, causal in itertools.product(args.sizes, (False, True)):
        q, k, v = selfattn.make_qkv(1, args.heads, n, n, args.head_dim, dtype=torch.float32, seed=0)

        def call(options: dict):
            def fn() -> torch.Tensor:
                with torch.no_grad():
                    return selfattn.attention(q, k, v, causal=causal, **options)

            return fn

        fns = {"sdpa": call({"backend": "sdpa"})}
        fns.update({pair: call({"backend": "chunked", "q_chunk": pair[0], "kv_chunk": pair[1]}) for pair in pairs})
        # One warm-up per back end is enough: other chunk sizes run the very same kernels.
        warm_s = time_once_s(fns["sdpa"]) + time_once_s(fns[pairs[0]])
        times = time_interleaved(fns, args.repeats, min_run_time=0.5, warmup=warm_s < 1.0)  # type: ignore[arg-type]
        ratios = {pair: paired_ratio(times[pair], times["sdpa"]) for pair in pairs}
        best = min(ratios, key=ratios.get)
        for pair in pairs:
            slowdowns[causal][pair].append(ratios[pair] / ratios[best])
        print(f"\nseq_len {n}, {'causal' if causal else 'non-causal'}: SDPA {np.median(times['sdpa']):.0f} ms")
        print("q_chunk \\ kv_chunk" + "".join(f"{kv:>9}" for kv in args.kv_chunks))
        for qc in args.q_chunks:
            cells = ""
            for kv in args.kv_chunks:
                mark = ("*" if (qc, kv) == default_pairs[causal] else "") + ("<" if (qc, kv) == best else "")
                cells += f"{ratios[(qc, kv)]:>7.2f}{mark:<2}"
            print(f"{qc:>17}{cells}", flush=True)
    for causal in (False, True):
        print(f"\n{'causal' if causal else 'non-causal'} pairs by geometric-mean slowdown vs each size's fastest pair "
              "(1.00 = always fastest)")
        gmeans = {pair: float(np.exp(np.mean(np.log(slowdowns[causal][pair])))) for pair in pairs}
        for pair in sorted(pairs, key=gmeans.get):
            mark = "  <- default" if pair == default_pairs[causal] else ""
            print(f"  q_chunk {pair[0]:>5} kv_chunk {pair[1]:>5}: {gmeans[pair]:.3f}{mark}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
