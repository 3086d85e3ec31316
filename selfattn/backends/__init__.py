"""The back ends, in a plain registry: one name per back end, one module per name.

Adding a back end = its module here + its name in BACKEND_NAMES + conf/backend/<name>.yaml
(docs/architecture.md walks through it). Every back-end module owns all of its facts:
    NAME: str
    Options                            a dataclass of `selfattn.fields.spec` fields: the options,
                                       their defaults (None: tuned per device and dtype) and rules
    EFFICIENCY: float                  share of the matmul peak the time guard assumes it reaches
    available(device) -> bool          whether it can run on this device at all
    resolve_options(options, device, dtype) -> dict   checked options with defaults filled in
    kernel_label(resolved_options) -> str             the results' `kernel` column
    predict_mem_bytes(point, options, device) -> int  peak bytes of one call beyond its inputs
    attention(q, k, v, *, masks, scale, **resolved_options) -> Tensor
                                       masks: selfattn.masks.Masks; k, v may have fewer heads (GQA)
and optionally
    kernel_ran(q, k, v, *, masks, scale, **resolved_options) -> str   the kernel an `auto` picks
    compiles(resolved_options) -> bool  whether the call runs torch.compile'd code (its first call
                                       compiles: timed apart as compile_s, see selfattn/compile.py)
    FP8_UNSUPPORTED: str               why it has no FP8 path (precision=fp8_*: an unsupported row)
    prepare(q, k, v, *, masks, scale, **resolved_options) -> dict[str, float]
                                       one-time set-up the calls reuse (flex: its block mask; chunked:
                                       its block plan, so a timed call reads no tensor on the host),
                                       timed apart; the keys are row columns ("block_mask_s"), or none
Inputs reaching `attention` are already validated (selfattn.attention does that).

The names are plain data so that the sweep axes and the analysis (which never loads torch)
can know the back ends; the modules, which need torch, load on first use.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any, Mapping

from selfattn.fields import check_fields

if TYPE_CHECKING:
    import torch

# The registry. Order is the order of tables, legends and colours everywhere.
BACKEND_NAMES: tuple[str, ...] = ("naive", "sdpa", "chunked", "flex", "triton")
# A back end run with its `compile` option on is a variant of its own ("naive+compile"): other code, not the
# same kernel with another setting. The progress line and every table, figure and claim name it so.
COMPILED_SUFFIX = "+compile"


def get_backend(name: str) -> ModuleType:
    """The module of back end `name`, or ValueError listing the valid names."""
    if not isinstance(name, str) or name not in BACKEND_NAMES:
        raise ValueError(f"backend: expected one of {', '.join(BACKEND_NAMES)}, got {name!r}")
    return importlib.import_module(f"{__name__}.{name}")


def __getattr__(name: str) -> Any:
    if name == "BACKENDS":  # name -> module, built on first use (it loads torch), then kept
        registry = {backend: get_backend(backend) for backend in BACKEND_NAMES}
        globals()["BACKENDS"] = registry
        return registry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def available_backends(device: torch.device | str = "cpu") -> list[str]:
    """Names of the back ends that can run on `device`, in registry order."""
    import torch

    return [name for name in BACKEND_NAMES if get_backend(name).available(torch.device(device))]


def check_options(name: str, options: Mapping[str, Any] | None, *, prefix: str = "") -> dict[str, Any]:
    """The options given for back end `name`, checked against its `Options` (no defaults filled).

    An option it does not know raises ValueError naming it and the nearest known one.
    """
    return check_fields(get_backend(name).Options, options, prefix=prefix, fill_defaults=False)


def resolve_options(
    name: str,
    options: Mapping[str, Any] | None = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
) -> dict[str, Any]:
    """Checked options of back end `name` with every default filled in for device and dtype."""
    import torch

    module = get_backend(name)
    given = {k: v for k, v in check_options(name, options).items() if v is not None}
    why_not = getattr(module, "FP8_UNSUPPORTED", None)  # a back end without an FP8 path says why
    if why_not and dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        from selfattn.errors import Unsupported

        raise Unsupported(why_not)
    return module.resolve_options(given, torch.device(device), torch.float32 if dtype is None else dtype)


def default_options(name: str, device: torch.device | str = "cpu", dtype: torch.dtype | None = None) -> dict[str, Any]:
    """The option values back end `name` uses when none are given (tuned chunk sizes included)."""
    return resolve_options(name, {}, device, dtype)


def kernel_label(
    name: str,
    options: Mapping[str, Any] | None = None,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
) -> str:
    """Text for the results' `kernel` column, defaults resolved: "auto", "q512-kv1024", "materialized"."""
    return get_backend(name).kernel_label(resolve_options(name, options, device, dtype))


def compiles(name: str, resolved_options: Mapping[str, Any]) -> bool:
    """Whether back end `name` with these resolved options runs compiled code (compile_s applies)."""
    module = get_backend(name)
    return bool(getattr(module, "compiles", lambda options: False)(resolved_options))


__all__ = [
    "BACKEND_NAMES",
    "available_backends",
    "check_options",
    "compiles",
    "default_options",
    "get_backend",
    "kernel_label",
    "resolve_options",
]
