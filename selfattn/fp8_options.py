"""The FP8 options naive and chunked share (their Options inherit Fp8Options), declared without torch: the
config and the command line's check read them (selfattn/backends/options/); selfattn/fp8.py computes with them."""

from __future__ import annotations

from dataclasses import dataclass

from selfattn.fields import spec
from selfattn.fp8_formats import FORMAT_NAMES

SCALINGS = ("tensor", "block", "none")
OFF = "none"
MATMULS = ("auto", "dequant", "scaled_mm")


@dataclass(frozen=True)
class Fp8Options:
    """The options naive and chunked share for precision=fp8_* (their Options inherit them)."""

    fp8: str = spec(OFF, choices=(OFF, *FORMAT_NAMES), config=False,
                    help="set from precision=fp8_e4m3|fp8_e5m2 (not a config key): the FP8 format Q, K, V and P are cast to")
    fp8_scaling: str = spec("tensor", choices=SCALINGS,
                            help="fp8: Q, K, V scale per tensor | per block of fp8_block rows (FA3) | none (a raw cast)")
    fp8_block: int = spec(64, ge=1, help="fp8_scaling=block: rows (tokens) per scale, per batch and head")
    p_scale: float = spec(256.0, gt=0, help="fp8: P is multiplied by this before its cast (FA3: 2^8), divided after")
    hadamard: bool = spec(False, help="fp8: multiply Q and K by one random orthogonal (Hadamard) matrix before quantizing "
                               "(head_dim a power of two)")
    fp8_matmul: str = spec("auto", choices=MATMULS,
                           help="fp8: QK^T and P.V through torch._scaled_mm on the fp8 tensors (scaled_mm, where its CUDA "
                                "rules allow) | on the dequantized values (dequant) | auto (scaled_mm on CUDA >= 8.9)")
