"""chunked: exact attention block by block with an online softmax, in O(n) memory.

Rabe & Staats (2021) and FlashAttention: walk over key blocks keeping, per query row, the
running max m, the running sum l of exp(score - m) and the running output acc; when a new
block raises the max, rescale l and acc by exp(m_old - m_new). Never more than
q_chunk x kv_chunk scores exist per (batch, head) at once.

Causal (bottom-right aligned): key blocks that every query of a block is blind to are never
computed, and only blocks that straddle the diagonal build a mask.

The backward pass is a custom autograd.Function that keeps only the output and the
log-sum-exp per row and recomputes each block's probabilities, as FlashAttention does, so
fwd_bwd memory stays O(n) too.

Speed on CPU comes from: batch*heads flattened into one bmm per block, the scale folded
into Q once, in-place exp/sub and baddbmm_ into the accumulator, chunk sizes measured per
device and dtype (DEFAULT_CHUNKS), and head groups run in worker threads with
single-threaded ops instead of one OpenMP barrier per op (see _over_heads;
HEAD_THREADS = 1 keeps every op on the calling thread, as a TorchDispatchMode needs).
fp16/bf16 inputs are computed in float32, as fused kernels accumulate in fp32; the output
is cast back to the input dtype.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from selfattn.fields import spec
from selfattn.reference import causal_keep_mask
from selfattn.point import FP32_BYTES, Point

NAME = "chunked"
# Block matmuls plus memory-bound online-softmax passes: the time guard's optimistic share of
# the matmul peak.
EFFICIENCY = 0.6


@dataclass(frozen=True)
class Options:
    q_chunk: int | None = spec(None, ge=1, help="query rows per block; null: the tuned default (DEFAULT_CHUNKS)")
    kv_chunk: int | None = spec(None, ge=1, help="key rows per block; null: the tuned default")

# (device type, dtype) -> (q_chunk, kv_chunk), chosen from a measured sweep (see docs/performance.md).
# CPU fp32, B1 H8 D64, n=4096, 2 threads: chunked/sdpa CPU time 1.24-1.34 for every size from
# 128x256 to 1024x1024; 256x512 was at the bottom for fwd (1.26) and fwd_bwd (1.14), and is
# finer than 512x512 for causal block skipping. fp16/bf16 compute in fp32, so they share it.
DEFAULT_CHUNKS: dict[tuple[str, torch.dtype], tuple[int, int]] = {
    ("cpu", torch.float32): (256, 512),
    ("cpu", torch.float16): (256, 512),
    ("cpu", torch.bfloat16): (256, 512),
}
FALLBACK_CHUNKS = (256, 512)  # not yet measured there (CPU fp64, CUDA): the CPU fp32 choice


def available(device: torch.device | str) -> bool:
    return True  # plain torch ops


def resolve_options(options: Mapping[str, Any], device: torch.device | str, dtype: torch.dtype) -> dict[str, Any]:
    device_type = torch.device(device).type
    q_default, kv_default = DEFAULT_CHUNKS.get((device_type, dtype), FALLBACK_CHUNKS)
    q_chunk = options.get("q_chunk")
    kv_chunk = options.get("kv_chunk")
    return {
        "q_chunk": q_default if q_chunk is None else q_chunk,
        "kv_chunk": kv_default if kv_chunk is None else kv_chunk,
    }


def kernel_label(options: Mapping[str, Any]) -> str:
    return f"q{options['q_chunk']}-kv{options['kv_chunk']}"


def attention(
    q_BHMD: torch.Tensor,
    k_BHND: torch.Tensor,
    v_BHND: torch.Tensor,
    *,
    causal: bool,
    scale: float,
    q_chunk: int,
    kv_chunk: int,
) -> torch.Tensor:
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q_BHMD, k_BHND, v_BHND)):
        return _ChunkedAttention.apply(q_BHMD, k_BHND, v_BHND, causal, scale, q_chunk, kv_chunk)
    out_BHMD, _ = _forward(q_BHMD, k_BHND, v_BHND, causal, scale, q_chunk, kv_chunk)
    return out_BHMD.to(q_BHMD.dtype)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _flat(t_BHLD: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    b, h, length, d = t_BHLD.shape
    return t_BHLD.reshape(b * h, length, d).to(dtype)


def _blocks(q_len: int, seq_len: int, causal: bool, q_chunk: int, kv_chunk: int):
    """Yield (m0, m1, [(n0, n1, needs_mask), ...]) for every query block: the key blocks to visit.

    Query i sees keys j <= i + offset (offset = seq_len - q_len >= 0 when causal). A query
    block [m0, m1) therefore needs keys [0, m1 + offset) only, and a key block needs a mask
    only if its last key lies beyond what the block's first query may see.
    """
    offset = seq_len - q_len
    for m0 in range(0, q_len, q_chunk):
        m1 = min(m0 + q_chunk, q_len)
        n_end = min(seq_len, m1 + offset) if causal else seq_len
        kv = []
        for n0 in range(0, n_end, kv_chunk):
            n1 = min(n0 + kv_chunk, n_end)
            kv.append((n0, n1, causal and n1 - 1 > m0 + offset))
        yield m0, m1, kv


def _hidden(q_len: int, seq_len: int, m0: int, m1: int, n0: int, n1: int, device: torch.device) -> torch.Tensor:
    """Bool (m1-m0, n1-n0): True where key n0+j lies in the future of query m0+i (the reference's mask, cut)."""
    return ~causal_keep_mask(q_len, seq_len, rows=torch.arange(m0, m1, device=device), keys=(n0, n1))


def _forward(q_BHMD, k_BHND, v_BHND, causal: bool, scale: float, q_chunk: int, kv_chunk: int):
    """Returns out (B, H, M, D) and logsumexp (BH, M), both in the compute dtype."""
    b, h, q_len, d = q_BHMD.shape
    cdtype = _compute_dtype(q_BHMD.dtype)
    q_XMD = _flat(q_BHMD, cdtype) * scale  # X = batch*heads; scale folded into Q once
    k_XND, v_XND = _flat(k_BHND, cdtype), _flat(v_BHND, cdtype)
    out_XMD, lse_XM = _over_heads(_forward_flat, (q_XMD, k_XND, v_XND), causal, q_chunk, kv_chunk)
    return out_XMD.view(b, h, q_len, d), lse_XM


def _forward_flat(q_XMD, k_XND, v_XND, causal: bool, q_chunk: int, kv_chunk: int):
    """The online softmax over key blocks for every query block, on heads flattened to X."""
    x, q_len, d = q_XMD.shape
    seq_len = k_XND.shape[1]
    kT_XDN = k_XND.transpose(1, 2)
    out_XMD = torch.empty(x, q_len, d, dtype=q_XMD.dtype, device=q_XMD.device)
    lse_XM = torch.empty(x, q_len, dtype=q_XMD.dtype, device=q_XMD.device)
    for m0, m1, kv_blocks in _blocks(q_len, seq_len, causal, q_chunk, kv_chunk):
        q_XmD = q_XMD[:, m0:m1]
        acc_XmD = row_max_Xm1 = row_sum_Xm1 = None
        for n0, n1, needs_mask in kv_blocks:
            s_Xmn = torch.bmm(q_XmD, kT_XDN[:, :, n0:n1])
            if needs_mask:
                s_Xmn.masked_fill_(_hidden(q_len, seq_len, m0, m1, n0, n1, s_Xmn.device), float("-inf"))
            block_max_Xm1 = s_Xmn.amax(dim=-1, keepdim=True)
            if acc_XmD is None:  # first block: nothing to rescale
                new_max_Xm1 = block_max_Xm1
            else:
                new_max_Xm1 = torch.maximum(row_max_Xm1, block_max_Xm1)
            if needs_mask:  # a row may see no key of this block yet: keep exp() away from -inf - -inf
                new_max_Xm1 = new_max_Xm1.masked_fill(new_max_Xm1 == float("-inf"), 0.0)
            p_Xmn = s_Xmn.sub_(new_max_Xm1).exp_()
            if acc_XmD is None:
                row_sum_Xm1 = p_Xmn.sum(dim=-1, keepdim=True)
                acc_XmD = torch.bmm(p_Xmn, v_XND[:, n0:n1])
            else:
                correction_Xm1 = torch.exp(row_max_Xm1 - new_max_Xm1)
                row_sum_Xm1.mul_(correction_Xm1).add_(p_Xmn.sum(dim=-1, keepdim=True))
                acc_XmD.mul_(correction_Xm1).baddbmm_(p_Xmn, v_XND[:, n0:n1])
            row_max_Xm1 = new_max_Xm1
        torch.div(acc_XmD, row_sum_Xm1, out=out_XMD[:, m0:m1])
        lse_XM[:, m0:m1] = (row_max_Xm1 + row_sum_Xm1.log()).squeeze(-1)
    return out_XMD, lse_XM


def _backward(grad_BHMD, q_BHMD, k_BHND, v_BHND, out_XMD, lse_XM, causal, scale, q_chunk, kv_chunk):
    """dq, dk, dv by recomputing each block's probabilities P = exp(S - lse)."""
    b, h, q_len, d = q_BHMD.shape
    seq_len = k_BHND.shape[2]
    cdtype = out_XMD.dtype
    q_XMD = _flat(q_BHMD, cdtype) * scale
    k_XND, v_XND, do_XMD = _flat(k_BHND, cdtype), _flat(v_BHND, cdtype), _flat(grad_BHMD, cdtype)
    dq_XMD, dk_XND, dv_XND = _over_heads(
        _backward_flat, (q_XMD, k_XND, v_XND, do_XMD, out_XMD, lse_XM), causal, q_chunk, kv_chunk
    )
    dq_XMD.mul_(scale)  # d/dq = d/d(scaled q) * scale
    dtype = q_BHMD.dtype
    return (
        dq_XMD.view(b, h, q_len, d).to(dtype),
        dk_XND.view(b, h, seq_len, d).to(dtype),
        dv_XND.view(b, h, seq_len, d).to(dtype),
    )


def _backward_flat(q_XMD, k_XND, v_XND, do_XMD, out_XMD, lse_XM, causal: bool, q_chunk: int, kv_chunk: int):
    """Gradients w.r.t. the scaled q, k and v, on heads flattened to X."""
    q_len, seq_len = q_XMD.shape[1], k_XND.shape[1]
    # delta_i = sum_j P_ij dP_ij = dO_i . O_i (FlashAttention-2's D_i)
    delta_XM1 = (do_XMD * out_XMD).sum(dim=-1, keepdim=True)
    lse_XM1 = lse_XM.unsqueeze(-1)
    # Accumulators are contiguous per block (baddbmm_ into a strided slice falls back to a
    # per-matrix loop); they are concatenated once at the end, an O(n d) copy.
    kv_starts = range(0, seq_len, kv_chunk)
    dk_parts = [torch.zeros_like(k_XND[:, n0 : n0 + kv_chunk]) for n0 in kv_starts]
    dv_parts = [torch.zeros_like(v_XND[:, n0 : n0 + kv_chunk]) for n0 in kv_starts]
    dq_parts = []
    for m0, m1, kv_blocks in _blocks(q_len, seq_len, causal, q_chunk, kv_chunk):
        q_XmD, do_XmD = q_XMD[:, m0:m1], do_XMD[:, m0:m1]
        dq_XmD = torch.zeros_like(q_XmD)
        for n0, n1, needs_mask in kv_blocks:
            s_Xmn = torch.bmm(q_XmD, k_XND[:, n0:n1].transpose(1, 2))
            if needs_mask:
                s_Xmn.masked_fill_(_hidden(q_len, seq_len, m0, m1, n0, n1, s_Xmn.device), float("-inf"))
            p_Xmn = s_Xmn.sub_(lse_XM1[:, m0:m1]).exp_()
            part = n0 // kv_chunk
            dv_parts[part][:, : n1 - n0].baddbmm_(p_Xmn.transpose(1, 2), do_XmD)
            dp_Xmn = torch.bmm(do_XmD, v_XND[:, n0:n1].transpose(1, 2))
            ds_Xmn = dp_Xmn.sub_(delta_XM1[:, m0:m1]).mul_(p_Xmn)
            dq_XmD.baddbmm_(ds_Xmn, k_XND[:, n0:n1])
            dk_parts[part][:, : n1 - n0].baddbmm_(ds_Xmn.transpose(1, 2), q_XmD)
        dq_parts.append(dq_XmD)
    return torch.cat(dq_parts, dim=1), torch.cat(dk_parts, dim=1), torch.cat(dv_parts, dim=1)


# Head-parallel driver. On a CPU, torch parallelizes each op with OpenMP, so every op ends in
# a barrier; with hundreds of small ops per call, a core shared with another process stalls
# each barrier for a scheduler slice (measured: 6x slower than SDPA under load, 1.2x quiet).
# Instead, split the flattened heads into one contiguous group per intra-op thread and run the
# groups in Python threads with single-threaded ops (torch releases the GIL inside ops): no
# barrier until the end, like SDPA's own kernel. Each (batch, head) still has one block alive.
#
# Worker threads do not inherit the caller's thread-local torch state: a TorchDispatchMode
# (FLOP counter, live-tensor tracker) entered around the call sees none of the workers' ops.
# torch has no public way to ask whether such a mode is active, so this is a setting:
HEAD_THREADS: int | None = None
"""Threads the head groups run on. None: torch.get_num_threads(). 1: every op on the calling
thread, which a TorchDispatchMode needs to see all of them; set it (or torch.set_num_threads(1))
around such a mode. Tensor subclasses (FakeTensor), torch.compile tracing and non-CPU tensors
always stay on the calling thread."""

_pool: ThreadPoolExecutor | None = None
_pool_workers = 0  # the threads _pool was made with; a larger request replaces it
_pool_lock = threading.Lock()
_in_worker = threading.local()


def _forget_pool_after_fork() -> None:
    """A forked child inherits the pool object but not its threads: start a fresh one there."""
    global _pool, _pool_workers, _pool_lock
    _pool, _pool_workers, _pool_lock = None, 0, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_after_fork)


