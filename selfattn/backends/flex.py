"""flex: torch's flex_attention, compiled, with a block mask built from the same mask arguments.

flex_attention (torch >= 2.5) is one compiled kernel for any mask: a `mask_mod(b, h, q_idx,
kv_idx) -> keep` evaluated inside the kernel, and a block mask (`create_block_mask`) that lists,
per block of 128 queries, the key blocks to visit and which of them are whole (no mask_mod
needed). The mask_mod here is the harness's one geometry (selfattn/masks.py): query i of sequence
b sees keys lo[b, i] <= j <= hi[b, i], so causal, window, padding and documents, and any mix of
them, are the same two comparisons. GQA goes through flex's own `enable_gqa`; the scale is
passed through (1.0 for the unscaled ablation). A row that sees no key returns zeros, as flex does.

Two costs are measured apart from the call (selfattn/measure/run.py): compiling (the first call,
`compile_s`) and building the block mask (`prepare`, `block_mask_s`). A model builds a block mask
once per batch and shares it across its layers, so calls reuse the one built for the same masks
(a small cache keyed on the mask arguments' values; the digest of padding and document ids is
made once per Masks, so a timed call reads no tensor on the host).

Every variant of selfattn/variants.py, inside the compiled kernel:
- a window pair is one more interval (masks.intervals), so its block mask skips the key blocks
  outside the window like any other mask;
- soft-capping and ALiBi are a `score_mod` (scale, then cap*tanh(s/cap), then -slope[h]*|p - j| with
  p = q_idx + seq_len - q_len and h the query head, also under GQA), compiled in. The cap, the slopes
  and the sink are tensors the score_mod captures, so flex compiles one graph per combination of
  transforms (and shape) and a new cap or sink value reuses it;
- the sink logit joins each row's denominator in one of two ways (SINK_WAYS): "lse" asks flex for the
  row's log-sum-exp and rescales the output by sigmoid(lse - sink) (score_mods.sink_rescale; flex
  returns the LSE in natural log, converting its kernels' log2); "key" appends one key to K and V
  (zeros) that every row sees and whose score the score_mod sets to the sink, so the kernel's own
  softmax counts it and its zero value adds nothing. inductor's CPU flex cannot return the LSE
  (torch 2.13: "return_lse is not supported yet"), so a CPU takes "key" (K and V copied one key
  longer, and every query block visits the last key block); CUDA takes "lse". A row that sees no key
  is zeros either way: its LSE is -inf (factor 0), or the sink takes all its weight (value 0).

What it cannot run is declared (below): inductor's CPU kernel takes fp32, fp16 and bf16 only and has
no backward; a CPU needs a C++ compiler, CUDA needs triton (`missing`).
"""

from __future__ import annotations

import functools
import hashlib
import shutil
import time
from collections import OrderedDict
from typing import Any, Callable, Mapping

import torch

from selfattn.backends.contract import backend
from selfattn.backends.options.flex import Options as Options
from selfattn.compile import compiled
from selfattn.fields import defaults
from selfattn.masks import Masks
from selfattn.point import FP32_BYTES, Point
from selfattn.score_mods import alibi_slopes_tensor, sink_rescale

# A compiled kernel with block sparsity, but generated rather than hand-tuned: the time guard's
# optimistic share of the matmul peak.
EFFICIENCY = 0.6
BLOCK_SIZE = 128  # flex_attention's default sparse block (queries and keys)
BLOCK_MASK_CACHE = 4  # block masks kept for reuse (one per distinct set of mask arguments)
SCORE_MOD_CACHE = 8  # score_mods kept for reuse (one per distinct transforms, heads and shape)
SINK_WAYS = ("lse", "key")  # how the sink joins the softmax (module docstring)


