"""naive: the chapter's steps literally, materializing the (q_len x seq_len) matrix per head.

scores = Q K^T, multiply by the scale, add the -inf causal mask, softmax, A V, all in the
input dtype (so fp16 logits can overflow exactly as the chapter warns). The mask is made once per
point, outside the timed call (`additive_mask`: an additive -inf mask per masks, shape and dtype,
kept as a model keeps its causal mask in a buffer), and step 3 adds it: one operation, so a causal
call costs one pass over the scores more than an unmasked one, not four (build, fill, add). `upcast_softmax=True`
runs the softmax of fp16/bf16 scores in float32 (a no-op for fp32/fp64), the usual fix, so
an ablation can show both. (torch's CPU softmax already accumulates bf16/fp16 in float32
internally, so on a CPU the two differ only by the final rounding.)

`scale_at` decides where the scale goes, which decides fp16 overflow: `logits` is the chapter's
order (Q K^T, then multiply), so the product can pass 65504 before the scale shrinks it;
`query` multiplies Q first, as the fused kernels do, so the product itself is already scaled.

precision=fp8_*: Q, K, V quantized (and dequantized) before step 1 and P cast to fp8 before step 5,
in fp32 otherwise (selfattn/fp8.py holds all of it; the fp8 options are its Fp8Options). With
fp8_matmul=scaled_mm, steps 1 and 5 multiply the fp8 tensors through torch._scaled_mm where its rules
allow (selfattn/fp8_mm.py; `_Fp8Products` below); kernel_ran says when the shapes sent a product back.

Every variant of selfattn/variants.py, on the materialized scores (selfattn/score_mods.py's formulas): the
soft-cap and the ALiBi bias after step 2, a window pair in step 3's mask, the sink's logit in step 4's
softmax. Each costs what it materializes (predict_mem_bytes).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Mapping, NamedTuple

import torch

from selfattn import fp8 as fp8_path
from selfattn.backends.contract import backend
from selfattn.backends.options.naive import Options as Options
from selfattn import fp8_mm, torch_private
from selfattn.compile import compiled
from selfattn.fields import defaults
from selfattn.fp8_formats import fp8_format
from selfattn.point import CUDA_SOFTMAX_BACKWARD, FP32_BYTES, Point
from selfattn.masks import Masks, no_empty_rows
from selfattn.score_mods import alibi_bias, softmax_with_sink

# Mostly a matmul, plus memory-bound passes over the score matrix (scale, mask, softmax): the
# time guard's optimistic share of the matmul peak (see selfattn/measure/predict.py).
EFFICIENCY = 0.6


class How(NamedTuple):
    """How `_steps` runs a call beyond the chapter's plain steps: its options, the score transforms
    (selfattn/variants.py) and, for FP8, P's cast and the fp8 products. Plain values only, so a compiled
    `_steps` guards on them rather than compiling again for every call."""

    upcast_softmax: bool = False
    scale_at: str = "logits"
    softcap: float | None = None
    alibi: bool = False
    sink: float | None = None
    p_cast: Callable[[torch.Tensor], torch.Tensor] | None = None  # FP8: what P becomes before A V
    fp8_products: _Fp8Products | None = None  # FP8 with scaled_mm: steps 1 and 5 on the fp8 tensors


def attention(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, *, masks: Masks, scale: float,
              upcast_softmax: bool = False, scale_at: str = "logits", compile: bool = False,
              **fp8_options: Any) -> torch.Tensor:
    """softmax(scale * Q K^T + mask) V by the chapter's steps (`_steps`), with the mask and variants of `masks`;
    an FP8 precision quantizes first (`_fp8_attention`)."""
    if masks.functions:  # a mask or score function (selfattn/mods/): materialized with its dense mask
        return _with_functions(q_BHMD, k_BKND, v_BKND, masks, scale, upcast_softmax, scale_at, compile, fp8_options)
    how = How(upcast_softmax, scale_at, softcap=masks.softcap, alibi=masks.alibi, sink=masks.sink)
    if fp8_path.active(fp8_options):
        return _fp8_attention(q_BHMD, k_BKND, v_BKND, masks, scale, how, fp8_options)
    mask_bMN, sees_bM1 = additive_mask(masks, q_BHMD.shape[2], k_BKND.shape[2], q_BHMD.dtype, q_BHMD.device)
    return (compiled(_steps) if compile else _steps)(q_BHMD, k_BKND, v_BKND, mask_bMN, sees_bM1, scale, how)


def _with_functions(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, masks: Masks, scale: float,
                    upcast_softmax: bool, scale_at: str, compile: bool, fp8_options: Mapping[str, Any]) -> torch.Tensor:
    """The steps with a mask or score function: selfattn/mods/dense.py (the same five steps, the mask from the
    function, built once per masks by the warm-up call)."""
    from selfattn.errors import Unsupported
    from selfattn.mods import dense

    for name, given in (("an fp8 precision", fp8_path.active(fp8_options)), ("scale_at=query", scale_at != "logits"),
                        ("compile=true", compile)):
        if given:
            raise Unsupported(f"naive with a mask or score function: {name} is not built for it")
    return dense.attention(q_BHMD, k_BKND, v_BKND, masks=masks, scale=scale, upcast_softmax=upcast_softmax)


def _steps(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, mask_bMN: torch.Tensor | None,
           sees_bM1: torch.Tensor | None, scale: float, how: How = How()) -> torch.Tensor:
    """The chapter's five steps, materializing the (q_len x seq_len) scores of every head; mask_bMN (batch or 1,
    q_len, seq_len): 0 where query i sees key j, -inf where not (None: no mask), made once per point
    (`additive_mask`); sees_bM1: which rows see a key (None: all do). Every tensor stays alive until the output
    is made, as the memory model (predict_mem_bytes) counts them."""
    b, h, q_len, d = q_BHMD.shape
    kv_heads, seq_len = k_BKND.shape[1], k_BKND.shape[2]
    # GQA without copying K/V: the query heads that share a K/V head become one taller matrix of queries
    # (head h = kv_head * group + g), so each product still reads K and V once.
    q_BKRD = q_BHMD.reshape(b, kv_heads, h // kv_heads * q_len, d)
    scores_BKRN = _scores(q_BKRD, k_BKND, scale, how)  # steps 1 and 2: Q K^T, scaled
    if how.softcap is not None:  # the cap bounds every logit: an overflowed inf becomes the cap
        scores_BKRN = torch.tanh(scores_BKRN / how.softcap) * how.softcap
    if how.alibi:  # -slope_h * |p - j|, its heads in the rows' order; alive to the softmax
        bias_KRN = alibi_bias(h, q_len, seq_len, device=q_BHMD.device, dtype=scores_BKRN.dtype).view(
            kv_heads, -1, seq_len)
        scores_BKRN = scores_BKRN + bias_KRN
    if mask_bMN is not None:  # step 3: add -inf where the key is hidden (one add; in place, autograd would copy)
        scores_BKRN = (scores_BKRN.view(b, kv_heads, -1, q_len, seq_len) + mask_bMN[:, None, None]).view(
            b, kv_heads, -1, seq_len)
    if how.upcast_softmax and scores_BKRN.dtype in (torch.float16, torch.bfloat16):  # step 4: softmax over keys
        weights_BKRN = softmax_with_sink(scores_BKRN.float(), how.sink).to(q_BHMD.dtype)
    else:
        weights_BKRN = softmax_with_sink(scores_BKRN, how.sink)
    out_BHMD = _weighted_values(weights_BKRN, v_BKND, how).view(b, h, q_len, d)  # step 5: A V
    if sees_bM1 is not None:
        out_BHMD = out_BHMD * sees_bM1[:, None]  # rows that see no key: zeros, not an average of all keys
    return out_BHMD


def _scores(q_BKRD: torch.Tensor, k_BKND: torch.Tensor, scale: float, how: How) -> torch.Tensor:
    """Steps 1 and 2: Q K^T, then the scale (the chapter's order), or Q scaled first (scale_at=query, as fused
    kernels do); FP8 with scaled_mm multiplies the fp8 tensors instead."""
    if how.fp8_products is not None:
        query_scale = scale if how.scale_at == "query" else 1.0
        scores_BKRN = how.fp8_products.scores(q_BKRD, k_BKND, query_scale)
        return scores_BKRN if how.scale_at == "query" else scores_BKRN * scale
    if how.scale_at == "query":
        return (q_BKRD * scale) @ k_BKND.transpose(-1, -2)
    scores_BKRN = q_BKRD @ k_BKND.transpose(-1, -2)  # step 1: Q K^T, (q_len x seq_len) per head
    return scores_BKRN * scale  # step 2: scale


def _weighted_values(weights_BKRN: torch.Tensor, v_BKND: torch.Tensor, how: How) -> torch.Tensor:
    """Step 5, A V; FP8 casts A first (and with scaled_mm multiplies the fp8 tensors)."""
    if how.fp8_products is not None:
        return how.fp8_products.out(weights_BKRN, how.p_cast, v_BKND)
    if how.p_cast is not None:
        weights_BKRN = how.p_cast(weights_BKRN)
    return weights_BKRN @ v_BKND


# The masks made (additive_mask), the latest MASKS_KEPT of them, as a model keeps its causal mask in a buffer: keyed
# on the flags, the shapes, and the padding and document tensors' identities and version counters (an entry holds
# those tensors, so their ids cannot be reused while it lives), so repeated calls with the same arguments share one,
# and a sweep's points do not pile them up.
_KEPT_MASKS: OrderedDict[tuple, tuple[tuple, tuple[torch.Tensor | None, torch.Tensor | None]]] = OrderedDict()
MASKS_KEPT = 2
_kept_masks_lock = threading.Lock()


def additive_mask(masks: Masks, q_len: int, seq_len: int, dtype: torch.dtype,
                  device: torch.device | str) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(mask_bMN, sees_bM1) of step 3, made once per masks, shape, dtype and device and then reused, so that a
    timed call neither builds a (q_len x seq_len) mask nor reads the masks' values on the host: mask_bMN is
    (batch or 1, q_len, seq_len) in `dtype`, 0 where query i sees key j and -inf where not; a row that sees no
    key is opened to every key instead (a row of -inf would be 0/0) and sees_bM1 (batch or 1, q_len, 1) zeroes
    its output. (None, None) without a mask."""
    if not masks.causal and masks.only_causal:
        return None, None
    device = torch.device(device)

    def build(_decided_on: torch.device | str) -> tuple[torch.Tensor, torch.Tensor | None]:
        keep_bMN = masks.keep(q_len, seq_len, device=device)
        sees_bM1 = None
        if masks.empty_rows(q_len, seq_len):  # a row of -inf would be 0/0: open it, and zero its output
            keep_bMN, sees_bM1 = no_empty_rows(keep_bMN)
            sees_bM1 = sees_bM1.to(dtype)
        mask_bMN = torch.zeros(keep_bMN.shape, dtype=dtype, device=device).masked_fill_(~keep_bMN, float("-inf"))
        return mask_bMN, sees_bM1

    key = ("naive_mask", q_len, seq_len, dtype, str(device))
    tensors = tuple(t for t in (masks.key_lengths, masks.document_ids) if t is not None)
    versions = tuple(torch_private.tensor_version(t) for t in tensors)
    if None in versions:  # no version counter to notice an in-place change: kept on these Masks only
        return masks.decision(key, build)
    kept_key = (masks.causal, masks.window, *(id(t) for t in tensors), *versions, *key)
    with _kept_masks_lock:
        if kept_key in _KEPT_MASKS:
            _KEPT_MASKS.move_to_end(kept_key)
            return _KEPT_MASKS[kept_key][1]
    built = build(device)
    with _kept_masks_lock:
        _KEPT_MASKS[kept_key] = (tensors, built)
        while len(_KEPT_MASKS) > MASKS_KEPT:
            _KEPT_MASKS.popitem(last=False)
    return built


