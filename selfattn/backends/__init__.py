"""The back ends, in a plain registry: name -> module.

Every back-end module provides:
    NAME: str
    OPTIONS: dict[str, Any]            option name -> default (None: tuned per device and dtype)
    available(device) -> bool          whether it can run on this device at all
    resolve_options(options, device, dtype) -> dict   validated options with defaults filled in
    kernel_label(resolved_options) -> str             the results' `kernel` column
    attention(q, k, v, *, causal, scale, **resolved_options) -> Tensor
Inputs reaching `attention` are already validated (selfattn.attention does that).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Mapping

import torch

from selfattn.backends import chunked, naive, sdpa

BACKENDS: dict[str, ModuleType] = {module.NAME: module for module in (naive, sdpa, chunked)}


def get_backend(name: str) -> ModuleType:
    """The registered module for `name`, or ValueError listing the valid names."""
    if not isinstance(name, str) or name not in BACKENDS:
        raise ValueError(f"backend: expected one of {', '.join(BACKENDS)}, got {name!r}")
    return BACKENDS[name]


def available_backends(device: torch.device | str = "cpu") -> list[str]:
    """Names of the back ends that can run on `device`, in registry order."""
    return [name for name, module in BACKENDS.items() if module.available(torch.device(device))]


def resolve_options(
    name: str,
    options: Mapping[str, Any] | None = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> dict[str, Any]:
    """Validated options of back end `name` with every default filled in for device and dtype.

    An option the back end does not know raises ValueError naming it and the allowed ones.
    """
    module = get_backend(name)
    options = dict(options or {})
    for key in options:
        if key not in module.OPTIONS:
            allowed = ", ".join(module.OPTIONS) or "none"
            raise ValueError(f"{key}: not an option of backend {name!r} (allowed: {allowed})")
    return module.resolve_options(options, torch.device(device), dtype)


def default_options(name: str, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """The option values back end `name` uses when none are given (tuned chunk sizes included)."""
    return resolve_options(name, {}, device, dtype)


def kernel_label(
    name: str,
    options: Mapping[str, Any] | None = None,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> str:
    """Text for the results' `kernel` column, defaults resolved: "auto", "q512-kv1024", "materialized"."""
    return get_backend(name).kernel_label(resolve_options(name, options, device, dtype))


__all__ = [
    "BACKENDS",
    "available_backends",
    "default_options",
    "get_backend",
    "kernel_label",
    "resolve_options",
]
