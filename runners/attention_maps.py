"""`python -m runners.attention_maps --out DIR`: one head's attention weights A, drawn as a figure.

The chapter's second truth: attention weights can be looked at. This computes A for one head at a small n
on seeded Q and K with the harness's own naive back end, through its public contract: V is the identity
(A V = A), with Q and K zero-padded to V's width so Q K^T is unchanged and the scale passed explicitly
(1/sqrt(d_k) of the unpadded d_k, or 1.0 unscaled). Two rows of panels: scaled against unscaled at a small
and a large d_k (saturation made visible), and the masks (none, causal, a causal window, padding, packed
documents) side by side. Writes DIR/attention_maps.csv (tidy: panel, query, key, weight) and the figure.

Why here (runners/) and not in the report: analysis/ reads CSV files and never imports torch (an import
contract, docs/architecture.md), and these weights are no sweep row; the runner side may use both selfattn
(to compute) and analysis.figures (to draw, in the report's style), in the one direction the layers allow.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
import torch

from analysis.figures.attention_maps import attention_maps_figure
from analysis.figures.common import Context
from selfattn.api import attention
from selfattn.inputs import make_document_ids, make_qkv

N = 64
SMALL_D_K, LARGE_D_K, MASK_D_K = 16, 512, 64
WINDOW_FRACTION = 0.25  # a causal window of n/4 keys
PADDED_FRACTION = 0.375  # the last 3/8 of the keys are right padding (24 of 64)
DOCUMENTS = 4


@dataclass(frozen=True)
class Panel:
    group: str  # "scale" or "mask": the figure's row
    title: str
    head_dim: int
    scaled: bool = True
    masks: tuple[tuple[str, Any], ...] = ()  # selfattn.attention's mask arguments, as (name, value) pairs


def panels(n: int = N, seed: int = 0) -> list[Panel]:
    documents = make_document_ids(1, n, min(DOCUMENTS, n), seed=seed)
    window, length = max(1, round(n * WINDOW_FRACTION)), max(1, round(n * (1 - PADDED_FRACTION)))
    return [
        Panel("scale", f"d_k={SMALL_D_K}, scaled 1/√d_k", SMALL_D_K),
        Panel("scale", f"d_k={SMALL_D_K}, unscaled", SMALL_D_K, scaled=False),
        Panel("scale", f"d_k={LARGE_D_K}, scaled 1/√d_k", LARGE_D_K),
        Panel("scale", f"d_k={LARGE_D_K}, unscaled", LARGE_D_K, scaled=False),
        Panel("mask", "no mask", MASK_D_K),
        Panel("mask", "causal", MASK_D_K, masks=(("causal", True),)),
        Panel("mask", f"causal, window {window}", MASK_D_K, masks=(("causal", True), ("window", window))),
        Panel("mask", f"padding: {n - length} of {n} keys", MASK_D_K, masks=(("key_lengths", torch.tensor([length])),)),
        Panel("mask", f"{DOCUMENTS} packed documents", MASK_D_K, masks=(("document_ids", documents),)),
    ]


def weights(q_BHLD: torch.Tensor, k_BHLD: torch.Tensor, *, scale: float, backend: str = "naive",
            **masks: Any) -> torch.Tensor:
    """A = softmax(scale Q K^T + mask) as the back end computes it, (B, H, q_len, seq_len): its output for
    V = I, with Q and K zero-padded to V's width (padding adds nothing to Q K^T)."""
    b, h, q_len, d_k = q_BHLD.shape
    seq_len = k_BHLD.shape[2]
    width = max(d_k, seq_len)
    pad = (0, width - d_k)
    q, k = torch.nn.functional.pad(q_BHLD, pad), torch.nn.functional.pad(k_BHLD, pad)
    v = torch.eye(seq_len, width, dtype=q.dtype, device=q.device).expand(b, k.shape[1], seq_len, width)
    with torch.no_grad():
        out = attention(q, k, v.contiguous(), backend=backend, scale=scale, **masks)
    return out[..., :seq_len]


def attention_maps(n: int = N, seed: int = 0, backend: str = "naive") -> pd.DataFrame:
    """Tidy weights of every panel: panel, group, title, head_dim, scaled, query, key, weight (float32 run)."""
    frames = []
    for i, panel in enumerate(panels(n, seed)):
        q, k, _ = make_qkv(1, 1, n, n, panel.head_dim, seed=seed)
        scale = 1.0 / math.sqrt(panel.head_dim) if panel.scaled else 1.0
        a = weights(q, k, scale=scale, backend=backend, **dict(panel.masks))[0, 0]
        query, key = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
        frames.append(pd.DataFrame({"panel": i, "group": panel.group, "title": panel.title,
                                    "head_dim": panel.head_dim, "scaled": panel.scaled,
                                    "query": query.reshape(-1).numpy(), "key": key.reshape(-1).numpy(),
                                    "weight": a.reshape(-1).double().numpy()}))
    return pd.concat(frames, ignore_index=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runners.attention_maps", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for attention_maps.csv and figures/")
    parser.add_argument("--n", type=int, default=N, help=f"tokens (default {N})")
    parser.add_argument("--seed", type=int, default=0, help="seed of Q and K (default 0)")
    parser.add_argument("--formats", default="png,pdf", help="figure formats, comma-separated")
    args = parser.parse_args(argv)
    if args.n < 2:
        parser.error(f"--n: expected an integer >= 2, got {args.n}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    maps = attention_maps(args.n, args.seed)
    maps.to_csv(out / "attention_maps.csv", index=False)
    made = attention_maps_figure(maps, Context(out / "figures", formats=tuple(args.formats.split(","))))
    print(f"attention maps: {', '.join(str(p) for p in made.files)}")
    for note in made.notes:
        print(f"  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
