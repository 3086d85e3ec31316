"""The package's public contracts: registry, option resolution, labels, precisions, inputs,
the reference's row sampling and the sdpa back end's refusal to fall back silently."""

from __future__ import annotations

import pytest
import torch

import selfattn
from selfattn import backends
from selfattn.errors import Unsupported
from selfattn.inputs import make_qkv, make_x
from selfattn.masks import Masks
from selfattn.precision import PRECISIONS, precision_context, resolve_dtype
from selfattn.backends.capability import Ask
from selfattn.backends.resolved import resolve


def _resolved(name, options=None, device="cpu", dtype=torch.float32):
    """The back end `name` with `options`, resolved for a call on `device` in `dtype` (the one resolver)."""
    return resolve(name, options, Ask(torch.device(device).type, "fp32"), dtype, device=device)



def test_registry_is_a_plain_dict_of_the_five_backends():
    assert isinstance(backends.BACKENDS, dict)
    assert list(backends.BACKENDS) == ["naive", "sdpa", "chunked", "flex", "triton"]
    # flex needs a C++ compiler on a CPU (this machine and CI have one); triton runs on a CPU only in its
    # interpreter (TRITON_INTERPRET=1), and says why not otherwise
    from selfattn.backends.capability import unavailable

    why = unavailable(backends.get_backend("triton"), "cpu")
    on_cpu = ["triton"] if why is None else []
    # (installed plugins, entry points of `selfattn.backends`, follow the built-ins)
    assert backends.available_backends("cpu")[:4 + len(on_cpu)] == ["naive", "sdpa", "chunked", "flex", *on_cpu]
    if not on_cpu:
        assert "TRITON_INTERPRET=1" in why or "not installed" in why
    assert selfattn.BACKENDS is backends.BACKENDS


def test_default_options_are_resolved():
    fp8_off = {"fp8": "none", "fp8_scaling": "tensor", "fp8_block": 64, "p_scale": 256.0, "hadamard": False,
               "fp8_matmul": "auto"}
    assert _resolved("naive", {}, "cpu", torch.float32).options == {"upcast_softmax": False, "scale_at": "logits",
                                                                       "compile": False, **fp8_off}
    assert _resolved("sdpa", {}, "cpu", torch.float32).options == {"kernel": "auto", "bool_mask": False}
    chunked = _resolved("chunked", {}, "cpu", torch.float32).options
    assert set(chunked) == {"q_chunk", "kv_chunk", "compute", "compile", *fp8_off} and chunked["compute"] == "fp32"
    assert _resolved("flex", {}, "cpu", torch.float32).options == {}
    assert chunked["q_chunk"] is None and chunked["kv_chunk"] is None  # auto: sized to each call's masks


def test_kernel_labels():
    assert _resolved("naive", {}).label == "materialized"
    assert _resolved("naive", {"upcast_softmax": True}).label == "materialized-upcast"
    assert _resolved("sdpa", {}).label == "auto"
    assert _resolved("sdpa", {"kernel": "flash"}).label == "flash"
    assert _resolved("chunked", {"q_chunk": 64, "kv_chunk": 96}).label == "q64-kv96"
    assert _resolved("chunked", {"kv_chunk": 96}).label == "qauto-kv96"
    assert _resolved("chunked", {}).label == "auto"  # the sizes that ran: kernel_ran, below


@pytest.mark.parametrize("kernel", ["efficient", "cudnn"])
def test_forced_sdpa_kernel_that_cannot_run_raises_unsupported(kernel):
    if torch.cuda.is_available():
        pytest.skip("these kernels may run on CUDA")
    q, k, v = make_qkv(1, 2, 8, 8, 16)
    with pytest.raises(Unsupported, match=f"kernel={kernel}"):
        selfattn.attention(q, k, v, backend="sdpa", kernel=kernel)


def test_precisions():
    assert PRECISIONS == ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2")
    assert resolve_dtype("fp8_e4m3", "cpu") is torch.float8_e4m3fn
    assert resolve_dtype("fp16", "cpu") is torch.float16
    assert resolve_dtype("bf16", "cpu") is torch.bfloat16
    with pytest.raises(Unsupported, match="tf32"):
        resolve_dtype("tf32", "cpu")
    with pytest.raises(ValueError, match="^precision:"):
        resolve_dtype("fp8", "cpu")


