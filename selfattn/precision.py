"""Precisions by name: the dtype each one computes in, and the TF32 switch around a call.

tf32 is float32 storage with TF32 tensor-core matmuls, which exist only on CUDA GPUs of compute
capability 8.0 (Ampere) and newer: on a CPU or an older GPU torch accepts the flag and silently
computes plain float32, so tf32 raises Unsupported there instead of mislabelling an fp32 result.

Even where TF32 exists, a kernel may ignore the flag: SDPA's fused kernels do (flash and cuDNN
refuse fp32 outright; the memory-efficient kernel computes fp32 with its own scheme), while its
math kernel and plain matmuls honour it. Which kernel ran is only known at run time, so
`tf32_ignored` asks the result itself: the same call with TF32 off, compared bit for bit.

fp8_e4m3 and fp8_e5m2 name a float8 dtype: the back ends' options read it (selfattn/fp8.py), while the
inputs are stored in `storage_dtype`, float32, and quantized inside the call.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch

from selfattn.errors import Unsupported
from selfattn.precision_names import PRECISIONS

DTYPES: dict[str, torch.dtype] = {
    "fp64": torch.float64,
    "fp32": torch.float32,
    "tf32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
TF32_MIN_CAPABILITY = (8, 0)  # Ampere: the first GPUs with TF32 tensor cores


def check_precision(precision: str) -> None:
    """A one-line ValueError naming the field when `precision` is not one of PRECISIONS."""
    if precision not in DTYPES:
        raise ValueError(f"precision: expected one of {', '.join(PRECISIONS)}, got {precision!r}")


def tf32_reason(device: torch.device | str = "cpu") -> str | None:
    """Why precision tf32 cannot run on `device` (off CUDA, or a GPU older than TF32_MIN_CAPABILITY), or None."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return f"precision tf32: TF32 matmuls need a CUDA device, got {dev.type}"
    capability = tuple(torch.cuda.get_device_capability(dev))
    if capability < TF32_MIN_CAPABILITY:
        return (f"precision tf32: TF32 tensor cores need compute capability >= 8.0, this GPU has "
                f"{capability[0]}.{capability[1]} (torch would silently compute plain fp32)")
    return None


def resolve_dtype(precision: str, device: torch.device | str = "cpu") -> torch.dtype:
    """The torch dtype for `precision` on `device`; tf32 where it cannot run (tf32_reason) raises Unsupported."""
    check_precision(precision)
    why = tf32_reason(device) if precision == "tf32" else None
    if why:
        raise Unsupported(why)
    return DTYPES[precision]


def storage_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a point's tensors are made in: float32 for an FP8 precision (Q, K, V are quantized
    inside the call, the output comes back in float32), the precision's own dtype otherwise."""
    return torch.float32 if dtype in FP8_DTYPES else dtype


@contextlib.contextmanager
def precision_context(precision: str, device: torch.device | str = "cpu") -> Iterator[torch.dtype]:
    """Enable TF32 matmuls only for tf32 (disable them otherwise), restore the old flags on exit.

    Yields the dtype, so `with precision_context(p, dev) as dtype:` is all a caller needs.
    """
    dtype = resolve_dtype(precision, device)
    with _tf32(precision == "tf32"):
        yield dtype


@contextlib.contextmanager
def _tf32(enabled: bool) -> Iterator[None]:
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def tf32_ignored(tf32_out: torch.Tensor, call: Callable[[], torch.Tensor]) -> bool:
    """Whether `call`, which gave `tf32_out` with TF32 on, gives the bit-identical output with TF32
    off: then its kernels ignore the flag and the "tf32" result is an fp32 one.

    Any kernel that honours TF32 rounds its matmul inputs to a 10-bit mantissa, which changes
    the output of random inputs in practically every element, so a single identical output is
    proof enough. Compare forward outputs only: some backward kernels accumulate with atomics
    and differ from run to run whatever the flag.
    """
    with _tf32(False):
        fp32_out = call()
    same = (tf32_out == fp32_out) | (tf32_out.isnan() & fp32_out.isnan())
    return tf32_out.shape == fp32_out.shape and bool(same.all())