def _head_workers(tensors_X) -> int:
    """How many threads to split the heads over; 1 keeps everything on the calling thread."""
    first = tensors_X[0]
    if (
        first.device.type != "cpu"
        or getattr(_in_worker, "active", False)
        # a subclass may route ops through per-thread state (FakeTensor's mode); so may tracing
        or any(type(t) is not torch.Tensor for t in tensors_X)
        or torch.compiler.is_compiling()
    ):
        return 1
    threads = torch.get_num_threads() if HEAD_THREADS is None else HEAD_THREADS
    return max(1, min(threads, first.shape[0]))


def _over_heads(fn, tensors_X, *args):
    """fn(*tensors_X, *args) -> tuple of tensors with X first; run per head group, concatenated."""
    workers = _head_workers(tensors_X)
    if workers == 1:
        return fn(*tensors_X, *args)
    x = tensors_X[0].shape[0]
    bounds = [round(i * x / workers) for i in range(workers + 1)]
    groups = [slice(bounds[i], bounds[i + 1]) for i in range(workers)]

    def run(group: slice):
        torch.set_num_threads(1)  # this worker's ops stay single-threaded
        _in_worker.active = True
        try:
            with torch.no_grad():  # grad mode is per thread; these blocks never need autograd
                return fn(*(t[group] for t in tensors_X), *args)
        finally:
            _in_worker.active = False

    global _pool, _pool_workers
    threads_before = torch.get_num_threads()
    with _pool_lock:
        if _pool is None or _pool_workers < workers:
            # no shutdown() of the old pool: another caller may be about to map on it; its
            # threads exit once it is unreferenced
            _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="selfattn-chunked")
            _pool_workers = workers
        pool = _pool
    torch.set_num_threads(1)
    try:
        results = list(pool.map(run, groups))
    finally:
        torch.set_num_threads(threads_before)
    return tuple(torch.cat(parts, dim=0) for parts in zip(*results))


