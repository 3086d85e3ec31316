"""Every private torch name the harness still uses, each in this one module, behind a check of the torch releases
it was written for and of the name's presence. Where either check fails the function returns None (or False),
and its caller takes the public way or says "unknown": never a number or a label from internals that moved.

| private use | caller | written for | where it fails |
|---|---|---|---|
| `torch._fused_sdp_choice` (the kernel SDPA's dispatch picks) | `sdpa.kernel_ran` | 2.4 - 2.13 | kernel "auto:unknown" |
| the rules of `CausalBias`'s dispatch, mirrored through the public `torch.backends.cuda` checks | `sdpa.kernel_ran` | 2.4 - 2.13 | kernel "auto:unknown" |
| `torch._dynamo.utils.counters` (graphs dynamo compiled) | `compile.graphs_compiled` | 2.4 - 2.13 | graphs counted per new input signature of a compiled function |
| `torch._dynamo.config`'s `cache_size_limit` names, before `torch.compiler.config` had `recompile_limit` | `compile.configure` | 2.4 - 2.6 | dynamo's own limits |
| `torch.utils._triton.has_triton` (triton usable with this torch) | `flex`'s availability | 2.4 - 2.13 | triton importable |
| `Tensor._version` (the in-place counter) | `selfattn.masks` | 2.4 - 2.13 | no version: the check is skipped |
| the profiler's `kineto_results.events()` and its events' `name`, `start_ns`, `nbytes` (undocumented) | `measure.memory.alloc_peak_bytes` | 2.4 - 2.13 | no `peak_alloc_bytes` (None), never a guess |
| `torch._scaled_mm` (FP8 products; `torch.nn.functional.scaled_mm` takes scale recipes, not yet ported) | `selfattn.fp8_mm` | 2.4 - 2.13 | fp8_matmul=auto runs dequant; scaled_mm is an `unsupported` row |

Not here: `selfattn/layer.py` overrides `nn.Module._apply`, the hook every `.to()` goes through, so that a
layer's position tables are computed afresh in the new dtype (tests/test_positions.py checks it); an override
cannot fall back, and a torch without the hook would fail those tests, not measure wrongly.

`CHECKED` is the newest torch these were checked against: a newer torch takes the fallbacks until someone checks
again and moves it (tests/test_torch_private.py runs each fallback).
"""

from __future__ import annotations

import importlib.util
import re
from typing import Any, Callable

import torch

FIRST = (2, 4)  # the oldest torch these were written for (pyproject.toml's floor, 2.13, promises no older)
CHECKED = (2, 13)  # the newest torch every private use here was checked against
LEGACY_DYNAMO_LAST = (2, 6)  # the last torch whose dynamo limits are named cache_size_limit alone


def torch_version() -> tuple[int, int]:
    """This torch's (major, minor), from its version text ("2.13.0+cpu", "2.14.0a0+git...")."""
    found = re.match(r"(\d+)\.(\d+)", str(torch.__version__))
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def written_for(first: tuple[int, int] = FIRST, last: tuple[int, int] = CHECKED) -> bool:
    """Whether this torch is within the releases a private use was written for (both ends included)."""
    return first <= torch_version() <= last


def fused_sdp_choice(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs: Any) -> int | None:
    """The SDPBackend value SDPA's dispatch picks for these inputs (`torch._fused_sdp_choice`), or None."""
    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is None or not written_for():
        return None
    return int(choose(q, k, v, **kwargs))


def causal_bias_rules(causal_bias: Any) -> bool:
    """Whether CausalBias's dispatch (module torch.nn.attention.bias, given) decides as `sdpa._causal_bias_kernel`
    mirrors it: flash when `can_use_flash_attention` takes the inputs without a mask, else efficient, else a
    materialized mask; the checks are the names that module imports from torch.backends.cuda."""
    return written_for() and all(hasattr(causal_bias, name) for name in
                                 ("CausalBias", "SDPAParams", "can_use_flash_attention", "can_use_efficient_attention"))


def graphs_compiled() -> int | None:
    """Graphs dynamo has compiled in this process (its `unique_graphs` counter), or None."""
    if not written_for():
        return None
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except (ImportError, AttributeError, KeyError, TypeError):
        return None


def legacy_dynamo_config() -> Any | None:
    """torch._dynamo.config on a torch whose limits are `cache_size_limit`, `accumulated_cache_size_limit` and
    `fail_on_cache_limit_hit` (before torch.compiler.config named them recompile_*), or None."""
    if not written_for(FIRST, LEGACY_DYNAMO_LAST):
        return None
    try:
        import torch._dynamo.config as config
    except ImportError:
        return None
    return config if hasattr(config, "cache_size_limit") else None


def has_triton() -> bool:
    """Whether triton can run with this torch: torch's own check where it has it, else whether it imports."""
    check: Callable[[], bool] | None = None
    if written_for():
        try:
            from torch.utils._triton import has_triton as check
        except ImportError:
            check = None
    if check is not None:
        return bool(check())
    return importlib.util.find_spec("triton") is not None


def tensor_version(t: torch.Tensor) -> int | None:
    """The tensor's in-place version counter, or None (inference tensors have none; a torch without it)."""
    if not written_for():
        return None
    try:
        return int(t._version)
    except (RuntimeError, AttributeError):
        return None


def has_scaled_mm() -> bool:
    """Whether `torch._scaled_mm` is here as the FP8 products call it (a, b, scale_a, scale_b, out_dtype=)."""
    return written_for() and callable(getattr(torch, "_scaled_mm", None))


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
              out_dtype: torch.dtype) -> torch.Tensor:
    """`torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=...)`; callers first ask `has_scaled_mm`."""
    return torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=out_dtype)


def memory_events(prof: Any) -> list[tuple[int, int]] | None:
    """(start ns, bytes: + allocated, - freed) of each memory event a finished
    `torch.autograd.profiler.profile(profile_memory=True)` recorded, in time order; None where its results
    are not kept as written for."""
    if not written_for():
        return None
    try:
        events = prof.kineto_results.events()
        return sorted(((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]"), key=lambda d: d[0])
    except AttributeError:
        return None