def missing(device: torch.device | str) -> str | None:
    """Why flex cannot run on `device` (a device or its type) at all, or None."""
    device = torch.device(device)
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except ImportError:
        return f"flex_attention needs torch >= 2.5 (this is {torch.__version__})"
    if device.type == "cpu" and not _cpp_compiler():
        return "flex on a CPU compiles through inductor's C++ backend, and no C++ compiler (g++, c++, clang++) is on PATH"
    if device.type == "cuda":
        from selfattn import torch_private

        if not torch_private.has_triton():
            return "flex on CUDA compiles through triton, which is not installed or cannot run here"
    return None


@functools.cache
def _cpp_compiler() -> str | None:
    """The C++ compiler inductor can use, looked up once: a PATH search costs ~75 us, and every call checks."""
    return next((cc for cc in ("g++", "c++", "clang++") if shutil.which(cc)), None)


def resolve_options(options: Mapping[str, Any], device: torch.device | str, dtype: torch.dtype) -> dict[str, Any]:
    return {**defaults(Options), **options}


def kernel_label(options: Mapping[str, Any]) -> str:
    return "compiled"


def kernel_ran(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, *, masks: Masks,
               scale: float) -> str | None:
    """What the variants compiled in: "score_mod" (softcap, ALiBi), "sink_lse" or "sink_key" (the
    sink's way on this device), joined by "+"; None for plain scores (the kernel is the label's)."""
    parts = ["score_mod"] if masks.softcap is not None or masks.alibi else []
    if masks.sink is not None:
        parts.append(f"sink_{sink_way(q_BHMD.device)}")
    return "+".join(parts) or None


def sink_way(device: torch.device) -> str:
    """How the sink joins the softmax on `device` (SINK_WAYS): a CPU's flex cannot return the LSE."""
    return "key" if device.type == "cpu" else "lse"


def compiles(options: Mapping[str, Any]) -> bool:
    return True  # flex_attention runs compiled or not at all (its eager path is a slow reference)


def attention(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, *, masks: Masks,
              scale: float) -> torch.Tensor:
    from torch.nn.attention.flex_attention import flex_attention

    return flex_call(compiled(flex_attention), q_BHMD, k_BKND, v_BKND, masks=masks, scale=scale,
                     sink_by=sink_way(q_BHMD.device))


def flex_call(flex: Callable, q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, *, masks: Masks,
              scale: float, sink_by: str) -> torch.Tensor:
    """One call of `flex` (flex_attention, compiled or not) with the masks' block mask and score_mod, the
    sink joined the way `sink_by` says (SINK_WAYS). `attention` passes the compiled function and the
    device's way; the tests pass torch's eager flex_attention too, which has a backward on a CPU."""
    batch, heads, q_len = q_BHMD.shape[:3]
    seq_len = k_BKND.shape[2]
    if masks.functions:  # a mask or score function (selfattn/mods/): flex takes them as they are
        return _with_functions(flex, q_BHMD, k_BKND, v_BKND, masks, scale)
    sink_key = masks.sink is not None and sink_by == "key"
    if sink_key:  # one more key, zeros, that every row sees: its score is the sink (score_mod), its value 0
        k_BKND, v_BKND = (torch.cat([t, t.new_zeros(*t.shape[:2], 1, t.shape[3])], dim=2) for t in (k_BKND, v_BKND))
    block_mask = _block_mask(masks, batch, q_len, seq_len, q_BHMD.device, sink_key=sink_key)
    score_mod = _score_mod(masks, heads, q_len, seq_len, q_BHMD.device, sink_key=sink_key)
    gqa = k_BKND.shape[1] != heads
    if masks.sink is None or sink_key:
        return flex(q_BHMD, k_BKND, v_BKND, score_mod=score_mod, block_mask=block_mask, scale=scale, enable_gqa=gqa)
    from torch.nn.attention.flex_attention import AuxRequest

    out_BHMD, aux = flex(q_BHMD, k_BKND, v_BKND, score_mod=score_mod, block_mask=block_mask, scale=scale,
                         enable_gqa=gqa, return_aux=AuxRequest(lse=True))
    # the LSE is fp32 whatever the inputs: rescale in fp32, round once (a row that sees no key: -inf, factor 0)
    return (out_BHMD * sink_rescale(aux.lse, masks.sink)[..., None]).to(out_BHMD.dtype)


