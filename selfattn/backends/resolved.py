"""A point's back end resolved once: the one object every later step of a point reads.

`resolve_point(point, device)` asks the registry once and returns a `Resolved`: the `Backend`, its options
checked and filled in for the point's device and precision (an FP8 precision's format and product choice
among them), the `kernel` column, whether its calls compile, the precision's dtype and the dtype its
tensors are made in, and why it cannot run here (capability.why_not; None when it can). The memory and
time predictors, the input builder, the timed call and the checks after it take this object instead of
looking the back end up again, so one fact (the float8 dtype, the fp8 format) travels one way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch

from selfattn.backends.capability import ask_of_point, why_not
from selfattn.backends.contract import OWN_SCORE_KERNELS
from selfattn.backends.registry import Backend, get_backend
from selfattn.fields import check_fields, defaults
from selfattn.precision import DTYPES, check_precision, storage_dtype
from selfattn.scopes import scope_of


@dataclass(frozen=True)
class Resolved:
    """One point's back end and everything resolved from it (see the module docstring)."""

    backend: Backend
    options: dict[str, Any]  # every option, filled in for the device and precision (the call's keyword arguments)
    label: str  # the row's `kernel` column
    compiles: bool  # its calls run compiled code (compile_s applies)
    dtype: torch.dtype  # the precision's dtype (float8 for an FP8 precision; float32 for tf32)
    storage_dtype: torch.dtype  # what its tensors are made in (float32 for FP8)
    why_not: str | None  # why it cannot run here (capability.why_not), None when it can

    @property
    def name(self) -> str:
        return self.backend.name


def resolve_point(point: Any, device: str) -> Resolved:
    """`point`'s back end on device type `device`, looked up once (a ValueError names a bad option value).

    A scope with no attention back end (a recurrence) runs its own module: the back end's options must stay at their
    defaults, and the label (the row's `kernel`) is what the scope declares it runs; so is a score computed by its own
    module (additive)."""
    backend = get_backend(point.backend)
    given = dict(point.backend_options) if isinstance(point.backend_options, Mapping) else {}
    check_precision(point.precision)  # a one-line ValueError naming the field
    dtype = DTYPES[point.precision]
    if device == "cuda" and not torch.cuda.is_available():  # nothing to resolve options for: the machine says why
        return Resolved(backend, {}, "", False, dtype, storage_dtype(dtype),
                        why_not(backend, ask_of_point(point, device, {}, False)))
    scope = scope_of(point.scope)
    if scope is not None and not scope.attention:  # the scope's own module runs, and names itself
        _check_defaults(point, backend, given, scope.kernel)
        return Resolved(backend, {}, scope.kernel, False, dtype, storage_dtype(dtype),
                        why_not(backend, ask_of_point(point, device, {}, False)))
    checked = check_fields(backend.options_type, given, prefix="backend.", fill_defaults=False)
    fmt = point.call_options.get("fp8")
    options = backend.resolve_options({**{k: v for k, v in checked.items() if v is not None},
                                       **({"fp8": fmt} if fmt else {})}, device, dtype)
    compiles = backend.compiles(options)
    plain = defaults(backend.options_type)
    changed = tuple(sorted(k for k, v in checked.items() if plain.get(k) != v))
    label = OWN_SCORE_KERNELS.get(point.score) or backend.kernel_label(options)  # what runs: additive scores' own module
    return Resolved(backend, options, label, compiles, dtype, storage_dtype(dtype),
                    why_not(backend, ask_of_point(point, device, options, compiles, changed)))


def _check_defaults(point: Any, backend: Backend, given: Mapping[str, Any], kernel: str) -> None:
    """A scope with no attention back end (its own module runs): a back-end option off its default would be a
    second id for one measurement."""
    plain = defaults(backend.options_type)
    for name, value in given.items():
        if name not in plain or plain[name] != value:
            raise ValueError(f"backend.{name}: scope={point.scope} runs no attention back end ({kernel}), "
                             f"so the back end's options must stay at their defaults, got {value!r}")