class _ChunkedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, q_chunk, kv_chunk):
        out_BHMD, lse_XM = _forward(q, k, v, causal, scale, q_chunk, kv_chunk)
        out_XMD = out_BHMD.flatten(0, 1)
        ctx.save_for_backward(q, k, v, out_XMD, lse_XM)  # O(n d) and O(n): no score block survives
        ctx.config = (causal, scale, q_chunk, kv_chunk)
        return out_BHMD.to(q.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out_XMD, lse_XM = ctx.saved_tensors
        dq, dk, dv = _backward(grad_out, q, k, v, out_XMD, lse_XM, *ctx.config)
        return dq, dk, dv, None, None, None, None


def predict_mem_bytes(point: Point, options: Mapping[str, Any], device: str) -> int:
    """O(n d) copies plus a few q_chunk x kv_chunk blocks per (batch, head); never O(n^2)."""
    s = point.element_bytes
    out, grads = point.out_bytes, point.grad_bytes
    low = s < FP32_BYTES  # fp16/bf16 compute in fp32 copies and cast the results back
    c = FP32_BYTES if low else s
    bh, d = point.batch * point.heads, point.head_dim
    q_len, seq_len = point.q_len_resolved, point.seq_len
    q_chunk = min(int(options.get("q_chunk") or FALLBACK_CHUNKS[0]), q_len)
    kv_chunk = min(int(options.get("kv_chunk") or FALLBACK_CHUNKS[1]), seq_len)
    block = bh * q_chunk * kv_chunk * c  # one block of scores for every (batch, head)
    q_c, kv_c, rows_c = bh * q_len * d * c, bh * seq_len * d * c, bh * q_len * c
    # forward: the scaled q (and its fp32 cast), fp32 k/v casts, output, log-sum-exp,
    # two score blocks alive across an iteration, the block's accumulator, the output cast back
    fwd = q_c * (2 if low else 1) + (2 * kv_c if low else 0) + q_c + rows_c + 2 * block + bh * q_chunk * d * c
    fwd += out if low else 0
    if point.mode == "fwd":
        return fwd
    # backward: saved output + lse, scaled q, fp32 casts of k, v and dO, delta; then either the
    # dq/dk/dv accumulators (kept per block) with three blocks (P, dP/dS, one in flight), or, at
    # the end, those accumulators and their concatenation; the gradients cast back
    saved = q_c + rows_c + (out if low else 0)
    acc = q_c + 2 * kv_c
    bwd = saved + q_c + ((2 * kv_c + q_c) if low else 0) + rows_c + max(acc + 3 * block, 2 * acc)
    bwd += grads if low else 0
    return max(fwd, bwd)
