"""Seeded inputs: CPU points draw on the host exactly as every earlier sweep did; GPU points draw
on their device (same distribution, not the same values), so no point waits on one host thread."""

from __future__ import annotations

import pytest
import torch

import selfattn.inputs as inputs
from selfattn.inputs import make_qkv, make_x


def _host_stream(seed: int, *shapes: tuple[int, ...]) -> list[torch.Tensor]:
    """The values earlier sweeps used: float64 from one host generator, q then k then v."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    return [torch.randn(shape, generator=generator, dtype=torch.float64) for shape in shapes]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64],
                         ids=["fp32", "bf16", "fp16", "fp64"])
def test_cpu_inputs_are_bit_identical_to_the_host_float64_draw(dtype):
    q, k, v = make_qkv(2, 4, 5, 7, 8, dtype=dtype, std=3.0, seed=11, kv_heads=2)
    expected = _host_stream(11, (2, 4, 5, 8), (2, 2, 7, 8), (2, 2, 7, 8))
    for got, want in zip((q, k, v), expected):
        assert torch.equal(got, (want * 3.0).to(dtype))  # not approx: the default sweep's rows stay the same
    (x,) = _host_stream(5, (2, 6, 16))
    assert torch.equal(make_x(2, 6, 16, dtype=dtype, seed=5), x.to(dtype))


def test_device_draw_is_float32_from_the_devices_generator(monkeypatch):
    # The GPU path, exercised on a CPU: draws_on_host says no, so the generator and the draw are the
    # device path's (float32, in place), while the tensors stay on the CPU where the test can read them.
    monkeypatch.setattr(inputs, "draws_on_host", lambda device: False)
    q32, k32, _ = make_qkv(1, 2, 4, 6, 8, dtype=torch.float32, std=2.0, seed=3)
    generator = torch.Generator(device="cpu").manual_seed(3)
    assert torch.equal(q32, torch.randn((1, 2, 4, 8), generator=generator, dtype=torch.float32) * 2.0)
    # every precision of a seed sees the same values up to rounding (all drawn in float32) ...
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        q, k, _ = make_qkv(1, 2, 4, 6, 8, dtype=dtype, std=2.0, seed=3)
        assert q.dtype == dtype and torch.equal(q, q32.to(dtype)) and torch.equal(k, k32.to(dtype))
    # ... and the same distribution as the host draw, not its values (the documented choice)
    monkeypatch.undo()
    host_q, _, _ = make_qkv(1, 2, 4, 6, 8, dtype=torch.float32, std=2.0, seed=3)
    assert not torch.equal(host_q, q32)


def test_generator_is_the_host_one_for_a_cpu():
    assert inputs.generator_for("cpu", 1).device.type == "cpu" and inputs.draws_on_host("cpu")
    assert not inputs.draws_on_host("cuda")  # decided by the device's type, no GPU needed


@pytest.mark.gpu
def test_gpu_inputs_are_drawn_on_the_device_fast_and_reproducibly():
    import time

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    torch.cuda.synchronize()
    started = time.perf_counter()
    q, k, v = make_qkv(8, 32, 4, 131072, 64, dtype=torch.bfloat16, device="cuda", seed=7, kv_heads=8)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - started  # 1.3e8 values; seconds on one host thread in float64
    assert k.device.type == "cuda" and k.dtype == torch.bfloat16 and elapsed < 2.0, elapsed
    again = make_qkv(8, 32, 4, 131072, 64, dtype=torch.bfloat16, device="cuda", seed=7, kv_heads=8)
    assert all(torch.equal(a, b) for a, b in zip((q, k, v), again))
    generator = torch.Generator(device="cuda").manual_seed(7)
    expected_q = torch.randn(q.shape, generator=generator, dtype=torch.float32, device="cuda").to(torch.bfloat16)
    assert torch.equal(q, expected_q)
    small_gpu = make_qkv(1, 2, 64, 64, 64, device="cuda", seed=7)[0].cpu()
    small_cpu = make_qkv(1, 2, 64, 64, 64, seed=7)[0]
    assert not torch.equal(small_gpu, small_cpu)  # same distribution, not the same values
    assert abs(k.float().mean().item()) < 1e-3 and abs(k.float().std().item() - 1) < 1e-2
