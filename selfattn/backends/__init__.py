"""The back ends, in one open registry: built-ins and plugins, one contract.

A back end is a function plus a `Declaration` of what it supports, as data (contract.py holds the
contract and every field; docs/plugins.md shows it at work). The built-ins (naive.py, sdpa.py, chunked.py,
flex.py, triton.py here) declare theirs with the `backend` decorator a plugin uses, at the end of their
module. A back end reaches the registry three ways (discovery.py): built in, an installed package's entry
point in the group `selfattn.backends`, or a path `module:function`. `get_backend(name)` returns its
`Backend` (registry.py); `resolved.resolve` is the one resolver of its options and capability, for a point
(`resolve_point`) and for a direct call (`selfattn.attention`); `capability.why_not` answers "can this run
here, and if not why".

Names are plain data (discovery.py reads entry points from the packages' metadata), so the sweep axes and
the analysis (which never loads torch) know the back ends; anything that needs torch loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from selfattn.backends.contract import Declaration, Speed, backend
from selfattn.backends.discovery import (BUILTIN_NAMES, ENTRY_POINT_GROUP, backend_name, backend_names,
                                         backend_source, describe_name, is_path)

if TYPE_CHECKING:
    import torch

# The built-ins. Order is the order of tables, legends and colours everywhere; every other name (an entry
# point, a path) sorts after them and takes a colour of its own (analysis/figures/style.py).
BACKEND_NAMES: tuple[str, ...] = BUILTIN_NAMES
# A back end run with its `compile` option on is a variant of its own ("naive+compile"): other code, not the
# same kernel with another setting. The progress line and every table, figure and claim name it so.
COMPILED_SUFFIX = "+compile"


def get_backend(name: str) -> Any:
    """The `Backend` of back end `name` (built in, entry point or path; registry.py), or ValueError
    saying why the name is not known (describe_name)."""
    from selfattn.backends.registry import get_backend as entry

    return entry(name)


def __getattr__(name: str) -> Any:
    if name == "BACKENDS":  # built-in name -> Backend, built on first use (it loads torch), then kept
        registry = {backend: get_backend(backend) for backend in BACKEND_NAMES}
        globals()["BACKENDS"] = registry
        return registry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def available_backends(device: torch.device | str = "cpu") -> list[str]:
    """Names of the back ends (built-ins, then entry points) that can run on `device`, in registry order."""
    import torch

    from selfattn.backends.capability import unavailable

    device_type = torch.device(device).type
    return [name for name in backend_names() if unavailable(get_backend(name), device_type) is None]


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
    "get_backend",
]