def prepare(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, *, masks: Masks,
            scale: float) -> dict[str, float]:
    """Build the block mask these inputs need, timed, and keep it for the calls that follow."""
    device = q_BHMD.device
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    if masks.functions:
        _function_block_mask(masks, q_BHMD.shape[0], q_BHMD.shape[1], q_BHMD.shape[2], k_BKND.shape[2], device)
    else:
        _block_mask(masks, q_BHMD.shape[0], q_BHMD.shape[2], k_BKND.shape[2], device, rebuild=True,
                    sink_key=masks.sink is not None and sink_way(device) == "key")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return {"block_mask_s": time.perf_counter() - started}


# (mask geometry, shape, device) -> BlockMask, most recently used last
_block_masks: OrderedDict[tuple, Any] = OrderedDict()


def _block_mask(masks: Masks, batch: int, q_len: int, seq_len: int, device: torch.device, *, rebuild: bool = False,
                sink_key: bool = False):
    """The BlockMask of `masks`, built once per distinct geometry (and shape and device).

    Keyed on the window's extents (left, right), causal included, rather than on the arguments that
    gave them, so window=5 and window=(4, 4) share one; `sink_key`: one more key, seq_len, that every
    query sees (the sink's "key" way)."""
    extents = masks.extents
    key = (extents, *_digests(masks), batch, q_len, seq_len, sink_key, str(device))
    if key in _block_masks and not rebuild:
        _block_masks.move_to_end(key)
        return _block_masks[key]
    from torch.nn.attention.flex_attention import create_block_mask

    kv_len = seq_len + 1 if sink_key else seq_len
    if extents == (None, None) and masks.key_lengths is None and masks.document_ids is None:
        block_mask = _all_blocks(q_len, kv_len, device)
    else:
        lo_bM, hi_bM = masks.intervals(q_len, seq_len, device)
        per_sequence = lo_bM.shape[0] > 1  # padding or documents: each sequence has its own block mask
        mask_mod = _interval_mask_mod(lo_bM, hi_bM, sink_at=seq_len if sink_key else None)
        block_mask = create_block_mask(mask_mod, B=batch if per_sequence else None, H=None,
                                       Q_LEN=q_len, KV_LEN=kv_len, device=device, BLOCK_SIZE=BLOCK_SIZE)
    _block_masks[key] = block_mask
    _block_masks.move_to_end(key)
    while len(_block_masks) > BLOCK_MASK_CACHE:
        _block_masks.popitem(last=False)
    return block_mask