def prepare(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, *, masks: Masks, scale: float,
            upcast_softmax: bool = False, scale_at: str = "logits", compile: bool = False,
            **fp8_options: Any) -> dict[str, float]:
    """Make the point's mask (`additive_mask`) before the timed calls (no row column: a mask is quick). A mask
    or score function's path makes its own, once per masks (selfattn/mods/dense.py)."""
    if masks.functions:
        return {}
    dtype = torch.float32 if fp8_path.active(fp8_options) else q_BHMD.dtype  # FP8 runs its steps in fp32
    additive_mask(masks, q_BHMD.shape[2], k_BKND.shape[2], dtype, q_BHMD.device)
    return {}


def _fp8_attention(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, masks: Masks, scale: float,
                   how: How, options: Mapping[str, Any]) -> torch.Tensor:
    """FP8 (selfattn/fp8.py): Q, K, V quantized and dequantized, the steps in fp32 with P cast to fp8 before A V
    (and with scaled_mm, steps 1 and 5 on the fp8 tensors where these shapes allow); the output in q's dtype."""
    fp8_path.check_call(q_BHMD, k_BKND, v_BKND, options)
    products = _fp8_products(q_BHMD, k_BKND, options)
    ops = fp8_path.operands(q_BHMD, k_BKND, v_BKND, options)
    q8_BHMD, k8_BKND, v8_BKND = (x8.float() * x_scale for x8, x_scale in ops)
    fp8_products = _Fp8Products(products, ops, options, k8_BKND.shape[1]) if fp8_mm.SCALED_MM in products else None
    how = how._replace(p_cast=fp8_path.p_cast(options), fp8_products=fp8_products)
    mask_bMN, sees_bM1 = additive_mask(masks, q8_BHMD.shape[2], k8_BKND.shape[2], q8_BHMD.dtype, q8_BHMD.device)
    return _steps(q8_BHMD, k8_BKND, v8_BKND, mask_bMN, sees_bM1, scale, how).to(q_BHMD.dtype)


