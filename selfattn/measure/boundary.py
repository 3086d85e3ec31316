"""The query rows every accuracy sample holds: the first and last rows, and both rows at each edge of the back
end's query blocks, beside the seeded random rows.

Kernels go wrong at their boundaries: the last row of a tail block stored out of bounds or not at all, the first
row of a block reading its neighbour's running max, a mask off by one at a tile's edge. A sample of 128 random rows
out of 2048 holds the last one with probability 1/16, so a last-row bug was `ok` at 3 of 4 points above 128 rows.
So the sample is the union of the required rows and random ones: `budget.accuracy_rows` rows in all (or every row
required, where they are more), the required ones always.

A back end's plan (its query block size) is read from its own module, for the built-ins that tile the queries:
chunked (its `q_chunk`, auto sized from the mask: chunked.chunk_sizes) and triton (`block_m`). A back end without
a plan here (sdpa, naive, flex, plugins) gets the first and last rows only; its blocks are not known to the
harness.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch

from selfattn.scopes import SCOPES

if TYPE_CHECKING:
    from selfattn.backends.resolved import Resolved


def _chunked_block(point: Any, options: dict[str, Any]) -> int | None:
    from selfattn.backends.chunked import chunk_sizes
    from selfattn.masks import Masks

    return chunk_sizes(Masks(causal=point.causal, window=point.window), options.get("q_chunk"),
                       options.get("kv_chunk"))[0]


def _triton_block(point: Any, options: dict[str, Any]) -> int | None:
    return options.get("block_m")


# back end name -> its query block size for a point and its resolved options (None: no fixed blocks)
QUERY_BLOCKS: dict[str, Callable[[Any, dict[str, Any]], int | None]] = {
    "chunked": _chunked_block,
    "triton": _triton_block,
}


def query_block(point: Any, resolved: Resolved) -> int | None:
    """The back end's query block size at this point (its options as resolved), or None where the harness knows
    no plan of it."""
    plan = QUERY_BLOCKS.get(resolved.name)
    if plan is None or not SCOPES[point.scope].block_rows:
        return None
    block = plan(point, dict(resolved.options))
    return int(block) if block else None


def required_rows(q_len: int, block: int | None = None) -> list[int]:
    """The rows every sample holds: 0, q_len - 1, and m*block - 1, m*block for every block edge inside q_len."""
    rows = {0, q_len - 1}
    if block and block < q_len:
        for edge in range(block, q_len, block):
            rows.update((edge - 1, edge))
    return sorted(r for r in rows if 0 <= r < q_len)


def required_row_count(q_len: int, block: int | None = None) -> int:
    """len(required_rows(q_len, block)) in closed form: the guard counts them before its refusal, and the list
    grows with q_len / block (a billion rows in blocks of 64: 31 million rows, seconds and hundreds of MB)."""
    if q_len <= 2 or not block or block < 1 or block >= q_len:
        return max(0, min(q_len, 2))
    if block == 1:
        return q_len  # every row is at an edge
    edges = (q_len - 1) // block  # m*block for m = 1..edges, each with its row before: distinct when block >= 2
    return 2 * edges + 2 - (1 if (q_len - 1) % block == 0 else 0)  # the last row is an edge's when block | q_len-1


def judged_row_count(q_len: int, count: int, block: int | None = None) -> int:
    """How many rows `judged_rows` returns (for the budget guard, before any tensor is made: closed forms only)."""
    return min(q_len, max(count, required_row_count(q_len, block)))


def judged_rows(q_len: int, count: int, seed: int, block: int | None = None) -> torch.Tensor:
    """Sorted query indices: the required rows, then seeded random rows up to `count` in all (every row when
    q_len <= count)."""
    if q_len <= count:
        return torch.arange(q_len)
    required = torch.tensor(required_rows(q_len, block), dtype=torch.long)
    extra = count - len(required)
    if extra <= 0:
        return required
    # the random rows: accuracy.sample_rows's seeded draw (in its order, before its sort), without the required ones
    generator = torch.Generator(device="cpu").manual_seed(seed)
    drawn = torch.randperm(q_len, generator=generator)[:count + len(required)]
    drawn = drawn[~torch.isin(drawn, required)][:extra]
    return torch.cat([required, drawn]).sort().values


def point_rows(point: Any, count: int, resolved: Resolved) -> torch.Tensor:
    """The point's accuracy sample (measure_point's `sampled_queries`)."""
    return judged_rows(point.q_len_resolved, count, point.seed, query_block(point, resolved))


def point_row_count(point: Any, count: int, resolved: Resolved) -> int:
    return judged_row_count(point.q_len_resolved, count, query_block(point, resolved))
