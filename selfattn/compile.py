"""torch.compile for the back ends: one compiled function per Python function, shared by every point.

The `flex` back end and the `compile=true` option of naive and chunked all go through `compiled`,
so the policy is one place:

- One `torch.compile` wrapper per function, made on first use and kept for the process: points of
  the same shape (and dtype, options, masks) find their compiled code in dynamo's cache instead of
  compiling again. `graphs_compiled()` counts the graphs dynamo has made, so a point can say
  whether its first call compiled (`recompiled`) or reused code.
- Static shapes by default (`dynamic=False`), as attention benchmarks compile: each new shape gets
  its own specialized graph. Dynamo then stops compiling a function after `recompile_limit` graphs
  (8 by default) and silently runs it eagerly, which a sweep over ten sizes would hit half way.
  The limits are raised to `RECOMPILE_LIMIT`, hitting one raises instead of falling back
  (`fail_on_recompile_limit_hit`; torch.compiler.config's public names, or on torch 2.4-2.6 dynamo's older
  ones: selfattn/torch_private.py), and `make_room` drops every compiled graph once a process has
  made `RESET_AFTER_GRAPHS` of them, before a point's first call, so a long sweep keeps compiling.
- Compile time is the first call's; `record_compile_s` keeps what each back end's compilations
  took in this process, and `predict_compile_s` gives the budget guard an estimate before a point
  compiles (`COMPILE_S_GUESS` until one has been measured). The guard holds it to its own limit,
  `budget.max_compile_s`, never adding it to the point's time (`max_point_s`): a guess of 60 s
  on CUDA added to a 60 s point limit skipped every compiled point, so no compile was ever
  measured to replace the guess (selfattn/measure/budget.py).
"""

from __future__ import annotations

import functools
import statistics
from typing import Any, Callable

from selfattn import torch_private

RECOMPILE_LIMIT = 1024  # per function and accumulated; far above RESET_AFTER_GRAPHS
RESET_AFTER_GRAPHS = 256  # graphs one process may hold before make_room drops them all
# Seconds one compilation is assumed to take before any was measured in this process: the high end of a
# first (cold) flex_attention compile on a small CPU; later ones are faster, inductor's on-disk cache and
# the imports warm by then. The measured compile times replace it (GPUs' triton autotuning included).
COMPILE_S_GUESS = {"cpu": 20.0, "cuda": 60.0}

LIMIT_NAMES = ("recompile_limit", "accumulated_recompile_limit", "fail_on_recompile_limit_hit")
_compile_s: dict[tuple[str, str], list[float]] = {}  # (backend, device type) -> measured compile seconds
_compiled_keys: set[Any] = set()  # what this process has compiled (see predict_compile_s)
_graphs_at_reset = 0
_signatures: set[tuple] = set()  # the signatures _Counted functions were called with (torch's counter absent)


def _configure() -> str:
    """Raise dynamo's limits (RECOMPILE_LIMIT) and make hitting one raise; returns where they were set:
    "torch.compiler.config" (public, torch >= 2.7), "torch._dynamo.config" (its older names, torch 2.4 - 2.6,
    selfattn/torch_private.py), or "" where neither is there (dynamo's own limits stay)."""
    import torch

    public = getattr(torch.compiler, "config", None)
    if public is not None and all(hasattr(public, name) for name in LIMIT_NAMES):
        public.recompile_limit = max(public.recompile_limit, RECOMPILE_LIMIT)
        public.accumulated_recompile_limit = max(public.accumulated_recompile_limit, RECOMPILE_LIMIT)
        public.fail_on_recompile_limit_hit = True  # never a silent eager fallback in a measured row
        return "torch.compiler.config"
    legacy = torch_private.legacy_dynamo_config()
    if legacy is None:
        return ""
    legacy.cache_size_limit = max(legacy.cache_size_limit, RECOMPILE_LIMIT)
    if hasattr(legacy, "accumulated_cache_size_limit"):
        legacy.accumulated_cache_size_limit = max(legacy.accumulated_cache_size_limit, RECOMPILE_LIMIT)
    if hasattr(legacy, "fail_on_cache_limit_hit"):
        legacy.fail_on_cache_limit_hit = True
    return "torch._dynamo.config"


class _Counted:
    """A compiled function that counts the graphs dynamo makes for it, where torch's counter is not available:
    one per new signature of its arguments (tensors' shapes, dtypes, devices; plain values themselves), which is
    what makes static-shape dynamo (dynamic=False) compile again."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        named = tuple((name, _signature([value])) for name, value in sorted(kwargs.items()))
        _signatures.add((id(self), _signature(args), named))
        return self.fn(*args, **kwargs)


def _signature(values: Any) -> tuple:
    import torch

    out: list[Any] = []
    for value in values:
        if isinstance(value, torch.Tensor):
            out.append((tuple(value.shape), value.dtype, value.device.type, value.requires_grad))
        elif value is None or isinstance(value, (bool, int, float, str)):
            out.append(value)
        else:
            out.append(type(value).__name__)
    return tuple(out)


@functools.cache
def compiled(fn: Callable[..., Any], *, dynamic: bool = False) -> Callable[..., Any]:
    """`torch.compile(fn, dynamic=dynamic)`, made once per (function, dynamic) and kept."""
    import torch

    _configure()
    made = torch.compile(fn, dynamic=dynamic)
    return made if torch_private.graphs_compiled() is not None else _Counted(made)


def graphs_compiled() -> int:
    """Graphs dynamo has compiled in this process: its `unique_graphs` counter, or where this torch has none
    (selfattn/torch_private.py) the new signatures the compiled functions were called with (_Counted)."""
    counted = torch_private.graphs_compiled()
    return counted if counted is not None else len(_signatures)


def make_room() -> bool:
    """Drop every compiled graph when this process holds RESET_AFTER_GRAPHS of them; whether it did.

    Call it between points only: the next call of every compiled function compiles again.
    """
    global _graphs_at_reset
    made = graphs_compiled()
    if made - _graphs_at_reset < RESET_AFTER_GRAPHS:
        return False
    import torch

    torch.compiler.reset()
    _signatures.clear()  # every signature compiles again
    _graphs_at_reset = 0 if torch_private.graphs_compiled() is None else made
    _compiled_keys.clear()
    return True


def record_compile_s(backend: str, device: str, key: Any, seconds: float, recompiled: bool) -> None:
    """Note a point's first call: `key` is now compiled; its seconds count when it did compile."""
    _compiled_keys.add(key)
    if recompiled:
        _compile_s.setdefault((backend, device), []).append(seconds)


def predict_compile_s(backend: str, device: str, key: Any) -> float:
    """Seconds the first call of a point will spend compiling: 0 when `key` was compiled in this
    process, else the median of this back end's measured compilations here (or COMPILE_S_GUESS)."""
    if key in _compiled_keys:
        return 0.0
    measured = _compile_s.get((backend, device))
    return statistics.median(measured) if measured else COMPILE_S_GUESS.get(device, COMPILE_S_GUESS["cuda"])