def test_precision_context_sets_and_restores_tf32_flags():
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        with precision_context("fp32", "cpu") as dtype:
            assert dtype is torch.float32
            assert torch.backends.cuda.matmul.allow_tf32 is False
            assert torch.backends.cudnn.allow_tf32 is False
        assert torch.backends.cuda.matmul.allow_tf32 is True
        with pytest.raises(Unsupported):
            with precision_context("tf32", "cpu"):
                pass
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@pytest.mark.gpu
def test_precision_context_enables_tf32_on_cuda():
    with precision_context("tf32", "cuda") as dtype:
        assert dtype is torch.float32 and torch.backends.cuda.matmul.allow_tf32


def test_inputs_same_seed_same_values_across_dtypes():
    q64, k64, v64 = make_qkv(1, 2, 5, 6, 8, dtype=torch.float64, seed=11)
    q16, k16, v16 = make_qkv(1, 2, 5, 6, 8, dtype=torch.bfloat16, seed=11)
    for a, b in ((q64, q16), (k64, k16), (v64, v16)):
        torch.testing.assert_close(a.to(torch.bfloat16), b, atol=0, rtol=0)
    q_other, _, _ = make_qkv(1, 2, 5, 6, 8, dtype=torch.float64, seed=12)
    assert not torch.equal(q64, q_other)
    assert not torch.equal(q64, k64[:, :, :5])  # q, k, v are distinct draws


def test_inputs_std_and_grad_flag():
    q, k, v = make_qkv(1, 4, 512, 512, 64, std=3.0, seed=0, requires_grad=True)
    assert q.requires_grad and k.is_leaf
    assert abs(q.std().item() - 3.0) < 0.05
    x = make_x(2, 9, 16, dtype=torch.float16, std=0.5, seed=1)
    assert x.shape == (2, 9, 16) and x.dtype == torch.float16 and not x.requires_grad
    before = torch.random.get_rng_state()
    make_x(1, 2, 3)
    assert torch.equal(before, torch.random.get_rng_state())  # the global RNG is untouched


def test_reference_rows_match_full_reference():
    q, k, v = make_qkv(1, 2, 40, 57, 16, dtype=torch.float32)
    rows = torch.tensor([0, 3, 39])
    for causal in (False, True):
        full = selfattn.attention_reference(q, k, v, causal=causal)
        assert full.dtype == torch.float64
        torch.testing.assert_close(selfattn.attention_reference(q, k, v, causal=causal, rows=rows), full[:, :, rows])


def test_causal_mask_is_bottom_right_aligned():
    causal = Masks(causal=True)
    assert causal.keep(2, 4)[0].tolist() == [[True, True, True, False], [True, True, True, True]]
    assert causal.keep(3, 3)[0].tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    assert causal.keep(2, 4, rows=torch.tensor([1]))[0].tolist() == [[True, True, True, True]]


def test_layer_is_reproducible_and_backend_independent():
    x = make_x(2, 19, 32, seed=3, dtype=torch.float64)
    layers = {
        name: selfattn.MultiHeadSelfAttention(32, 4, backend=name, causal=True).double() for name in backends.BACKENDS
        if name not in ("flex", "triton")  # flex: no fp64 on a CPU, compared in fp32 below; triton: no fp64 at all
        # (tests/backends/test_triton.py runs it on a CPU, in triton's interpreter)
    }
    outs = {name: layer(x) for name, layer in layers.items()}
    assert outs["naive"].shape == (2, 19, 32)
    for out in outs.values():
        torch.testing.assert_close(out, outs["naive"])
    flex = selfattn.MultiHeadSelfAttention(32, 4, backend="flex", causal=True)
    with torch.no_grad():
        torch.testing.assert_close(flex(x.float()).double(), outs["naive"], atol=1e-5, rtol=0)
    layer = layers["naive"]
    layer.reset_parameters(seed=0)  # in float64 now: .double() above only widened fp32 values
    w = layer.w_q.weight.detach().clone()
    layer.reset_parameters(seed=1)
    assert not torch.equal(w, layer.w_q.weight)
    layer.reset_parameters(seed=0)
    assert torch.equal(w, layer.w_q.weight)


def test_layer_backward_with_chunked_matches_naive():
    """Gradients reach the input and every projection through chunked's own backward."""
    grads = {}
    for backend, options in (("chunked", {"q_chunk": 4, "kv_chunk": 5}), ("naive", {})):
        layer = selfattn.MultiHeadSelfAttention(16, 2, backend=backend, bias=True, causal=True, **options).double()
        layer.reset_parameters(seed=0)
        x = make_x(1, 11, 16, dtype=torch.float64, seed=2, requires_grad=True)
        layer(x).square().sum().backward()
        grads[backend] = [x.grad] + [p.grad for p in (layer.w_q.weight, layer.w_k.weight, layer.w_v.bias, layer.w_o.weight)]
    assert all(g.abs().sum() > 0 for g in grads["naive"])
    for got, want in zip(grads["chunked"], grads["naive"]):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0)


