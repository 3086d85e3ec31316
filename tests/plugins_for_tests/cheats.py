"""Kernels that game a benchmark's timer rather than compute faster, each an answer to a harness check.

All compute the plain attention of bad_kernels.py (`_attend`) when they compute at all:

- memo_identity: memoized on its inputs' identity (data_ptr, _version, shape): always right, recomputes only for
  new or written tensors; a timer that reuses unchanged tensors times a dict lookup;
- memo_fingerprint: memoized on a fingerprint of the values (a hash of their bytes): always right;
- pointer_cache: memoized on the data pointers alone: stale as soon as the values change in place;
- right_first_call: right on the first call of each input tensor (by identity), then off by 1%;
- precomputed: its first answer forever, whatever the inputs (a lookup far below the device's floor);
- sleeper: the right answer, computed every call, then a sleep (slow on purpose, and idle while it waits);
- precomputed_sleeper: its first answer forever, with a sleep that lifts its time above the floor;
- last_row_bug: the right answer but the last query row (a boundary store that drops the tail block's last row).
- bshd_pointer_cache, bshd_plain: pointer_cache and the plain attention on (B, S, H, D) inputs (converted copies).
"""

from __future__ import annotations

import hashlib
import time

import torch

from plugins_for_tests.bad_kernels import MASKS, _attend, _keep
from selfattn.backends import backend

SLEEP_S = 0.05  # the sleepers' sleep per call: far longer than their computation at the tests' sizes

_MEMO: dict[tuple, torch.Tensor] = {}


def _compute(q, k, v, causal, window, scale):
    return _attend(q, k, v, scale, _keep(q.shape[2], k.shape[2], causal, window, q.device))


def _identity(t: torch.Tensor) -> tuple:
    return (t.data_ptr(), t._version, tuple(t.shape), t.dtype)


@backend(masks=MASKS, backward=False, kernel_label="memo-identity")
def memo_identity(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    key = ("identity", *(_identity(t) for t in (q, k, v)), causal, window, scale)
    if key not in _MEMO:
        _MEMO.clear()  # one entry: a cache, not a leak
        _MEMO[key] = _compute(q, k, v, causal, window, scale)
    return _MEMO[key]


def _fingerprint(t: torch.Tensor) -> str:
    return hashlib.blake2b(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes(), digest_size=16).hexdigest()


@backend(masks=MASKS, backward=False, kernel_label="memo-fingerprint")
def memo_fingerprint(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    key = ("fingerprint", *(_fingerprint(t) for t in (q, k, v)), causal, window, scale)
    if key not in _MEMO:
        _MEMO.clear()
        _MEMO[key] = _compute(q, k, v, causal, window, scale)
    return _MEMO[key]


@backend(masks=MASKS, backward=False, kernel_label="pointer-cache")
def pointer_cache(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    key = ("pointer", q.data_ptr(), k.data_ptr(), v.data_ptr(), tuple(q.shape), causal, window)
    if key not in _MEMO:
        _MEMO[key] = _compute(q, k, v, causal, window, scale)
    return _MEMO[key]


_SEEN: set[int] = set()


@backend(masks=MASKS, backward=False, kernel_label="right-first-call")
def right_first_call(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    out = _compute(q, k, v, causal, window, scale)
    if id(q) in _SEEN:
        return out * 1.01
    _SEEN.add(id(q))
    return out


_FIRST: dict[tuple, torch.Tensor] = {}


def _first_answer(q, k, v, causal, window, scale) -> torch.Tensor:
    key = (tuple(q.shape), tuple(k.shape), q.dtype, causal, window)
    if key not in _FIRST:
        _FIRST[key] = _compute(q, k, v, causal, window, scale)
    return _FIRST[key]


@backend(masks=MASKS, backward=False, kernel_label="precomputed")
def precomputed(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    return _first_answer(q, k, v, causal, window, scale)


@backend(masks=MASKS, backward=False, kernel_label="sleeper")
def sleeper(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # its computation small beside its sleep even where a busy machine's threads collapse
    try:
        out = _compute(q, k, v, causal, window, scale)
    finally:
        torch.set_num_threads(threads)
    time.sleep(SLEEP_S)
    return out


@backend(masks=MASKS, backward=False, kernel_label="precomputed-sleeper")
def precomputed_sleeper(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    time.sleep(SLEEP_S)
    return _first_answer(q, k, v, causal, window, scale)


@backend(masks=MASKS, backward=False, kernel_label="last-row-bug")
def last_row_bug(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    out = _compute(q, k, v, causal, window, scale)
    out[:, :, -1] = 0  # the tail block's last row never stored
    return out


@backend(masks=MASKS, backward=False, layout="BSHD", kernel_label="bshd-pointer-cache")
def bshd_pointer_cache(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    """pointer_cache on (B, S, H, D) inputs: the harness hands it converted copies, which the refresh must reach."""
    key = ("bshd", q.data_ptr(), k.data_ptr(), v.data_ptr(), tuple(q.shape), causal, window)
    if key not in _MEMO:
        q_, k_, v_ = (t.transpose(1, 2) for t in (q, k, v))
        _MEMO[key] = _compute(q_, k_, v_, causal, window, scale).transpose(1, 2).contiguous()
    return _MEMO[key]


@backend(masks=MASKS, backward=False, layout="BSHD", kernel_label="bshd-plain")
def bshd_plain(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    q_, k_, v_ = (t.transpose(1, 2) for t in (q, k, v))
    return _compute(q_, k_, v_, causal, window, scale).transpose(1, 2)