class _Fp8Products:
    """Steps 1 and 5 of an FP8 call on the fp8 tensors (selfattn/fp8_mm.py), each where `products` says
    scaled_mm; the other runs on the dequantized values as without it. Tensors as (X, rows, D), X = B*kv_heads."""

    def __init__(self, products: tuple[str, str], ops, options: Mapping[str, Any], kv_heads: int) -> None:
        (q8, sq), (k8, sk), (v8, sv) = ops
        b, h, q_len, d = q8.shape
        seq_len = k8.shape[2]
        x, rows = b * kv_heads, (h // kv_heads) * q_len
        self.qk_way, self.pv_way = products
        self.options = options
        self.per_tensor = options["fp8_scaling"] != "block"
        self.q8_XRD, self.sq_XR1 = q8.reshape(x, rows, d), fp8_mm.scale_rows(sq, (x, rows, 1))
        self.k8_XND, self.sk_XN1 = k8.reshape(x, seq_len, d), fp8_mm.scale_rows(sk, (x, seq_len, 1))
        self.v8T_XDN = v8.reshape(x, seq_len, d).transpose(1, 2).contiguous()  # column-major V8 per head
        self.sv_XN1 = fp8_mm.scale_rows(sv, (x, seq_len, 1))

    def scores(self, q_BKRD: torch.Tensor, k_BKND: torch.Tensor, q_scale: float) -> torch.Tensor:
        """(Q K^T) * q_scale, (B, K, R, N) fp32 (q_scale: 1, or the softmax scale when scale_at=query)."""
        if self.qk_way != fp8_mm.SCALED_MM:
            return (q_BKRD * q_scale if q_scale != 1 else q_BKRD) @ k_BKND.transpose(-1, -2)
        s_XRN = fp8_mm.qk(self.q8_XRD, self.sq_XR1 * q_scale, self.k8_XND, self.sk_XN1, self.per_tensor)
        return s_XRN.view(*q_BKRD.shape[:3], k_BKND.shape[2])

    def out(self, weights_BKRN: torch.Tensor, p_cast, v_BKND: torch.Tensor) -> torch.Tensor:
        """fp8(P) V, (B, K, R, D) fp32."""
        if self.pv_way != fp8_mm.SCALED_MM:
            return p_cast(weights_BKRN) @ v_BKND
        b, kv_heads, rows, n = weights_BKRN.shape
        out_XRD = fp8_mm.pv(weights_BKRN.reshape(b * kv_heads, rows, n), self.options, self.v8T_XDN, self.sv_XN1,
                            self.per_tensor)
        return out_XRD.view(b, kv_heads, rows, -1)


def resolve_options(options: Mapping[str, Any], device: torch.device | str, dtype: torch.dtype) -> dict[str, Any]:
    return {**defaults(Options), **options, **fp8_path.resolve(options, dtype, device)}


def kernel_label(options: Mapping[str, Any]) -> str:
    label = "materialized-upcast" if options.get("upcast_softmax", False) else "materialized"
    label += "-scaleq" if options.get("scale_at", "logits") == "query" else ""
    return label + ("-compiled" if options.get("compile", False) else "") + fp8_path.label(options)


def kernel_ran(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, *, masks: Masks, scale: float,
               **options: Any) -> str | None:
    """FP8 with scaled_mm: "dequant-shapes" (or per product) when these shapes send a product back to
    dequant (head_dim or seq_len not a multiple of 16); None when the call runs what the label says."""
    if not fp8_path.active(options):
        return None
    return fp8_mm.ran_label(options, _fp8_products(q_BHMD, k_BKND, options))


def _fp8_products(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, options: Mapping[str, Any]) -> tuple[str, str]:
    return fp8_mm.call_products(options, q_BHMD.shape[-1], (0, k_BKND.shape[2]))


def compiles(options: Mapping[str, Any]) -> bool:
    """Whether a call with these (resolved) options runs compiled code."""
    return bool(options.get("compile", False))


def predict_mem_bytes(point: Point, options: Mapping[str, Any], device: str) -> int:
    """(q_len x seq_len) per head: two live at once forward (scores and their scaled copy, then
    scores and weights), three in backward (saved weights, their gradient, the scores' gradient).
    scale_at=query adds a scaled copy of Q (the size of the output) instead of the scaled scores.

    A call allocates no mask: the point's additive mask (additive_mask: q_len x seq_len in the scores' dtype, per
    sequence with padding or documents) is made once by `prepare`, before the measured calls, and kept like the
    inputs; step 3's add makes the masked scores while the scaled ones die, still two matrices at once."""
    if point.functions:  # a mask or score function (selfattn/mods/memory.py)
        from selfattn.mods.memory import dense_call_bytes

        return dense_call_bytes(point)
    s = point.element_bytes
    scores, out, grads = point.score_elements, point.out_bytes, point.grad_bytes
    if fp8_format(point.precision):  # fp32: the scores and softmax stay alive while P's cast makes its fp32
        # copy and the copy divided by p_scale (measured B1 H4 N1024 D64: 70.3 MB peak allocated, this model 75.2 MB); fp32 output
        return scores * 4 * FP32_BYTES + out * FP32_BYTES + fp8_path.mem_bytes(point, options)
    out += out if options.get("scale_at", "logits") == "query" else 0
    upcast = bool(options.get("upcast_softmax", False)) and point.precision not in ("fp32", "tf32")
    if upcast:  # scores (s) + fp32 copy (4) + fp32 softmax (4), then softmax (4) + weights (s)
        per = max(s + 2 * FP32_BYTES, 2 * s + FP32_BYTES)
    else:
        per = 2 * s
    forward = scores * per + out + _variant_bytes(point, s)
    if point.mode == "fwd":
        return forward
    # backward: the saved weights, their gradient, the scores' gradient; a soft-cap also saves tanh's output.
    # On CUDA the softmax's backward holds one more (q_len x seq_len) matrix in its dtype (CUDA_SOFTMAX_BACKWARD).
    per = 3 * s + (2 * FP32_BYTES if upcast else 0) + (s if point.softcap is not None else 0)
    per += (FP32_BYTES if upcast else s) * CUDA_SOFTMAX_BACKWARD if device == "cuda" else 0
    return max(forward, scores * per + out + grads)


def _variant_bytes(point: Point, s: int) -> int:
    """What the score transforms add to the forward's peak (two score matrices), the largest of
    their steps' extra: the soft-cap holds its input, tanh's output and the product at once (one more
    matrix; and with a backward tanh's output stays saved into the softmax); ALiBi builds |p - j| as two
    int64 (q_len x seq_len) matrices, then its (heads x q_len x seq_len) bias in the scores' dtype, which
    stays alive to the softmax; the sink's softmax holds the scores, their widened copy and its softmax.
    Measured on a CPU (torch 2.13, the profiler's allocation events; fp32 and bf16, B1-2 H2 n1024, fwd and
    fwd_bwd, each variant and ALiBi + sink + causal or + a window pair with GQA): within 4% of the model."""
    scores = point.score_elements * s
    cells = point.q_len_resolved * point.seq_len
    grad = point.mode != "fwd"
    bias = point.heads * cells * s if point.alibi else 0
    softmax = (scores if point.sink is not None else 0) + bias + (scores if point.softcap is not None and grad else 0)
    softcap = scores if point.softcap is not None else 0
    alibi = scores + max(16 * cells, cells * s + bias, scores + bias) - 2 * scores if point.alibi else 0
    return max(0, softmax, softcap, alibi)


backend(attention, takes_masks=True, options=Options, efficiency=EFFICIENCY,
        dtypes=("fp64", "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"), scores=("dot", "additive"),
        variants=("asymmetric_window", "softcap", "alibi", "sink"),  # selfattn/variants.py: all of them
        masks=("causal", "window", "key_lengths", "document_ids", "mask_mod", "score_mod"),  # selfattn/mods/
        mem_model=predict_mem_bytes, kernel_label=kernel_label, resolve_options=resolve_options, compiles=compiles,
        kernel_ran=kernel_ran, prepare=prepare)
