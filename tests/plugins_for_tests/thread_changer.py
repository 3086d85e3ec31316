"""A back end that computes the right answer on one intra-op thread, whatever the sweep set: its timed calls run on
fewer threads than the other back ends' of the same table (the end table must say so, tests/measure/test_threads_sweep.py)."""

from __future__ import annotations

import torch

from plugins_for_tests.bad_kernels import MASKS, _attend, _keep
from selfattn.backends import backend


@backend(masks=MASKS, backward=False, kernel_label="one-thread")
def one_thread(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    torch.set_num_threads(1)  # the harness puts the count back after the point and records what the calls ran on
    return _attend(q, k, v, scale, _keep(q.shape[2], k.shape[2], causal, window, q.device))