def test_chunked_head_parallel_path_matches_serial_and_restores_threads():
    """With >1 intra-op thread chunked runs head groups in worker threads; same numbers, and the
    caller's thread count is restored afterwards (the timer relies on it)."""
    q, k, v = make_qkv(1, 5, 33, 47, 16, dtype=torch.float64, requires_grad=True)
    before = torch.get_num_threads()
    try:
        results = {}
        for threads in (1, 3):
            torch.set_num_threads(threads)
            out = selfattn.attention(q, k, v, backend="chunked", causal=True, q_chunk=8, kv_chunk=12)
            results[threads] = (out, *torch.autograd.grad(out.sum(), (q, k, v)))
            assert torch.get_num_threads() == threads
        for a, b in zip(results[1], results[3]):
            torch.testing.assert_close(a, b, atol=1e-14, rtol=0)
    finally:
        torch.set_num_threads(before)


def test_chunked_head_groups_run_on_workers_unless_head_threads_is_1(monkeypatch):
    """One head group per intra-op thread, each on a worker; HEAD_THREADS = 1 (what a
    TorchDispatchMode needs to see every op) keeps the single call on the calling thread."""
    import threading

    from selfattn.backends import chunked, chunked_pool

    calls = []
    real = chunked._forward_flat

    def recording(q_XMD, *rest):
        calls.append((threading.get_ident(), q_XMD.shape[0]))
        return real(q_XMD, *rest)

    monkeypatch.setattr(chunked, "_forward_flat", recording)
    q, k, v = make_qkv(2, 3, 20, 20, 8, dtype=torch.float64)  # 6 flattened heads
    before = torch.get_num_threads()
    try:
        results = {}
        for threads in (2, 3):
            torch.set_num_threads(threads)
            calls.clear()
            results[threads] = selfattn.attention(q, k, v, backend="chunked", q_chunk=8, kv_chunk=8)
            assert sorted(size for _, size in calls) == [6 // threads] * threads
            assert threading.get_ident() not in {ident for ident, _ in calls}
            assert chunked_pool._pool_workers >= threads  # the pool grew to the request
        monkeypatch.setattr(chunked_pool, "HEAD_THREADS", 1)
        calls.clear()
        serial = selfattn.attention(q, k, v, backend="chunked", q_chunk=8, kv_chunk=8)
        assert calls == [(threading.get_ident(), 6)]
        torch.testing.assert_close(results[2], serial, atol=1e-14, rtol=0)
        torch.testing.assert_close(results[3], serial, atol=1e-14, rtol=0)
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_chunked_works_in_a_forked_child():
    """The worker pool does not survive fork(); the child must start its own, not hang."""
    import os

    q, k, v = make_qkv(1, 4, 100, 100, 16)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        expected = selfattn.attention(q, k, v, backend="chunked", q_chunk=32, kv_chunk=32)
        pid = os.fork()
        if pid == 0:  # child: exit code says whether the result matched
            got = selfattn.attention(q, k, v, backend="chunked", q_chunk=32, kv_chunk=32)
            os._exit(0 if torch.equal(got, expected) else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        torch.set_num_threads(before)


def test_naive_scale_at_query_keeps_fp16_finite_where_the_chapters_order_overflows():
    # d_k = 1024, inputs of std 32: Q K^T has std 32^2 * 32 = 32768, so its tail passes 65504 before
    # the chapter's order divides by 32; scaling Q first keeps the product 32x smaller.
    q, k, v = selfattn.make_qkv(1, 1, 64, 64, 1024, dtype=torch.float16, std=32.0, seed=1)
    after = selfattn.attention(q, k, v, backend="naive", scale_at="logits")
    before = selfattn.attention(q, k, v, backend="naive", scale_at="query")
    assert not torch.isfinite(after).all()
    assert torch.isfinite(before).all()
    ref = selfattn.attention_reference(q, k, v)
    assert (before.double() - ref).abs().max() < 0.05  # fp16 rounding; outputs reach ~150
    assert _resolved("naive", {"scale_at": "query"}).label == "materialized-scaleq"
