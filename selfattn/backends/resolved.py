"""A back end resolved once: the one object every later step of a point (or a direct call) reads.

`resolve(backend, options, ask)` is the one resolver: it looks the back end up once, checks the given
options and fills them in for the asked device and dtype (an FP8 format and product choice among them),
and asks the declaration whether it can run what `ask` (capability.Ask) asks. It returns a `Resolved`:
the `Backend`, its options, the `kernel` column, whether its calls compile, the dtype and the dtype its
tensors are made in, and why it cannot run (capability.why_not; None when it can).

Its two callers say what is asked: `resolve_point(point, device)` a sweep point's Ask (its masks, scope,
mode, precision), `selfattn.attention` a call's (its tensors' shapes, dtype, masks and grad state). The
memory and time predictors, the input builder, the layer, the timed call and the checks after it (the
permutation and path-length passes) take this object instead of looking the back end up again, so one
fact (the float8 dtype, the fp8 format) travels one way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

import torch

from selfattn.backends.capability import Ask, ask_of_point, why_not
from selfattn.backends.contract import OWN_SCORE_KERNELS
from selfattn.backends.registry import Backend, get_backend
from selfattn.fields import check_fields, defaults
from selfattn.fp8_formats import fp8_format
from selfattn.precision import DTYPES, check_precision, storage_dtype
from selfattn.scopes import scope_of


@dataclass(frozen=True)
class Resolved:
    """One point's back end and everything resolved from it (see the module docstring)."""

    backend: Backend
    options: dict[str, Any]  # every option, filled in for the device and precision (the call's keyword arguments)
    label: str  # the row's `kernel` column
    compiles: bool  # its calls run compiled code (compile_s applies)
    dtype: torch.dtype  # the precision's dtype (float8 for an FP8 precision; float32 for tf32; a call's: its tensors')
    storage_dtype: torch.dtype  # what its tensors are made in (float32 for FP8)
    why_not: str | None  # why it cannot run here (capability.why_not), None when it can

    @property
    def name(self) -> str:
        return self.backend.name

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, masks: Any, scale: float) -> torch.Tensor:
        """The back end's call with these options on checked inputs (selfattn.validate: check_qkv, check_masks)."""
        return self.backend.attention(q, k, v, masks=masks, scale=scale, **self.options)


def resolve(backend: str | Backend, options: Mapping[str, Any] | None, ask: Ask, dtype: torch.dtype | None = None,
            *, device: torch.device | str | None = None, prefix: str = "") -> Resolved:
    """Back end `backend` (a name, or a registry.Backend already looked up) with `options` resolved for what `ask`
    asks, on tensors of `dtype` (None: the asked precision's) on `device` (None: the asked device type; a call
    names its tensors' device, index included). An unknown option or a bad value is a ValueError
    naming it (after `prefix`, "backend." for a point); what the back end cannot do is `why_not`, never raised
    here. `ask`'s options, compiled flag and changed options are filled in from the resolution; an FP8 format
    among the resolved options makes the asked precision that format's."""
    entry = get_backend(backend) if isinstance(backend, str) else backend
    dtype = DTYPES[ask.precision] if dtype is None else dtype
    checked = check_fields(entry.options_type, options or {}, prefix=prefix, fill_defaults=False)
    fmt = fp8_format(ask.precision)  # an FP8 precision's format: derived, so no option of the back end's to check
    given = {**{k: v for k, v in checked.items() if v is not None}, **({"fp8": fmt} if fmt else {})}
    resolved = entry.resolve_options(given, torch.device(device or ask.device), dtype)
    compiles = entry.compiles(resolved)
    plain = defaults(entry.options_type)
    changed = tuple(sorted(k for k, v in checked.items() if plain.get(k) != v))
    ran = resolved.get("fp8", "none")
    precision = f"fp8_{ran}" if ran not in (None, "none") else ask.precision
    asked = replace(ask, precision=precision, options=dict(resolved), compiled=compiles, changed_options=changed)
    return Resolved(entry, resolved, entry.kernel_label(resolved), compiles, dtype, storage_dtype(dtype),
                    why_not(entry, asked))


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
    resolved = resolve(backend, given, ask_of_point(point, device, {}, False), dtype, prefix="backend.")
    own = OWN_SCORE_KERNELS.get(point.score)  # what runs: additive scores' own module, not the back end's kernel
    return replace(resolved, label=own) if own else resolved


def _check_defaults(point: Any, backend: Backend, given: Mapping[str, Any], kernel: str) -> None:
    """A scope with no attention back end (its own module runs): a back-end option off its default would be a
    second id for one measurement."""
    plain = defaults(backend.options_type)
    for name, value in given.items():
        if name not in plain or plain[name] != value:
            raise ValueError(f"backend.{name}: scope={point.scope} runs no attention back end ({kernel}), "
                             f"so the back end's options must stay at their defaults, got {value!r}")
