"""sdpa: torch.nn.functional.scaled_dot_product_attention, optionally forcing one kernel.

`kernel=auto` lets torch choose; flash | efficient | math | cudnn forces that kernel through
`torch.nn.attention.sdpa_kernel`. A forced kernel that cannot run here raises
`selfattn.Unsupported` instead of silently falling back to another one.

Causal masks: SDPA's `is_causal` is top-left aligned, which differs from our bottom-right
contract whenever q_len != seq_len, so in that case the mask is passed explicitly as
`torch.nn.attention.bias.causal_lower_right`.
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from selfattn.errors import Unsupported

NAME = "sdpa"
OPTIONS: dict[str, Any] = {"kernel": "auto"}
KERNELS: dict[str, SDPBackend | None] = {
    "auto": None,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}


def available(device: torch.device | str) -> bool:
    return True  # at least the math kernel runs on every device


def resolve_options(options: Mapping[str, Any], device: torch.device | str, dtype: torch.dtype) -> dict[str, Any]:
    resolved = {**OPTIONS, **options}
    if resolved["kernel"] not in KERNELS:
        raise ValueError(f"kernel: expected one of {', '.join(KERNELS)}, got {resolved['kernel']!r}")
    return resolved


def kernel_label(options: Mapping[str, Any]) -> str:
    return str(options.get("kernel", OPTIONS["kernel"]))


def attention(
    q_BHMD: torch.Tensor,
    k_BHND: torch.Tensor,
    v_BHND: torch.Tensor,
    *,
    causal: bool,
    scale: float,
    kernel: str = "auto",
) -> torch.Tensor:
    q_len, seq_len = q_BHMD.shape[2], k_BHND.shape[2]
    mask: Any = None
    is_causal = False
    if causal and q_len == seq_len:
        is_causal = True  # top-left == bottom-right when square; lets torch use its causal fast path
    elif causal:
        # imported here: torch.nn.attention.bias pulls in torch._dynamo, seconds of import time
        from torch.nn.attention.bias import causal_lower_right

        mask = causal_lower_right(q_len, seq_len)
    if kernel == "auto":
        return _call(q_BHMD, k_BHND, v_BHND, mask, is_causal, scale)
    # Forced kernel: torch warns about why each kernel was refused, then raises RuntimeError.
    with warnings.catch_warnings(record=True) as caught, sdpa_kernel(KERNELS[kernel]):
        warnings.simplefilter("always")
        try:
            return _call(q_BHMD, k_BHND, v_BHND, mask, is_causal, scale)
        except RuntimeError as err:
            text = str(err)
            if "No viable backend" not in text and "No available kernel" not in text:
                raise
            reasons = "; ".join(" ".join(str(w.message).split()) for w in caught)[:300]
            raise Unsupported(
                f"sdpa kernel={kernel} cannot run on {q_BHMD.device.type} with {q_BHMD.dtype}, "
                f"shape {tuple(q_BHMD.shape)}{' causal' if causal else ''}"
                + (f" ({reasons})" if reasons else "")
            ) from None


def _call(q, k, v, mask, is_causal: bool, scale: float) -> torch.Tensor:
    if mask is not None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)
