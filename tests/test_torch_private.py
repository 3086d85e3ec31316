"""Each private torch use (selfattn/torch_private.py) behind its version and presence checks: the fallback runs
where the version is not one it was written for or the name is gone."""

from __future__ import annotations

import re
import types

import pytest
import torch

import selfattn
from selfattn import compile as compile_cache
from selfattn import torch_private
from selfattn.backends import sdpa
from selfattn.masks import Masks

NEWER = f"{torch_private.CHECKED[0]}.{torch_private.CHECKED[1] + 1}.0"  # a torch nobody checked these against


@pytest.fixture
def newer_torch(monkeypatch):
    monkeypatch.setattr(torch, "__version__", NEWER)


def test_the_version_is_read_from_torchs_text(monkeypatch):
    for text, version in (("2.13.0+cpu", (2, 13)), ("2.14.0a0+git1234", (2, 14)), ("2.4.1", (2, 4)), ("dev", (0, 0))):
        monkeypatch.setattr(torch, "__version__", text)
        assert torch_private.torch_version() == version
    monkeypatch.setattr(torch, "__version__", "2.4.0")
    assert torch_private.written_for() and not torch_private.written_for((2, 5), (2, 13))
    monkeypatch.setattr(torch, "__version__", NEWER)
    assert not torch_private.written_for()


def sdpa_label(masks: Masks) -> str:
    q, k, v = selfattn.make_qkv(1, 2, 24, 40 if masks.causal else 24, 16)
    return sdpa.kernel_ran(q, k, v, masks=masks, scale=0.25)


def test_sdpa_names_the_kernel_on_the_checked_torch():
    assert sdpa_label(Masks()) in ("flash", "math", "efficient", "cudnn")
    assert sdpa_label(Masks(causal=True)) in ("flash", "math", "efficient", "cudnn")  # the CausalBias path


@pytest.mark.parametrize("masks", [Masks(), Masks(causal=True)], ids=["sdpa-dispatch", "causal-bias"])
def test_sdpa_says_unknown_on_a_torch_newer_than_checked(newer_torch, masks):
    assert sdpa_label(masks) == "unknown"


def test_sdpa_says_unknown_when_the_private_choice_is_gone(monkeypatch):
    monkeypatch.delattr(torch, "_fused_sdp_choice")
    assert sdpa_label(Masks()) == "unknown"
    assert torch_private.fused_sdp_choice(*selfattn.make_qkv(1, 1, 4, 4, 8)) is None


def test_sdpa_says_unknown_when_causal_bias_moved_its_checks(monkeypatch):
    from torch.nn.attention import bias as causal_bias

    monkeypatch.delattr(causal_bias, "can_use_flash_attention")
    assert sdpa_label(Masks(causal=True)) == "unknown"


def test_dynamo_limits_are_set_through_the_public_config():
    assert compile_cache._configure() == "torch.compiler.config"
    assert torch.compiler.config.recompile_limit >= compile_cache.RECOMPILE_LIMIT
    assert torch.compiler.config.fail_on_recompile_limit_hit is True


def test_dynamo_limits_on_an_older_torch_use_its_names(monkeypatch):
    monkeypatch.setattr(torch.compiler, "config", types.SimpleNamespace())  # before it named the limits
    legacy = types.SimpleNamespace(cache_size_limit=8, accumulated_cache_size_limit=256, fail_on_cache_limit_hit=False)
    monkeypatch.setattr(torch_private, "legacy_dynamo_config", lambda: legacy)
    assert compile_cache._configure() == "torch._dynamo.config"
    assert legacy.cache_size_limit == legacy.accumulated_cache_size_limit == compile_cache.RECOMPILE_LIMIT
    assert legacy.fail_on_cache_limit_hit is True
    monkeypatch.setattr(torch_private, "legacy_dynamo_config", lambda: None)  # neither: dynamo's own limits
    assert compile_cache._configure() == ""


def test_the_legacy_dynamo_config_only_on_the_torch_it_was_written_for(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.13.0")
    assert torch_private.legacy_dynamo_config() is None
    monkeypatch.setattr(torch, "__version__", "2.5.1")
    assert torch_private.legacy_dynamo_config() is not None  # this torch still has the old names too


def test_graphs_are_counted_by_signature_without_dynamos_counter(monkeypatch):
    monkeypatch.setattr(torch_private, "graphs_compiled", lambda: None)
    monkeypatch.setattr(compile_cache, "_signatures", set())
    counted = compile_cache._Counted(lambda x, *, causal: x * 2)
    before = compile_cache.graphs_compiled()
    counted(torch.ones(3), causal=True)
    counted(torch.ones(3), causal=True)  # the same shape: no new graph
    counted(torch.ones(4), causal=True)
    counted(torch.ones(4), causal=False)
    assert compile_cache.graphs_compiled() - before == 3
    assert isinstance(compile_cache.compiled(lambda x: x + 1), compile_cache._Counted)  # wrapped, not compiled yet


def test_dynamos_counter_on_the_checked_torch_and_not_beyond(monkeypatch):
    assert isinstance(torch_private.graphs_compiled(), int)
    monkeypatch.setattr(torch, "__version__", NEWER)
    assert torch_private.graphs_compiled() is None


def test_triton_and_the_version_counter_fall_back(newer_torch):
    import importlib.util

    assert torch_private.has_triton() == (importlib.util.find_spec("triton") is not None)
    assert torch_private.tensor_version(torch.ones(2)) is None


def test_the_version_counter_on_the_checked_torch():
    t = torch.ones(2)
    before = torch_private.tensor_version(t)
    t.add_(1)
    assert torch_private.tensor_version(t) == before + 1
    with torch.inference_mode():
        assert torch_private.tensor_version(torch.ones(2)) is None


def test_fp8_products_without_the_private_scaled_mm(newer_torch):
    from selfattn import fp8

    cpu = torch.device("cpu")
    assert not torch_private.has_scaled_mm()
    assert fp8._matmul("auto", cpu) == "dequant"
    # a forced scaled_mm is refused before anything runs (capability.why_not reads this reason)
    assert re.match(r"backend\.fp8_matmul=scaled_mm: torch._scaled_mm as written for torch 2.4-2.13",
                    fp8.matmul_reason("scaled_mm", cpu))


def test_fp8_products_with_it_on_the_checked_torch():
    from selfattn import fp8

    assert torch_private.has_scaled_mm() and fp8._matmul("scaled_mm", torch.device("cpu")) == "scaled_mm"


def test_the_cpu_allocation_peak_is_none_rather_than_a_guess_on_an_unchecked_torch(monkeypatch):
    from selfattn.measure.memory import alloc_peak_bytes

    def call():
        return torch.empty(1 << 20, dtype=torch.uint8).fill_(1)

    assert alloc_peak_bytes(call) >= 1 << 20
    monkeypatch.setattr(torch, "__version__", NEWER)
    assert alloc_peak_bytes(call) is None
