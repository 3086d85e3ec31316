"""Precisions by name: the dtype each one computes in, and the TF32 switch around a call.

tf32 is float32 storage with TF32 tensor-core matmuls, which exist only on CUDA (Ampere+);
on a CPU it raises Unsupported rather than silently measuring plain float32.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from selfattn.errors import Unsupported

DTYPES: dict[str, torch.dtype] = {
    "fp64": torch.float64,
    "fp32": torch.float32,
    "tf32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
}
PRECISIONS: tuple[str, ...] = tuple(DTYPES)
NAMES: dict[torch.dtype, str] = {torch.float64: "fp64", torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def _check(precision: str) -> None:
    if precision not in DTYPES:
        raise ValueError(f"precision: expected one of {', '.join(PRECISIONS)}, got {precision!r}")


def resolve_dtype(precision: str, device: torch.device | str = "cpu") -> torch.dtype:
    """The torch dtype for `precision` on `device`; tf32 off CUDA raises Unsupported."""
    _check(precision)
    if precision == "tf32" and torch.device(device).type != "cuda":
        raise Unsupported(f"precision tf32: TF32 matmuls need a CUDA device, got {torch.device(device).type}")
    return DTYPES[precision]


def precision_name(dtype: torch.dtype) -> str:
    """fp64 | fp32 | fp16 | bf16 for a dtype (used in test ids and labels)."""
    return NAMES[dtype]


@contextlib.contextmanager
def precision_context(precision: str, device: torch.device | str = "cpu") -> Iterator[torch.dtype]:
    """Enable TF32 matmuls only for tf32 (disable them otherwise), restore the old flags on exit.

    Yields the dtype, so `with precision_context(p, dev) as dtype:` is all a caller needs.
    """
    dtype = resolve_dtype(precision, device)
    use_tf32 = precision == "tf32"
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = use_tf32
    torch.backends.cudnn.allow_tf32 = use_tf32
    try:
        yield dtype
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
