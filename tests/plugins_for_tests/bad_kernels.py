"""Kernels that are wrong in the ways attention kernels usually are, or that cheat a benchmark.

Each is the plain attention (`_attend`, bottom-right aligned as the contract says) with one bug:

- top_left_causal: causal aligned top-left (query i sees keys j <= i), as Hugging Face and torch's
  `is_causal` do: right only when q_len == seq_len;
- blocked_window: a window as fixed blocks of `window` keys (lucidrains' local-attention), not sliding;
- batch_offset: batch element 1 attends to batch element 0's keys and values;
- writes_input: scales q in place, then attends with scale 1 (right once; q is changed for every later call);
- cached: the first answer it computed for a shape, returned forever after;
- wrong_when_timed: right for its first calls of a shape (the warm-up and the untimed ones), then off by 1%.
"""

from __future__ import annotations

import torch

from selfattn.backends import backend

MASKS = ("causal", "window")
RIGHT_CALLS = 3  # wrong_when_timed: calls of a shape answered right before it goes wrong


def _keep(m: int, n: int, causal: bool, window: int | None, device: torch.device, *, top_left: bool = False,
          blocked: bool = False) -> torch.Tensor:
    p = torch.arange(m, device=device)[:, None] + (0 if top_left else n - m)  # query i's position
    j = torch.arange(n, device=device)[None, :]
    keep = torch.ones(m, n, dtype=torch.bool, device=device)
    if causal:
        keep &= j <= p
    if window is not None:
        keep &= (p // window == j // window) if blocked else ((p - j < window) & ((j - p < window) | causal))
    return keep


def _attend(q, k, v, scale, keep):
    k, v = (t.repeat_interleave(q.shape[1] // k.shape[1], 1) for t in (k, v))
    s = torch.einsum("bhmd,bhnd->bhmn", q, k) * scale
    s = s.masked_fill(~keep, float("-inf"))
    w = torch.nan_to_num(s.softmax(-1))  # a row that sees no key: zeros
    return torch.einsum("bhmn,bhnd->bhmd", w, v)


@backend(masks=MASKS, kernel_label="top-left-causal")
def top_left_causal(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    return _attend(q, k, v, scale, _keep(q.shape[2], k.shape[2], causal, window, q.device, top_left=True))


@backend(masks=MASKS, kernel_label="blocked-window")
def blocked_window(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    return _attend(q, k, v, scale, _keep(q.shape[2], k.shape[2], causal, window, q.device, blocked=True))


@backend(masks=MASKS, kernel_label="batch-offset")
def batch_offset(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    keep = _keep(q.shape[2], k.shape[2], causal, window, q.device)
    if q.shape[0] > 1:  # element 1 reads element 0's keys and values
        k, v = torch.cat([k[:1], k[:1], k[2:]]), torch.cat([v[:1], v[:1], v[2:]])
    return _attend(q, k, v, scale, keep)


@backend(masks=MASKS, backward=False, kernel_label="writes-input")
def writes_input(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    q.mul_(scale)  # "saves a multiply": every later call (and anything else reading q) sees a scaled q
    return _attend(q, k, v, 1.0, _keep(q.shape[2], k.shape[2], causal, window, q.device))


_CACHE: dict[tuple, torch.Tensor] = {}


@backend(masks=MASKS, backward=False, kernel_label="cached")
def cached(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    key = (tuple(q.shape), tuple(k.shape), q.dtype, causal, window)
    if key not in _CACHE:
        _CACHE[key] = _attend(q, k, v, scale, _keep(q.shape[2], k.shape[2], causal, window, q.device))
    return _CACHE[key]


_CALLS: dict[tuple, int] = {}


@backend(masks=MASKS, backward=False, kernel_label="wrong-when-timed")
def wrong_when_timed(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    key = (tuple(q.shape), tuple(k.shape), q.dtype, causal, window)
    _CALLS[key] = _CALLS.get(key, 0) + 1
    out = _attend(q, k, v, scale, _keep(q.shape[2], k.shape[2], causal, window, q.device))
    return out if _CALLS[key] <= RIGHT_CALLS else out * 1.01
