"""FP8 attention's two products through `torch._scaled_mm` (backend option fp8_matmul=scaled_mm).

selfattn/fp8.py quantizes Q, K, V (x8 and an fp32 scale per tensor or per row); here the products
read the fp8 tensors themselves instead of their dequantized fp32 copies:

- QK^T: Q8 (m x D, row-major) times K8^T (D x n, column-major, as _scaled_mm requires), with Q's
  and K's scales: one scalar each for per-tensor (and raw, scale 1) quantization, or rowwise
  scales (m, 1) and (1, n) for fp8_scaling=block (each row carries its block's scale). fp32 out.
- P.V: P cast to fp8 as the dequant path casts it, fp8(P * p_scale), with scale 1/p_scale, times
  V8 with its scale. A per-tensor V is one product. Block-scaled V's scales vary along the
  contraction (keys), which no _scaled_mm scale can express (a rowwise scale_b is per output
  column, i.e. per feature of V): the contraction is split at V's scale blocks, each piece a
  per-tensor product with that block's scale, and the fp32 partial products are summed. That
  keeps the numbers the dequant path's (same P cast, same V scales, fp32 accumulation), at the
  price of seq_len / fp8_block products per head; FA3 instead keeps V per-tensor-scaled in its
  P.V, something this option does not change.

_scaled_mm is 2-D: both products loop over the flattened (batch x kv head) matrices X (GQA's query
heads of one K/V head are one taller matrix, as in the dequant path).

Which product may run so is decided up front, never by catching an error:
- device rules (`device_products`): on CUDA, cuBLASLt has no e5m2 x e5m2 kernel (both products'
  operands share the format, so e5m2 runs dequantized there), and rowwise scaling with an fp32
  output exists only through cuBLAS on capability 9.x with CUDA >= 12.9 (elsewhere CUTLASS's
  rowwise kernel writes bf16/fp16 only, which would round the scores: QK^T with block scaling
  then runs dequantized). torch's CPU _scaled_mm has neither limit.
- shape rules (`call_products`, on every device, so a CPU row says what a GPU would run): the
  contraction and output dims of the second operand multiples of 16, i.e. head_dim and every key
  count a product sees (seq_len, chunked's key blocks, V's scale blocks) multiples of 16.
use_fast_accum stays off: Hopper's fast accumulation keeps fewer bits still, its error growing with
the contraction (on an H200, relative RMS 7.5e-5 at 64 terms, 1.3e-3 at 4096).

A CUDA _scaled_mm is not the dequant path to the last bit even so: its fp32 output carries the FP8
tensor cores' accumulation, about 13 bits (H200, torch 2.11, CUDA 13.0: relative RMS 0.75-1.3e-4 from
the float64 product of the same fp8 values, per-tensor and rowwise alike, where an fp32 matmul of the
dequantized values is within 1e-7). Scores that close still round P to a neighbouring fp8 value here
and there, so an attention output through scaled_mm differs from the float64 emulation by about 3-6%
of FP8's own error (0.19-0.34% relative RMS), the dequant path by well under 0.5%.

torch's CPU _scaled_mm is a slow reference kernel (orders of magnitude slower than an fp32 product of
the same shape), so scaled_mm forced on a CPU checks the numbers, not the speed; auto never picks it there.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import torch

from selfattn import torch_private

# The torch dtypes of the two formats (selfattn/fp8.py re-exports them): here, below fp8.py, which
# imports this module for the products' rules, so that neither imports the other back.
DTYPES: dict[str, torch.dtype] = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
SCALED_MM = "scaled_mm"
DEQUANT = "dequant"
MULTIPLE = 16  # _scaled_mm's shape rule: mat1's columns and both of mat2's dims divisible by 16
ROWWISE_FP32_CUDA = (12, 9)  # cuBLAS's rowwise scaling (fp32 output) arrived in CUDA 12.9, for capability 9.x


def device_products(options: Mapping[str, Any], device: torch.device) -> tuple[str, str]:
    """(QK^T, P.V): how each product runs on `device` by the rules that need no shapes."""
    if options["fp8_matmul"] != SCALED_MM:
        return DEQUANT, DEQUANT
    if device.type != "cuda":  # torch's CPU _scaled_mm: every format pair, rowwise with fp32 output
        return SCALED_MM, SCALED_MM
    if options["fp8"] == "e5m2":  # "Multiplication of two Float8_e5m2 matrices is not supported"
        return DEQUANT, DEQUANT
    qk = SCALED_MM if options["fp8_scaling"] != "block" or rowwise_fp32(device) else DEQUANT
    return qk, SCALED_MM


def rowwise_fp32(device: torch.device) -> bool:
    """Whether rowwise-scaled _scaled_mm may write fp32 here: cuBLAS's path, capability 9.x and CUDA >= 12.9
    (torch.version.cuda, the toolkit torch was built with, stands for the cuBLAS it ships)."""
    major, _ = torch.cuda.get_device_capability(device)
    version = tuple(int(part) for part in (torch.version.cuda or "0.0").split(".")[:2])
    return major == 9 and version >= ROWWISE_FP32_CUDA


def call_products(options: Mapping[str, Any], head_dim: int, key_bounds: Iterable[int]) -> tuple[str, str]:
    """(QK^T, P.V) for a call: the device's choice (options["fp8_products"]), with a product whose
    shapes break _scaled_mm's rules sent back to dequant. key_bounds: where the key ranges the products
    see begin and end (naive: 0 and seq_len; chunked: its key blocks')."""
    qk, pv = options.get("fp8_products", (DEQUANT, DEQUANT))
    fits = head_dim % MULTIPLE == 0 and all(bound % MULTIPLE == 0 for bound in key_bounds)
    v_blocks_fit = options["fp8_scaling"] != "block" or options["fp8_block"] % MULTIPLE == 0
    return (qk if fits else DEQUANT), (pv if fits and v_blocks_fit else DEQUANT)


def products_label(products: tuple[str, str]) -> str:
    """'dequant', 'scaledmm', or per product where they differ: 'qkscaledmm-pvdequant'."""
    qk, pv = (way.replace("_", "") for way in products)
    return qk if qk == pv else f"qk{qk}-pv{pv}"


def ran_label(options: Mapping[str, Any], products: tuple[str, str]) -> str | None:
    """kernel_ran's FP8 part: None when the call runs what the label says, else 'dequant-shapes' or the like."""
    if products == tuple(options.get("fp8_products", (DEQUANT, DEQUANT))):
        return None
    return f"{products_label(products)}-shapes"


def scale_rows(scale: torch.Tensor, shape_XL1: tuple[int, int, int]) -> torch.Tensor:
    """A scale of fp8.scales (one per tensor, or per row of (B, H, L, D)) as (X, L, 1) rows, X = B*H."""
    if scale.numel() == 1:
        return scale.reshape(1, 1, 1).expand(shape_XL1)
    return scale.reshape(shape_XL1)


def qk(q8_XmD: torch.Tensor, sq_Xm1: torch.Tensor, k8_XnD: torch.Tensor, sk_Xn1: torch.Tensor,
       per_tensor: bool) -> torch.Tensor:
    """(Q8 * sq) (K8 * sk)^T in fp32, (X, m, n): one _scaled_mm per flattened head, with one scale per
    operand (per_tensor) or rowwise ones. The rows' scales may carry the softmax scale."""
    x, m, _ = q8_XmD.shape
    n = k8_XnD.shape[1]
    out_Xmn = torch.empty(x, m, n, dtype=torch.float32, device=q8_XmD.device)
    for i in range(x):
        if per_tensor:
            scale_a, scale_b = sq_Xm1[i, 0, 0], sk_Xn1[i, 0, 0]
        else:
            scale_a, scale_b = sq_Xm1[i].contiguous(), sk_Xn1[i].reshape(1, n).contiguous()
        out_Xmn[i] = torch_private.scaled_mm(q8_XmD[i], k8_XnD[i].t(), scale_a, scale_b, out_dtype=torch.float32)
    return out_Xmn


def pv(p_Xmn: torch.Tensor, options: Mapping[str, Any], v8T_XDn: torch.Tensor, sv_Xn1: torch.Tensor,
       per_tensor: bool, n0: int = 0) -> torch.Tensor:
    """fp8(P * p_scale) / p_scale times V8 * sv in fp32, (X, m, D). v8T: V8 transposed and contiguous
    per head (D x keys), so that each piece's V8 is the column-major operand _scaled_mm wants; n0: the
    first key's index, which places V's scale blocks (fp8_block rows each, counted from key 0)."""
    p8_Xmn = (p_Xmn * float(options["p_scale"])).to(DTYPES[options["fp8"]])
    inv_p = torch.tensor(1.0 / float(options["p_scale"]), dtype=torch.float32, device=p_Xmn.device)
    x, m, n = p_Xmn.shape
    pieces = [(0, n)] if per_tensor else _pieces(n0, n0 + n, int(options["fp8_block"]))
    out_XmD = torch.zeros(x, m, v8T_XDn.shape[1], dtype=torch.float32, device=p_Xmn.device)
    for i in range(x):
        for a, b in pieces:  # V's scale is one number inside a piece: a per-tensor product each, summed in fp32
            out_XmD[i] += torch_private.scaled_mm(p8_Xmn[i, :, a:b], v8T_XDn[i, :, a:b].t(), inv_p,
                                                  sv_Xn1[i, a, 0], out_dtype=torch.float32)
    return out_XmD


def _pieces(n0: int, n1: int, block: int) -> list[tuple[int, int]]:
    """[n0, n1) cut at the multiples of `block`, relative to n0."""
    cuts = [n0, *range((n0 // block + 1) * block, n1, block), n1]
    return [(a - n0, b - n0) for a, b in zip(cuts[:-1], cuts[1:])]
