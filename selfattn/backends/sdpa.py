"""sdpa: torch.nn.functional.scaled_dot_product_attention, optionally forcing one kernel.

`kernel=auto` lets torch choose; flash | efficient | math | cudnn forces that kernel through
`torch.nn.attention.sdpa_kernel`. A forced kernel that cannot run here raises
`selfattn.Unsupported` instead of silently falling back to another one.

Causal masks: SDPA's `is_causal` is top-left aligned, which differs from our bottom-right
contract whenever q_len != seq_len, so in that case the mask is passed explicitly as
`torch.nn.attention.bias.causal_lower_right`.

Variants (selfattn/variants.py): a window pair is a boolean mask, like a one-width window. ALiBi and the
sink are exact through SDPA's additive `attn_mask`: one float bias tensor in q's dtype holding ALiBi's
-slope_h * |p - j| (per query head, so it is (.., heads, q_len, seq_len)) with -inf where the mask hides a
key. The sink is one more key whose K row is zero and whose bias is the sink: its logit is scale * 0 +
sink = sink exactly, it joins every row's denominator, and its V row, zero too, adds no value. That costs
copies of K and V one row longer and a float bias SDPA's fused kernels read from memory; on CUDA flash
takes no `attn_mask`, so these points run efficient or math, which the row's `kernel` column names
(kernel_ran asks torch's dispatch with the same tensors). Soft-capping is unsupported: SDPA only adds a
bias to the scaled logits and cannot apply tanh to them inside its kernels.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from selfattn import torch_private
from selfattn.backends.contract import backend
from selfattn.backends.options.sdpa import KERNEL_NAMES, Options as Options
from selfattn.errors import Unsupported
from selfattn.fields import defaults
from selfattn.masks import Masks, no_empty_rows
from selfattn.point import CUDA_SOFTMAX_BACKWARD, FP32_BYTES, Point
from selfattn.score_mods import query_positions
from selfattn.variants import alibi_slopes

# Fused SDPA is mostly matmul: the time guard's optimistic share of the matmul peak.
EFFICIENCY = 0.9
# the option's names (selfattn/backends/options/sdpa.py), in order, to torch's kernels
KERNELS: dict[str, SDPBackend | None] = dict(zip(KERNEL_NAMES, (
    None,
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.MATH,
    SDPBackend.CUDNN_ATTENTION,
), strict=True))
FORCED: dict[str, SDPBackend] = {name: kind for name, kind in KERNELS.items() if kind is not None}
# Per-thread scratch of torch's CPU flash kernel: a q_split x kv_split fp32 block and row stats.
CPU_FLASH_Q_SPLIT = 256
CPU_FLASH_KV_SPLIT = 512
BIAS_ALIGN = 8  # elements: the memory-efficient kernel's alignment of a bias's strides (mem_eff_alignment)


def resolve_options(options: Mapping[str, Any], device: torch.device | str, dtype: torch.dtype) -> dict[str, Any]:
    return {**defaults(Options), **options}


def kernel_label(options: Mapping[str, Any]) -> str:
    return str(options["kernel"]) + ("-boolmask" if options.get("bool_mask") else "")


def attention(
    q_BHMD: torch.Tensor,
    k_BKND: torch.Tensor,
    v_BKND: torch.Tensor,
    *,
    masks: Masks,
    scale: float,
    kernel: str = "auto",
    bool_mask: bool = False,
) -> torch.Tensor:
    if masks.mask_mod is not None:  # a mask function (selfattn/mods/): its boolean mask as attn_mask
        return _with_mask_function(q_BHMD, k_BKND, v_BKND, masks, scale, kernel)
    seq_len = k_BKND.shape[2]  # the keys the masks speak of (a sink's key comes after them)
    k_BKND, v_BKND, mask, is_causal, sees = _arguments(q_BHMD, k_BKND, v_BKND, masks, bool_mask)
    gqa = k_BKND.shape[1] != q_BHMD.shape[1]
    if kernel == "auto":
        out = _call(q_BHMD, k_BKND, v_BKND, mask, is_causal, scale, gqa)
    else:
        out = _forced(kernel, q_BHMD, k_BKND, v_BKND, mask, is_causal, scale, gqa, masks)
    # whether some row sees no key: decided once per masks (Masks.decision), not read from `sees` on the host
    if sees is not None and masks.empty_rows(q_BHMD.shape[2], seq_len):
        out = out * sees[:, None]  # rows that see no key: zeros (their opened mask row was a stand-in)
    return out


def _with_mask_function(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, masks: Masks, scale: float,
                        kernel: str) -> torch.Tensor:
    """SDPA with the mask function's boolean mask (B or 1, H or 1, q_len, seq_len), evaluated once per masks by
    the warm-up call (selfattn/mods/dense.py); rows that see no key opened there and zeroed here."""
    from selfattn.errors import Unsupported
    from selfattn.mods.dense import dense_keep

    if masks.alibi or masks.sink is not None:
        raise Unsupported("sdpa with a mask function: ALiBi and the sink are a float bias, not built beside it")
    keep_bhMN, sees_bhM1 = dense_keep(masks, q_BHMD.shape[0], q_BHMD.shape[1], q_BHMD.shape[2], k_BKND.shape[2],
                                      q_BHMD.device)
    gqa = k_BKND.shape[1] != q_BHMD.shape[1]
    if kernel == "auto":
        out = _call(q_BHMD, k_BKND, v_BKND, keep_bhMN, False, scale, gqa)
    else:
        out = _forced(kernel, q_BHMD, k_BKND, v_BKND, keep_bhMN, False, scale, gqa, masks)
    return out if sees_bhM1 is None else out * sees_bhM1


def _arguments(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, masks: Masks,
               bool_mask: bool = False) -> tuple[torch.Tensor, torch.Tensor, Any, bool, torch.Tensor | None]:
    """(k, v, attn_mask, is_causal, sees) of the SDPA call: the masks alone as _mask_arguments makes them;
    with ALiBi or a sink, one float bias (_score_bias), and K and V one zero row longer for the sink."""
    if masks.alibi or masks.sink is not None:
        bias_bHMN, sees = _score_bias(q_BHMD, k_BKND.shape[2], masks)
        if masks.sink is not None:  # the sink's key: a zero K row (logit 0 + bias = sink), a zero V row (no value)
            k_BKND, v_BKND = F.pad(k_BKND, (0, 0, 0, 1)), F.pad(v_BKND, (0, 0, 0, 1))
        return k_BKND, v_BKND, bias_bHMN, False, sees
    mask, is_causal, sees = _mask_arguments(q_BHMD, k_BKND, masks, bool_mask)
    return k_BKND, v_BKND, mask, is_causal, sees


def _score_bias(q_BHMD: torch.Tensor, seq_len: int, masks: Masks) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(bias, sees): the additive attn_mask in q's dtype, (batch or 1, heads or 1, q_len, seq_len + 1 if a
    sink): ALiBi's -slope_h * |p - j| (heads: one per query head), -inf where a key is hidden (rows that see
    no key opened, `sees` saying which: no_empty_rows), and the sink's logit in the last column.

    Written into the one bias tensor head by head from one (q_len, seq_len) distance matrix, so building it
    costs the bias and that matrix, not a (heads, q_len, seq_len) product and int64 distances besides."""
    heads, q_len, device = q_BHMD.shape[1], q_BHMD.shape[2], q_BHMD.device
    keep_bMN = sees = None
    if masks.causal or not masks.only_causal:
        keep_bMN, sees = no_empty_rows(masks.keep(q_len, seq_len, device=device))
    sink_columns = 0 if masks.sink is None else 1
    columns = seq_len + sink_columns
    # rows padded to a multiple of BIAS_ALIGN columns: the efficient kernel copies a bias whose row stride is
    # not (ATen's preprocess_mask pads it), so the sink's odd column would cost a second bias on CUDA
    aligned = -(-columns // BIAS_ALIGN) * BIAS_ALIGN
    bias_bHMN = torch.zeros(1 if keep_bMN is None else keep_bMN.shape[0], heads if masks.alibi else 1, q_len,
                            aligned, dtype=q_BHMD.dtype, device=device)[..., :columns]
    keys_bHMN = bias_bHMN[..., :seq_len]
    if masks.alibi:  # |p - j| in fp32 at least: fp16 and bf16 cannot hold every distance exactly
        exact = torch.promote_types(q_BHMD.dtype, torch.float32)
        p = query_positions(q_len, seq_len, device).to(exact)
        distance_MN = (p[:, None] - torch.arange(seq_len, device=device, dtype=exact)[None, :]).abs_()
        for h, slope in enumerate(alibi_slopes(heads)):
            head_bMN = keys_bHMN[:, h]
            torch.mul(distance_MN.expand_as(head_bMN), -slope, out=head_bMN)  # no temporary
        del distance_MN
    if keep_bMN is not None:
        keys_bHMN.masked_fill_(~keep_bMN[:, None], float("-inf"))
    if masks.sink is not None:
        bias_bHMN[..., seq_len] = masks.sink
    return bias_bHMN, sees


def _mask_arguments(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, masks: Masks,
                    bool_mask: bool = False) -> tuple[Any, bool, torch.Tensor | None]:
    """(attn_mask, is_causal, sees): `is_causal` when causal is the only mask (torch's fast path)
    unless `bool_mask`, otherwise a boolean mask (True = attend) with rows that see no key opened
    (see no_empty_rows)."""
    q_len, seq_len = q_BHMD.shape[2], k_BKND.shape[2]
    if masks.only_causal and not (bool_mask and masks.causal):
        if not masks.causal:
            return None, False, None
        if q_len == seq_len:
            return None, True, None  # top-left == bottom-right when square
        # imported here: torch.nn.attention.bias pulls in torch._dynamo, seconds of import time
        from torch.nn.attention.bias import causal_lower_right

        return causal_lower_right(q_len, seq_len), False, None
    keep_bMN, sees = no_empty_rows(masks.keep(q_len, seq_len, device=q_BHMD.device))
    return keep_bMN[:, None], False, sees


_CHOICES: dict[int, str] = {int(backend.value): name for name, backend in KERNELS.items() if backend is not None}


def kernel_ran(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, *, masks: Masks, scale: float,
               kernel: str = "auto", bool_mask: bool = False) -> str:
    """The kernel this call runs: a forced one is itself; with `auto`, torch's own choice for these
    inputs (torch._fused_sdp_choice, the function SDPA dispatches on), so two GPUs' "auto" rows say
    whether they compared the same kernel. A lower-right causal mask (q_len != seq_len) goes through
    torch's CausalBias, whose dispatch is not SDPA's: `_causal_bias_kernel` mirrors it. Both are torch's
    internals (selfattn/torch_private.py): outside the releases they were written for, or with a name gone,
    the label is "unknown", never a kernel that may not be the one that ran."""
    if kernel != "auto":
        return kernel
    if masks.mask_mod is not None:  # a mask function: its boolean mask (selfattn/mods/dense.py)
        from selfattn.mods.dense import dense_keep

        mask, _ = dense_keep(masks, q_BHMD.shape[0], q_BHMD.shape[1], q_BHMD.shape[2], k_BKND.shape[2], q_BHMD.device)
        try:
            return _fused_choice(q_BHMD, k_BKND, v_BKND, mask, False, scale, k_BKND.shape[1] != q_BHMD.shape[1])
        except (AttributeError, RuntimeError, TypeError, ValueError):
            return "unknown"
    k_BKND, v_BKND, mask, is_causal, _ = _arguments(q_BHMD, k_BKND, v_BKND, masks, bool_mask)
    gqa = k_BKND.shape[1] != q_BHMD.shape[1]
    try:
        if _is_causal_bias(mask):
            return _causal_bias_kernel(q_BHMD, k_BKND, v_BKND, mask, scale, gqa)
        return _fused_choice(q_BHMD, k_BKND, v_BKND, mask, is_causal, scale, gqa)
    except (AttributeError, RuntimeError, TypeError, ValueError):  # a torch that changed them, or inputs it refuses
        return "unknown"


def _is_causal_bias(mask: Any) -> bool:
    """Whether `mask` is torch's CausalBias (a Tensor subclass, so isinstance(mask, Tensor) holds too)."""
    bias = sys.modules.get("torch.nn.attention.bias")  # imported whenever one was made
    return bias is not None and isinstance(mask, bias.CausalBias)


def _fused_choice(q, k, v, mask, is_causal: bool, scale: float, gqa: bool) -> str:
    extra: dict[str, Any] = {"enable_gqa": True} if gqa else {}
    choice = torch_private.fused_sdp_choice(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=is_causal, scale=scale,
                                            **extra)
    return "unknown" if choice is None else _CHOICES.get(choice, "unknown")


def _causal_bias_kernel(q, k, v, bias, scale: float, gqa: bool) -> str:
    """The kernel torch.nn.attention.bias.CausalBias's dispatch runs for a lower-right, non-square
    causal bias, decided as it decides (torch 2.4 - 2.13: selfattn/torch_private.causal_bias_rules): flash's
    kernel called directly when `can_use_flash_attention` accepts the inputs asked WITHOUT a mask and with
    is_causal=False (so flash's refusal of non-square is_causal never applies: flash's own causal is
    lower-right), else efficient's kernel with a lower-right custom mask when `can_use_efficient_attention`
    accepts them, else SDPA with the bias materialized as a boolean mask, which SDPA dispatches as any mask.
    The decision functions are looked up in torch.nn.attention.bias, the names its dispatch calls (torch.backends.
    cuda's public checks, imported there); a forced kernel (sdpa_kernel) disables the others inside those checks,
    as in the dispatch."""
    from torch.nn.attention import bias as causal_bias

    if not torch_private.causal_bias_rules(causal_bias):
        return "unknown"
    params = causal_bias.SDPAParams(q, k, v, None, 0.0, False, gqa)
    if causal_bias.can_use_flash_attention(params):
        return "flash"
    if causal_bias.can_use_efficient_attention(params):
        return "efficient"
    q_len, seq_len = q.shape[-2], k.shape[-2]  # the bias as a boolean lower-right mask, as it materializes
    keep_MN = torch.ones(q_len, seq_len, dtype=torch.bool, device=q.device).tril(seq_len - q_len)
    return _fused_choice(q, k, v, keep_MN, False, scale, gqa)


def _forced(kernel: str, q, k, v, mask, is_causal: bool, scale: float, gqa: bool, masks: Masks) -> torch.Tensor:
    # Forced kernel: torch warns about why each kernel was refused, then raises RuntimeError.
    with warnings.catch_warnings(record=True) as caught, sdpa_kernel(FORCED[kernel]):
        warnings.simplefilter("always")
        try:
            return _call(q, k, v, mask, is_causal, scale, gqa)
        except RuntimeError as err:
            text = str(err)
            if "No viable backend" not in text and "No available kernel" not in text:
                raise
            reasons = "; ".join(" ".join(str(w.message).split()) for w in caught)[:300]
            what = "causal" if masks.causal and masks.only_causal else "" if masks.only_causal else "masked"
            biased = [name for name in ("alibi", "sink") if name in masks.variants]
            what += f"{' ' if what else ''}with a float bias ({', '.join(biased)})" if biased else ""
            raise Unsupported(
                f"sdpa kernel={kernel} cannot run on {q.device.type} with {q.dtype}, "
                f"shape {tuple(q.shape)}{' ' + what if what else ''}{' gqa' if gqa else ''}"
                + (f" ({reasons})" if reasons else "")
            ) from None


def _call(q, k, v, mask, is_causal: bool, scale: float, gqa: bool) -> torch.Tensor:
    extra: dict[str, Any] = {"enable_gqa": True} if gqa else {}
    if mask is not None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, **extra)
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale, **extra)


