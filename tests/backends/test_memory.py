"""The chunked back end's working set grows like n, not n^2, forward and backward.

Measured for real: a TorchDispatchMode sees every tensor each aten op creates (autograd's
backward ops included) and tracks the bytes of storages still alive after each op, so the
peak is the largest set of live tensors at any op boundary. A back end that materialized
the (q_len x seq_len) matrix would show it; naive is checked to show exactly that, so the
test cannot pass by the tracker seeing nothing. (The tracker sets chunked_pool.HEAD_THREADS = 1 so
the chunked back end stays on the calling thread and every op is seen; its head-parallel path
runs the same per-head code, one block per (batch, head) at a time.)
"""

from __future__ import annotations

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import selfattn
from selfattn.backends import chunked_pool
from selfattn.inputs import make_qkv


class LiveTensorPeak(TorchDispatchMode):
    """Peak bytes of live tensor storages created inside the `with` block."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.peak_bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                storage = t.untyped_storage()
                ref = StorageWeakRef(storage)
                self.live.setdefault(ref.cdata, (ref, storage.nbytes()))
        self.live = {key: entry for key, entry in self.live.items() if not entry[0].expired()}
        self.peak_bytes = max(self.peak_bytes, sum(nbytes for _, nbytes in self.live.values()))
        return out


def peak_bytes(backend: str, seq_len: int, causal: bool, mode: str, monkeypatch, **options) -> int:
    q, k, v = make_qkv(1, 2, seq_len, seq_len, 16, requires_grad=mode == "fwd_bwd")
    grad_out = torch.ones_like(q)
    # The tracker is thread-local: chunked's worker threads would hide their blocks from it
    monkeypatch.setattr(chunked_pool, "HEAD_THREADS", 1)
    with LiveTensorPeak() as tracker:
        if mode == "fwd":
            with torch.no_grad():
                selfattn.attention(q, k, v, backend=backend, causal=causal, **options)
        else:
            out = selfattn.attention(q, k, v, backend=backend, causal=causal, **options)
            out.backward(grad_out)
            del out
    return tracker.peak_bytes


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_chunked_working_set_is_linear_in_seq_len(mode, causal, monkeypatch):
    small, large = 256, 1024  # 4x the length: 4x for O(n) memory, 16x for O(n^2)
    opts = {"q_chunk": 64, "kv_chunk": 128}
    peak_small = peak_bytes("chunked", small, causal, mode, monkeypatch, **opts)
    peak_large = peak_bytes("chunked", large, causal, mode, monkeypatch, **opts)
    scores_large = 2 * large * large * 4  # one fp32 (heads x L x L) matrix
    assert peak_large / peak_small < 6, f"peak grew {peak_large / peak_small:.1f}x for 4x the length"
    assert peak_large < 0.25 * scores_large, f"peak {peak_large} bytes vs full scores {scores_large}"


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
def test_tracker_sees_naive_materialize_the_matrix(mode, monkeypatch):
    small, large = 256, 1024
    peak_small = peak_bytes("naive", small, False, mode, monkeypatch)
    peak_large = peak_bytes("naive", large, False, mode, monkeypatch)
    assert peak_large / peak_small > 10
    assert peak_large >= 2 * large * large * 4
