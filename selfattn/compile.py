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
  (`fail_on_recompile_limit_hit`), and `make_room` drops every compiled graph once a process has
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

RECOMPILE_LIMIT = 1024  # per function and accumulated; far above RESET_AFTER_GRAPHS
RESET_AFTER_GRAPHS = 256  # graphs one process may hold before make_room drops them all
# Seconds one compilation is assumed to take before any was measured in this process: the high end of a
# first (cold) flex_attention compile on a small CPU; later ones are faster, inductor's on-disk cache and
# the imports warm by then. The measured compile times replace it (GPUs' triton autotuning included).
COMPILE_S_GUESS = {"cpu": 20.0, "cuda": 60.0}

_compile_s: dict[tuple[str, str], list[float]] = {}  # (backend, device type) -> measured compile seconds
_compiled_keys: set[Any] = set()  # what this process has compiled (see predict_compile_s)
_graphs_at_reset = 0


def _configure() -> None:
    import torch._dynamo.config as config

    config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, RECOMPILE_LIMIT)
    config.fail_on_recompile_limit_hit = True  # never a silent eager fallback in a measured row


@functools.cache
def compiled(fn: Callable[..., Any], *, dynamic: bool = False) -> Callable[..., Any]:
    """`torch.compile(fn, dynamic=dynamic)`, made once per (function, dynamic) and kept."""
    import torch

    _configure()
    return torch.compile(fn, dynamic=dynamic)


def graphs_compiled() -> int:
    """Graphs dynamo has compiled in this process (its `unique_graphs` counter)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def make_room() -> bool:
    """Drop every compiled graph when this process holds RESET_AFTER_GRAPHS of them; whether it did.

    Call it between points only: the next call of every compiled function compiles again.
    """
    global _graphs_at_reset
    made = graphs_compiled()
    if made - _graphs_at_reset < RESET_AFTER_GRAPHS:
        return False
    import torch._dynamo

    torch._dynamo.reset()
    _graphs_at_reset = made
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