def auto_runs_math(point: Point, device: str) -> bool:
    """Whether `kernel=auto` falls to the math kernel on this device for every mask: on CUDA in fp64
    (no fused kernel takes it), and with GQA (kv_heads < heads) in fp32/tf32: flash and cuDNN take
    only fp16/bf16, and efficient, which takes fp32, has no GQA in this torch (SDPA's docstring:
    "GQA ... works only for Flash_attention and math kernel on CUDA"; a lower-right causal bias
    asks the same checks). The rows' `kernel` then reads "auto:math" (kernel_ran, torch's own
    choice), and tests/gpu checks that this rule and torch agree."""
    if device != "cuda":
        return False  # CPU: flash for every dtype and for GQA
    gqa = point.kv_heads_resolved != point.heads
    # ALiBi or a sink is a float attn_mask, which flash does not take: efficient runs it, but not with GQA
    biased = point.alibi or point.sink is not None
    return point.precision == "fp64" or (gqa and (biased or point.precision in ("fp32", "tf32")))


def _bias_bytes(point: Point) -> tuple[int, int, int]:
    """(bias, building, sink copies) for a point with ALiBi or a sink (_score_bias): the float bias in the
    dtype, what building it holds beside the bias at its peak, and K and V one (zero) row longer for the
    sink. Measured on a CPU (torch 2.13, the profiler's allocation events, fp32/bf16, B1-2 H2, n 1024):
    building ALiBi holds the fp32 |p - j| matrix and, below fp32, one fp32 temporary for each head's
    product cast into the bias; a mask holds the opened boolean keep mask and its negation."""
    s, c = point.element_bytes, max(point.element_bytes, FP32_BYTES)
    q_len, seq_len = point.q_len_resolved, point.seq_len
    geometry = point.causal or point.window is not None or point.masks_per_sequence
    masks_per = point.batch if point.masks_per_sequence else 1
    heads = point.heads if point.alibi else 1
    sink = 0 if point.sink is None else 1
    bias = masks_per * heads * q_len * (-(-(seq_len + sink) // BIAS_ALIGN) * BIAS_ALIGN) * s  # rows aligned
    alibi = q_len * seq_len * c + (masks_per * q_len * seq_len * c if s < c else 0) if point.alibi else 0
    keep = masks_per * q_len * seq_len if geometry else 0
    building = max(alibi + keep, 2 * keep)
    copies = 2 * point.batch * point.kv_heads_resolved * (seq_len + 1) * point.head_dim * s if sink else 0
    return bias, building, copies


def predict_mem_bytes(point: Point, options: Mapping[str, Any], device: str) -> int:
    """Fused kernels keep O(n) per head; the math kernel materializes like naive."""
    if point.functions:  # a mask or score function (selfattn/mods/memory.py)
        from selfattn.mods.memory import sdpa_call_bytes

        return sdpa_call_bytes(point)
    kernel = options.get("kernel", "auto")
    math_kernel = kernel == "math" or (kernel == "auto" and auto_runs_math(point, device))
    if point.alibi or point.sink is not None:  # one float bias instead of any mask or flag
        return _biased_mem_bytes(point, math_kernel, device)
    mask = _mask_bytes(point, options, native_causal=device == "cuda" and not math_kernel)
    return _math_mem_bytes(point, mask, device) if math_kernel else _fused_mem_bytes(point, mask, device)


def _mask_bytes(point: Point, options: Mapping[str, Any], native_causal: bool) -> int:
    """The mask the kernels are handed, in bytes."""
    s, q_len, seq_len = point.element_bytes, point.q_len_resolved, point.seq_len
    if point.window is not None or point.masks_per_sequence or (point.causal and options.get("bool_mask")):
        # any other mask is a boolean attn_mask (keep, and keep with empty rows opened), which the
        # kernels turn into an additive mask in the dtype: per sequence when padding or documents differ
        masks_per = point.batch if point.masks_per_sequence else 1
        return masks_per * q_len * seq_len * (2 + s)
    # A non-square causal mask goes to SDPA as torch's lower-right CausalBias: fused CUDA kernels
    # take it natively; elsewhere torch materializes it (bool, then an additive mask in the dtype).
    return q_len * seq_len * (1 + s) if point.causal and q_len != seq_len and not native_causal else 0


def _math_mem_bytes(point: Point, mask: int, device: str) -> int:
    """The math kernel's peak: it materializes the scores."""
        # ATen's math kernel computes in fp32 at least (c bytes): fp16/bf16 inputs are upcast. Measured
        # on a CPU (the same ATen code as CUDA's; torch 2.13, the profiler's allocation events, fp64/
        # fp32/bf16/fp16, B1-2 H2-4, q_len 256-2048 x seq_len 512-2048, fits exact to the byte):
        #   fwd: 2c + 1 bytes per score (scores, weights, the safe softmax's bool; 9 B, not 2 s = 4 B,
        #        in fp16/bf16), the output, and for fp16/bf16 fp32 copies of q, k, v and of the output;
        #        a square causal mask is one c-byte (q_len x seq_len) matrix (is_causal), a non-square
        #        one is `mask` above (1 + s bytes per element);
        #   fwd_bwd: 3c bytes per score (12 B in fp32/fp16/bf16), out + grads, and in fp16/bf16 one
        #        more grads-sized buffer; the causal mask is freed before the peak.
        # With GQA (measured the same way, kv_heads 2 and 1 of 4): the math kernel repeats the (upcast)
        # K and V to every query head (repeat_interleave, 2 c bytes per element at H heads), and
        # backward makes dK and dV at every head before summing them per K/V head.
    s, b, h, d = point.element_bytes, point.batch, point.heads, point.head_dim
    q_len, seq_len, kv = point.q_len_resolved, point.seq_len, point.kv_heads_resolved
    scores, out, grads = point.score_elements, point.out_bytes, point.grad_bytes
    c = max(s, FP32_BYTES)
    if point.mode == "fwd":
        upcast = b * (2 * h * q_len + 2 * kv * seq_len) * d * c if s < c else out
        repeat = 2 * b * h * seq_len * d * c if kv != h else 0
        square_causal = point.causal and q_len == seq_len and not mask
        return scores * (2 * c + 1) + upcast + repeat + (q_len * seq_len * c if square_causal else mask)
    grads_all_heads = grads + 2 * b * (h - kv) * seq_len * d * s
    # on CUDA the softmax's backward holds one more score matrix (selfattn.point.CUDA_SOFTMAX_BACKWARD)
    per = 3 + (CUDA_SOFTMAX_BACKWARD if device == "cuda" else 0)
    return scores * per * c + out + grads_all_heads * (2 if s < c else 1) + mask


def _fused_mem_bytes(point: Point, mask: int, device: str) -> int:
    """The fused kernels' peak: O(n) per head, plus a CPU flash kernel's per-thread scratch."""
    s, b, h, d = point.element_bytes, point.batch, point.heads, point.head_dim
    q_len, seq_len, out = point.q_len_resolved, point.seq_len, point.out_bytes
    lse = b * h * q_len * FP32_BYTES
    if device == "cuda":
        scratch = 0  # flash/efficient keep their tiles in shared memory
    else:
        scratch = torch.get_num_threads() * (CPU_FLASH_Q_SPLIT * (CPU_FLASH_KV_SPLIT + d + 2)) * FP32_BYTES
    if point.mode == "fwd":
        return out + lse + scratch + mask
    # backward: (B, L, H, D) transposed copies of q, k, v, out, grad_out and fp32 accumulators
    copies = b * h * (2 * q_len + 3 * seq_len) * d * s
    return out + lse + point.grad_bytes + copies + 2 * scratch + mask


def _biased_mem_bytes(point: Point, math_kernel: bool, device: str) -> int:
    """A point with ALiBi or a sink: the bias, alive through the call, plus its building or the call's own
    bytes (the plain call's model) with the sink's K and V copies beside them, whichever is larger. A fused
    kernel's backward reads the bias again (it recomputes the scores), so fwd_bwd keeps it to the end; the
    math kernel's saves the scores instead, so its backward peak has the copies but not the bias
    (measured as _bias_bytes says)."""
    bias, building, copies = _bias_bytes(point)
    # the call without the bias's contents: no mask, flag or transform (the bias stands for all of them)
    plain = dataclasses.replace(point, alibi=False, sink=None, causal=False, window=None, pad_frac=0.0,
                                documents=None)
    options = {"kernel": "math" if math_kernel else "flash"}
    if not math_kernel:
        return bias + max(building, copies + predict_mem_bytes(plain, options, device))
    plain_forward = dataclasses.replace(plain, mode="fwd")
    forward = bias + max(building, copies + predict_mem_bytes(plain_forward, options, device))
    if point.mode == "fwd":
        return forward
    return max(forward, copies + predict_mem_bytes(plain, options, device))


# Why it lacks what it does not declare: said in the point's `unsupported` row (capability.why_not).
GAPS = {"softcap": "torch's scaled_dot_product_attention adds a bias to the scaled logits but cannot apply tanh to them "
                   "inside its kernels (naive computes it)",
        "score_mod": "torch's scaled_dot_product_attention takes a mask or an additive bias, not a function of the "
                     "scores (flex, naive and chunked run score_mod)",
        "fp8": "torch's scaled_dot_product_attention has no FP8 kernel (it takes fp16, bf16, fp32, fp64); naive and "
               "chunked quantize Q, K, V and P themselves"}
backend(attention, takes_masks=True, options=Options, efficiency=EFFICIENCY,
        variants=("asymmetric_window", "alibi", "sink"), gaps=GAPS,  # selfattn/variants.py; softcap is a gap
        masks=("causal", "window", "key_lengths", "document_ids", "mask_mod"),  # a mask function: a boolean attn_mask
        mem_model=predict_mem_bytes, kernel_label=kernel_label, resolve_options=resolve_options, kernel_ran=kernel_ran)
