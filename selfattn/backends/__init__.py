"""The back ends, in one open registry: built-ins and plugins, one contract.

A back end is a function with the public call's signature plus a declaration of what it supports
(contract.py; docs/plugins.md). It reaches the registry three ways (discovery.py): built in (the modules
here), an installed package's entry point in the group `selfattn.backends`, or a path `module:function`.
`get_backend(name)` returns its registry entry (registry.py), whose members the harness calls:

    NAME, Options, EFFICIENCY, available(device), resolve_options(options, device, dtype),
    kernel_label(resolved_options), predict_mem_bytes(point, options, device),
    attention(q, k, v, *, masks, scale, **resolved_options), bind(...) (the same call, one-time work done),
    unsupported_reason(point, device), source, origin, mem_model_declared, defaulted

The built-ins are modules that own all of their facts (today's eight members, wrapped as they are by
registry.ModuleBackend):
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
    missing(device) -> str | None      why it cannot run on this device (None: it can): the listing's reason
                                       and the unsupported rows' (flex without a compiler, triton without CUDA
                                       or its interpreter)
    prepare(q, k, v, *, masks, scale, **resolved_options) -> dict[str, float]
                                       one-time set-up the calls reuse (flex: its block mask; chunked:
                                       its block plan, so a timed call reads no tensor on the host),
                                       timed apart; the keys are row columns ("block_mask_s"), or none
    VARIANTS: tuple[str, ...]          the variants of selfattn/variants.py it computes (none by default:
                                       a point using another is an unsupported row naming it)
    VARIANT_GAPS: dict[str, str]       why it cannot compute one it does not declare, added to that row
An entry point or a path may name such a module too (`my_pkg.triton_attn` with those members).
Inputs reaching `attention` are already validated (selfattn.attention does that).

Names are plain data (discovery.py reads entry points from the packages' metadata), so the sweep axes and
the analysis (which never loads torch) know the back ends; anything that needs torch loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from selfattn.backends.contract import Declaration, Speed, backend
from selfattn.backends.discovery import (BUILTIN_NAMES, ENTRY_POINT_GROUP, backend_name, backend_names,
                                         backend_source, describe_name, is_path)
from selfattn.fields import check_fields

if TYPE_CHECKING:
    import torch

# The built-ins. Order is the order of tables, legends and colours everywhere; every other name (an entry
# point, a path) sorts after them and takes a colour of its own (analysis/figures/style.py).
BACKEND_NAMES: tuple[str, ...] = BUILTIN_NAMES
# A back end run with its `compile` option on is a variant of its own ("naive+compile"): other code, not the
# same kernel with another setting. The progress line and every table, figure and claim name it so.
COMPILED_SUFFIX = "+compile"


def get_backend(name: str) -> Any:
    """The registry entry of back end `name` (built in, entry point or path; registry.py), or ValueError
    saying why the name is not known (describe_name)."""
    from selfattn.backends.registry import get_backend as entry

    return entry(name)


def __getattr__(name: str) -> Any:
    if name == "BACKENDS":  # built-in name -> registry entry, built on first use (it loads torch), then kept
        registry = {backend: get_backend(backend) for backend in BACKEND_NAMES}
        globals()["BACKENDS"] = registry
        return registry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def available_backends(device: torch.device | str = "cpu") -> list[str]:
    """Names of the back ends (built-ins, then entry points) that can run on `device`, in registry order."""
    import torch

    return [name for name in backend_names() if get_backend(name).available(torch.device(device))]


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
    "BUILTIN_NAMES",
    "Declaration",
    "ENTRY_POINT_GROUP",
    "Speed",
    "backend",
    "backend_name",
    "backend_names",
    "backend_source",
    "describe_name",
    "is_path",
    "available_backends",
    "check_options",
    "compiles",
    "default_options",
    "get_backend",
    "kernel_label",
    "resolve_options",
]