def _all_blocks(q_len: int, seq_len: int, device: torch.device):
    """A block mask of whole blocks only: every query block visits every key block, no mask_mod.

    Why not block_mask=None: on a CPU flex then holds O(q_len x seq_len) bytes per head in every
    call (measured, torch 2.13, H8 n=2048 fp32: 83 MB against 13 MB with this mask), and
    create_block_mask with an always-true mask_mod would build a (q_len x seq_len) mask to learn
    what is known: all blocks are whole. So the index tensors are written directly.
    """
    from torch.nn.attention.flex_attention import BlockMask

    q_blocks, kv_blocks = -(-q_len // BLOCK_SIZE), -(-seq_len // BLOCK_SIZE)
    none = torch.zeros(1, 1, q_blocks, dtype=torch.int32, device=device)  # no partial blocks
    none_indices = torch.zeros(1, 1, q_blocks, kv_blocks, dtype=torch.int32, device=device)
    whole = torch.full((1, 1, q_blocks), kv_blocks, dtype=torch.int32, device=device)
    whole_indices = torch.arange(kv_blocks, dtype=torch.int32, device=device).expand(1, 1, q_blocks, kv_blocks).contiguous()
    return BlockMask.from_kv_blocks(none, none_indices, whole, whole_indices, BLOCK_SIZE=BLOCK_SIZE,
                                    mask_mod=_see_all, seq_lengths=(q_len, seq_len))


def _see_all(b, h, q_idx, kv_idx):
    return q_idx >= 0  # never evaluated: every block is whole


def _digests(masks: Masks) -> tuple:
    """The digests of the masks' padding and document ids, made once per masks (Masks.decision):
    reading their values copies them to the host, which inside a timed call would wait on the GPU."""
    if masks.key_lengths is None and masks.document_ids is None:
        return None, None
    return masks.decision(("flex_digest",), lambda device: (_digest(masks.key_lengths), _digest(masks.document_ids)))


def _digest(t: torch.Tensor | None) -> tuple | None:
    """A tensor's shape and a hash of its values: the cache key of a mask argument."""
    if t is None:
        return None
    values = t.detach().to("cpu", torch.long).contiguous().numpy().tobytes()
    return tuple(t.shape), hashlib.blake2b(values, digest_size=16).hexdigest()


def _interval_mask_mod(lo_bM: torch.Tensor, hi_bM: torch.Tensor, sink_at: int | None = None) -> Callable:
    """mask_mod keeping lo[b, i] <= j <= hi[b, i] (one shared row of intervals when lo has one sequence),
    and key `sink_at` for every query when given (the sink's key)."""
    if lo_bM.shape[0] == 1:  # the block mask is shared by every sequence: b may be any of them
        lo_M, hi_M = lo_bM[0], hi_bM[0]

        def shared(b, h, q_idx, kv_idx):
            return (kv_idx >= lo_M[q_idx]) & (kv_idx <= hi_M[q_idx])

        keep = shared
    else:
        def per_sequence(b, h, q_idx, kv_idx):
            return (kv_idx >= lo_bM[b, q_idx]) & (kv_idx <= hi_bM[b, q_idx])

        keep = per_sequence
    if sink_at is None:
        return keep

    def with_sink(b, h, q_idx, kv_idx):
        return keep(b, h, q_idx, kv_idx) | (kv_idx == sink_at)

    return with_sink


def _with_functions(flex: Callable, q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, masks: Masks,
                    scale: float) -> torch.Tensor:
    """flex_attention with the mask function as the BlockMask's mask_mod and the score function as its score_mod,
    each given the harness's positions: q_idx + (seq_len - q_len), bottom-right aligned (selfattn/mods/contract.py)."""
    from selfattn.errors import Unsupported

    if masks.sink is not None:
        raise Unsupported("flex with a mask or score function: the sink is not built beside them")
    batch, heads, q_len = q_BHMD.shape[:3]
    seq_len = k_BKND.shape[2]
    block_mask = _function_block_mask(masks, batch, heads, q_len, seq_len, q_BHMD.device)
    score_mod = _score_mod(masks, heads, q_len, seq_len, q_BHMD.device)
    if masks.score_mod is not None:
        score_mod = _with_offset_score_mod(masks.score_mod.fn, score_mod, seq_len - q_len)
    return flex(q_BHMD, k_BKND, v_BKND, score_mod=score_mod, block_mask=block_mask, scale=scale,
                enable_gqa=k_BKND.shape[1] != heads)


def _with_offset_score_mod(fn: Callable, before: Callable | None, offset: int) -> Callable:
    def score_mod(score, b, h, q_idx, kv_idx):
        if before is not None:  # the built-in transforms first (soft-cap, ALiBi), as the reference applies them
            score = before(score, b, h, q_idx, kv_idx)
        return fn(score, b, h, q_idx + offset, kv_idx)

    return score_mod


def _function_block_mask(masks: Masks, batch: int, heads: int, q_len: int, seq_len: int, device: torch.device):
    """The BlockMask of the mask function (and the interval masks beside it), built once per masks and kept
    (selfattn/mods/geometry.py `kept`): per sequence and per head only where the function may read them."""
    from torch.nn.attention.flex_attention import create_block_mask

    from selfattn.mods.geometry import kept

    def make():
        offset = seq_len - q_len
        lo_bM, hi_bM = masks.intervals(q_len, seq_len, device)
        within = _interval_mask_mod(lo_bM, hi_bM)
        mod = masks.mask_mod
        if mod is None:
            mask_mod = within
        else:
            def mask_mod(b, h, q_idx, kv_idx):
                return within(b, h, q_idx, kv_idx) & mod.fn(b, h, q_idx + offset, kv_idx)

        per_sequence = lo_bM.shape[0] > 1 or (mod is not None and mod.per_sequence)
        per_head = mod is not None and mod.per_head
        return create_block_mask(mask_mod, B=batch if per_sequence else None, H=heads if per_head else None,
                                 Q_LEN=q_len, KV_LEN=seq_len, device=device, BLOCK_SIZE=BLOCK_SIZE)

    return kept(masks, ("flex_block_mask", batch, heads, q_len, seq_len, str(device)), make)


# (transforms, heads, shape, device) -> score_mod, most recently used last
_score_mods: OrderedDict[tuple, Callable] = OrderedDict()


def _score_mod(masks: Masks, heads: int, q_len: int, seq_len: int, device: torch.device, *,
               sink_key: bool = False) -> Callable | None:
    """The score_mod of the masks' transforms (None when the scores stay plain), made once per
    transforms, heads, shape and device and kept, so a timed call builds no tensor."""
    sink = masks.sink if sink_key else None
    if masks.softcap is None and not masks.alibi and sink is None:
        return None
    key = (masks.softcap, masks.alibi, sink, heads, q_len, seq_len, str(device))
    if key in _score_mods:
        _score_mods.move_to_end(key)
        return _score_mods[key]
    score_mod = _make_score_mod(masks.softcap, masks.alibi, sink, heads, q_len, seq_len, device)
    _score_mods[key] = score_mod
    while len(_score_mods) > SCORE_MOD_CACHE:
        _score_mods.popitem(last=False)
    return score_mod


def _make_score_mod(softcap: float | None, alibi: bool, sink: float | None, heads: int, q_len: int, seq_len: int,
                    device: torch.device) -> Callable:
    """score_mod(score, b, h, q_idx, kv_idx) for the scaled score of query q_idx and key kv_idx under query
    head h: soft-cap, then ALiBi (FlashAttention's order); key seq_len (the sink's key) scores `sink`.

    The values are captured as tensors, not Python numbers: dynamo guards a captured number by its
    value (a new cap would compile again) but a captured tensor by its shape and dtype only."""
    cap = None if softcap is None else torch.tensor(softcap, dtype=torch.float32, device=device)
    slopes_H = alibi_slopes_tensor(heads, device) if alibi else None
    sink_logit = None if sink is None else torch.tensor(sink, dtype=torch.float32, device=device)
    offset = seq_len - q_len  # query i sits at position i + offset (bottom-right aligned)

    def score_mod(score, b, h, q_idx, kv_idx):  # reads only the tensors and the shape's integers
        if cap is not None:
            score = torch.tanh(score / cap) * cap
        if slopes_H is not None:
            score = score - slopes_H[h] * (q_idx + offset - kv_idx).abs()
        if sink_logit is not None:
            score = torch.where(kv_idx == seq_len, sink_logit, score)
        return score

    return score_mod


# Per-thread scratch of inductor's CPU flex kernel, fitted to the profiler's peaks (torch 2.13,
# fp32, H1-8, n = 512-2048, D64, 2 threads): peak = out + 2 fp32 output-sized buffers + this per thread.
CPU_SCRATCH_BYTES_PER_THREAD = 320 * 1024
# create_block_mask evaluates mask_mod on every (query, key) pair at once: measured 10 bytes per
# pair at its peak (int64 indices and booleans), per sequence when padding or documents differ.
BUILD_BYTES_PER_PAIR = 10


def predict_mem_bytes(point: Point, options: Mapping[str, Any], device: str) -> int:
    """O(n) per head in the call: the output, its log-sum-exp and, on a CPU, fp32 output
    accumulators and per-thread scratch; the block mask's O((n/128)^2) index tensors. Building a
    block mask for a mask (prepare) briefly costs BUILD_BYTES_PER_PAIR per (query, key) pair.
    The sink adds its way's copies (SINK_WAYS); soft-capping and ALiBi add nothing (a scalar and the
    heads' slopes, captured by the score_mod). CUDA (triton keeps its tiles on chip; backward keeps
    dq in fp32) is not measured yet."""
    b, h, d = point.batch, point.heads, point.head_dim
    q_len, seq_len = point.q_len_resolved, point.seq_len
    out, grads = point.out_bytes, point.grad_bytes
    rows = b * h * q_len
    lse = rows * FP32_BYTES
    masks_per = b if point.masks_per_sequence else 1
    kv_len = seq_len + 1 if point.sink is not None and device != "cuda" else seq_len  # the sink's key on a CPU
    # create_block_mask evaluates mask_mod on lengths padded to whole blocks (measured: 1000 and 1024 cost the same)
    padded_pairs = -(-q_len // BLOCK_SIZE) * -(-kv_len // BLOCK_SIZE) * BLOCK_SIZE * BLOCK_SIZE
    build = BUILD_BYTES_PER_PAIR * masks_per * padded_pairs if point.masked else 0
    index = 4 * masks_per * -(-q_len // BLOCK_SIZE) * -(-kv_len // BLOCK_SIZE) * 4  # 4 int32 index tensors
    if device == "cuda":
        call = out + lse + index
        if point.sink is not None:  # sink_lse: the fp32 factor and rescaled output, then its cast
            call += rows * FP32_BYTES + rows * d * FP32_BYTES + (out if point.element_bytes != FP32_BYTES else 0)
    else:
        call = out + 2 * rows * d * FP32_BYTES + lse + index + torch.get_num_threads() * CPU_SCRATCH_BYTES_PER_THREAD
        if point.sink is not None:  # sink_key: K and V copied one key longer, alive through the call
            call += 2 * b * point.kv_heads_resolved * (seq_len + 1) * d * point.element_bytes
    if point.mode == "fwd_bwd":
        call += grads + lse + rows * d * FP32_BYTES  # the gradients, delta rows, dq accumulated in fp32
    return max(call, index + build)


# Why it lacks what it does not declare: said in the point's `unsupported` row (capability.why_not).
GAPS = {"fp64": "inductor's CPU flex kernel takes fp32, fp16 and bf16",
        "backward": f"inductor's CPU flex kernel has no backward (torch {torch.__version__}): fwd_bwd needs CUDA",
        "fp8": "flex_attention generates fp16, bf16 and fp32 kernels, none taking FP8 inputs; naive and chunked "
               "quantize Q, K, V and P themselves"}
backend(attention, takes_masks=True, options=Options, efficiency=EFFICIENCY,
        dtypes={"cpu": ("fp32", "fp16", "bf16"), "cuda": ("fp64", "fp32", "fp16", "bf16")},
        backward={"cpu": False, "cuda": True},
        variants=("asymmetric_window", "softcap", "alibi", "sink"), gaps=GAPS,  # selfattn/variants.py: all of them
        masks=("causal", "window", "key_lengths", "document_ids", "mask_mod", "score_mod"),  # selfattn/mods/: as they are
        unavailable=missing, mem_model=predict_mem_bytes, kernel_label=kernel_label, resolve_options=resolve_options,
        compiles=compiles, prepare=prepare, kernel_ran=kernel_ran)
