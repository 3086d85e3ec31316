"""What a mask function costs beside the built-in interval masks, and what its geometry costs to make once.

    python benchmarks/mask_functions.py                       # CPU sizes (n = 512, 1024)
    python benchmarks/mask_functions.py --n 4096 8192 --device cuda

1. The same mask two ways (causal, and a causal window of n/8): as today's axes (per-row key intervals, each back
   end's fast path) and as a mask function (selfattn/mods/catalogue.py's `causal`, `sliding_window`, passed as
   mask_mod), per back end: the median time of each (torch.utils.benchmark on a CPU, CUDA events on a GPU) and
   their ratio. A function's dense mask and block map are made by the warm-up call, outside the timing.
2. The one-time geometry of prefix_lm and a dilated window: the visible-pair count and chunked's block map
   (row blocks, no n x n tensor), in seconds.

Prints one table per part; judge nothing from one run on a busy machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import selfattn
from selfattn.masks import Masks
from selfattn.mods import discovery, geometry


def _time_ms(fn, device: str, repeats: int = 7) -> float:
    fn()  # the warm-up: builds a function's kept mask or block map
    if device == "cuda":
        torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def compare(n: int, device: str, backends: list[str]) -> list[tuple]:
    q, k, v = (torch.randn(1, 8, n, 64, device=device) for _ in range(3))
    window = max(2, n // 8)
    cases = {
        "causal": ({"causal": True}, {"mask_mod": discovery.bind("mask", "causal")}),
        f"causal window {window}": ({"causal": True, "window": window},
                                    {"causal": True, "mask_mod": discovery.bind("mask", "sliding_window", {"window": window})}),
    }
    rows = []
    for name, (axes, function) in cases.items():
        for backend in backends:
            axes_ms = _time_ms(lambda: selfattn.attention(q, k, v, backend=backend, **axes), device)
            fn_ms = _time_ms(lambda: selfattn.attention(q, k, v, backend=backend, **function), device)
            rows.append((n, name, backend, axes_ms, fn_ms, fn_ms / axes_ms))
    return rows


def geometry_cost(n: int) -> list[tuple]:
    rows = []
    for name, options in (("prefix_lm", {"prefix": n // 4}), ("dilated_sliding_window", {"window": n // 8, "dilation": 4})):
        masks = Masks(mask_mod=discovery.bind("mask", name, options))
        start = time.perf_counter()
        pairs = geometry.pairs(masks, 1, 1, n, n)
        pairs_s = time.perf_counter() - start
        start = time.perf_counter()
        plan = geometry.block_map(masks, 1, 1, n, n, 128, 128)
        map_s = time.perf_counter() - start
        blocks = sum(len(kv) for _, _, kv in plan)
        partial = sum(p for _, _, kv in plan for _, _, p in kv)
        total = len(plan) * len(range(0, n, 128))
        rows.append((n, name, pairs / n ** 2, pairs_s, map_s, f"{blocks}/{total}", partial))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[512, 1024])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--backends", nargs="+", default=["naive", "sdpa", "chunked"])
    args = parser.parse_args()
    from tabulate import tabulate

    rows = [r for n in args.n for r in compare(n, args.device, args.backends)]
    print(tabulate(rows, headers=["n", "mask", "backend", "as axes (ms)", "as a function (ms)", "function / axes"],
                   floatfmt=".3g"))
    print()
    rows = [r for n in args.n for r in geometry_cost(n)]
    print(tabulate(rows, headers=["n", "mask", "density", "pairs counted (s)", "block map (s)",
                                  "128-blocks computed", "of them partial"], floatfmt=".3g"))


if __name__ == "__main__":
    main()
