"""No host-device sync inside a timed call.

A call that reads a tensor's value on the host (`bool(t)`, `.item()`, `.tolist()`, a copy to the
CPU) waits on a GPU for every kernel queued before it, so the timer would measure the queue's
drain as well. The back ends' Python-side decisions (rows that see no key, chunked's block plan,
flex's block-mask key) and the mask checks are made once per workload (Masks.decision, `prepare`,
the workload's checked call), before the timed calls. These tests build a point's workload the
way measure_point does (build, prepare, the warm-up call) and then count what one timed call does:

- on any machine, with every tensor-to-Python conversion patched to raise (a CPU run has no
  device queue, so the conversions that would sync a GPU are what can be seen there);
- on CUDA (@pytest.mark.gpu), with torch.cuda.set_sync_debug_mode("error"), which raises on
  every synchronizing CUDA call (stream syncs, blocking copies, .item()).
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

from selfattn import Point
from selfattn.backends import get_backend
from selfattn.backends.capability import unavailable
from selfattn.backends.resolved import resolve_point
from selfattn.measure.workload import build
from selfattn.precision import resolve_dtype

SMALL = dict(heads=2, seq_len=96, head_dim=16)
CHUNKS = {"chunked": {"q_chunk": 32, "kv_chunk": 16}}  # several blocks at this size, some partial
MASKS = {  # mask kinds: each reaches another Python-side decision
    "causal": dict(causal=True),
    "window": dict(window=8),
    "pad-causal": dict(causal=True, window=4, pad_frac=0.5, batch=2),  # some rows see no key
    "docs": dict(documents=3, batch=2),
}


@pytest.fixture(autouse=True)
def _chunked_exact_step_as_on_a_gpu(monkeypatch):
    """chunked's lazy rescaling runs on a CPU only and reads each key block's sums there by design (a CPU
    has no device queue to wait on; tests/backends/test_chunked_blocks.py checks it never runs elsewhere).
    A GPU call takes the exact step: these CPU runs check that path."""
    from selfattn.backends import chunked

    monkeypatch.setattr(chunked, "_lazy_rescale", lambda *args: False)


class HostRead(AssertionError):
    """A timed call read a tensor's value on the host."""


_CONVERSIONS = ("item", "tolist", "numpy", "__array__", "__bool__", "__int__", "__float__", "__index__")


def _names_cpu(args, kwargs) -> bool:
    targets = [kwargs.get("device"), *args[:1]]
    return any(isinstance(t, (str, torch.device)) and torch.device(t).type == "cpu" for t in targets)


@contextmanager
def no_host_reads():
    """Every tensor-to-Python conversion raises HostRead, and so do .cpu() and a .to() that names the
    CPU and makes a new tensor (on a CPU, .to(the same device, the same dtype) is the tensor itself)."""
    saved = {name: getattr(torch.Tensor, name) for name in (*_CONVERSIONS, "cpu", "to")}

    def refuse(name):
        def method(self, *args, **kwargs):
            raise HostRead(f"Tensor.{name} inside a timed call")
        return method

    real_to = saved["to"]

    def to(self, *args, **kwargs):
        out = real_to(self, *args, **kwargs)
        if out is not self and _names_cpu(args, kwargs):
            raise HostRead(f"Tensor.to({args}, {kwargs}) inside a timed call: a copy to the host")
        return out

    try:
        for name in (*_CONVERSIONS, "cpu"):
            setattr(torch.Tensor, name, refuse(name))
        torch.Tensor.to = to
        yield
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)


def _prepared_call(point: Point, device: str):
    """The point's timed call, after what measure_point runs before timing: build, prepare, warm-up."""
    q_len = point.q_len_resolved
    rows = torch.arange(0, q_len, max(1, q_len // 8))
    workload = build(point, resolve_dtype(point.precision, device), torch.device(device), rows,
                     resolved=resolve_point(point, device))
    workload.prepare()
    workload.check_call()
    return workload.call


def _point(backend: str, mode: str, masks: str, **fields) -> Point:
    return Point(backend=backend, mode=mode, backend_options=CHUNKS.get(backend, {}), **{**SMALL, **MASKS[masks], **fields})


def test_the_guard_sees_a_host_read():  # the negative control: each kind of read is caught
    t = torch.arange(4)
    for read in (lambda: bool((t > 2).any()), lambda: t.tolist(), lambda: t.sum().item(), lambda: int(t[0]),
                 lambda: t.numpy(), lambda: t.to("cpu", torch.int32), lambda: t.cpu()):
        with no_host_reads(), pytest.raises(HostRead):
            read()
    with no_host_reads():  # what a call may do: ops that stay tensors, a .to() that changes nothing
        assert (t.to(device=t.device, dtype=t.dtype) is t) and ((t > 2).any().shape == ())


@pytest.mark.parametrize("masks", list(MASKS))
@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
@pytest.mark.parametrize("backend", ["naive", "sdpa", "chunked"])
def test_a_timed_core_call_reads_nothing_on_the_host(backend, mode, masks):
    call = _prepared_call(_point(backend, mode, masks), "cpu")
    with no_host_reads():
        call()


@pytest.mark.parametrize("backend", ["naive", "sdpa", "chunked"])
@pytest.mark.parametrize("scope", ["layer", "generate"])
def test_a_timed_layer_or_generation_call_reads_nothing_on_the_host(backend, scope):
    fields = dict(new_tokens=3, kv_cache=False) if scope == "generate" else {}
    call = _prepared_call(_point(backend, "fwd", "causal", scope=scope, **fields), "cpu")
    with no_host_reads():
        call()


@pytest.mark.parametrize("masks", ["pad-causal", "docs"])  # padding and documents: the digest's case
def test_a_timed_flex_call_reads_nothing_on_the_host(masks):
    if unavailable(get_backend("flex"), "cpu"):
        pytest.skip("flex cannot run on this CPU (no C++ compiler)")
    call = _prepared_call(_point("flex", "fwd", masks), "cpu")
    with no_host_reads():
        call()


def test_without_the_prepared_decisions_the_guard_fires():
    # the negative control on a real call: the same masks, but a fresh Masks each call as selfattn.attention
    # makes them, so the empty-rows decision is read from tensors inside the call
    import selfattn

    q, k, v = selfattn.make_qkv(2, 2, 32, 32, 16, seed=0)
    with no_host_reads(), pytest.raises(HostRead):
        with torch.no_grad():
            selfattn.attention(q, k, v, backend="naive", causal=True, key_lengths=torch.tensor([32, 7]))


# every eager back end, mode and mask kind (milliseconds each); flex once, on documents (the digest's case): a cold
# flex compile on CUDA takes 10-40 s
CUDA_CASES = [(backend, mode, masks) for backend in ("naive", "sdpa", "chunked") for mode in ("fwd", "fwd_bwd")
              for masks in MASKS] + [("flex", "fwd", "docs")]


@pytest.mark.gpu
@pytest.mark.parametrize("backend,mode,masks", CUDA_CASES, ids=["-".join(c) for c in CUDA_CASES])
def test_a_timed_cuda_call_does_not_synchronize(backend, mode, masks):
    if unavailable(get_backend(backend), "cuda"):
        pytest.skip(f"{backend} cannot run on this GPU")
    call = _prepared_call(_point(backend, mode, masks, precision="bf16" if backend == "flex" else "fp32"), "cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        call()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
