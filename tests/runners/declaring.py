"""Path plugins that declare what they need to run (tests/runners/test_plugin_requirements_sweep.py):
`interpreted` needs TRITON_INTERPRET=1 on a CPU, `crawls` says it is far too slow to fit the budget (a call of
it would fail the test), `hinted` says honestly how fast it is."""

from __future__ import annotations

import torch

from selfattn.backends import Speed, backend


def _attend(q, k, v, scale):
    return torch.softmax((q @ k.transpose(-1, -2)) * scale, -1) @ v


@backend(masks=(), requires_env={"TRITON_INTERPRET": "1"}, requires_env_on=("cpu",))
def interpreted(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    return _attend(q, k, v, scale)


@backend(masks=(), speed={"cpu": Speed(flops_per_s=1e2)})
def crawls(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    raise AssertionError("called although its declared speed cannot fit max_point_s")


@backend(masks=(), speed={"cpu": Speed(flops_per_s=1e9, fixed_s=0.001)})
def hinted(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    return _attend(q, k, v, scale)
