"""triton's options (selfattn/backends/triton.py): the FlashAttention-2 forward pass as one Triton kernel."""

from __future__ import annotations

from dataclasses import dataclass

from selfattn.fields import spec

BLOCK_SIZES = (16, 32, 64, 128)  # tl.dot's tiles are at least 16 on a side; powers of two


@dataclass(frozen=True)
class Options:
    block_m: int = spec(64, choices=BLOCK_SIZES, help="query rows per program (one tile of the kernel)")
    block_n: int = spec(64, choices=BLOCK_SIZES, help="key rows per iteration of the kernel's loop")
    dot_precision: str = spec("auto", choices=("auto", "tf32", "ieee"),
                              help="fp32 inputs: tl.dot on TF32 tensor cores or exact fp32 (ieee); auto follows "
                                   "torch's TF32 flag (precision=tf32 -> tf32, fp32 -> ieee)")
