"""The scopes, declared: what each one measures and accepts, and how it is built and costed.

One module per scope (core.py, layer.py, generate.py, lstm.py, gru.py, train.py, or any other module here), each a
`SCOPE = Scope(...)`; `SCOPES` holds them in the order `scope`'s choices list them (the built-ins in BUILT_IN's
order, then any other module's, by name: a new scope is one module, nothing registers it). Modules whose name starts
with "_" are helpers the scopes share. Validation (selfattn/point.py), capability (selfattn/backends/capability.py,
resolved.py), prediction (selfattn/measure/predict.py, flops.py, traffic.py) and measurement (workload.py, run.py,
metric_steps.py, path_length.py) read a scope's declaration instead of branching on its name. The declarations are
data readable without torch: a scope's functions import torch and the measurement code inside their bodies.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Mapping

from selfattn.scopes.declaration import Scope

BUILT_IN = ("core", "layer", "generate", "lstm", "gru", "train")  # the order of `scope`'s choices


def _load() -> dict[str, Scope]:
    found = {m.name for m in pkgutil.iter_modules(__path__) if m.name != "declaration" and not m.name.startswith("_")}
    ordered = [name for name in BUILT_IN if name in found] + sorted(found - set(BUILT_IN))
    declared = [importlib.import_module(f"{__name__}.{name}").SCOPE for name in ordered]
    return {scope.name: scope for scope in declared}


SCOPES: Mapping[str, Scope] = _load()


def scope_of(name: Any) -> Scope | None:
    """The declaration of scope `name`, or None for a name that is not a scope."""
    return SCOPES.get(name) if isinstance(name, str) else None


def declared(point: Any) -> Scope:
    """The declaration of `point`'s scope (a validated point's: a ValueError names any other value)."""
    scope = scope_of(point.scope)
    if scope is None:
        raise ValueError(f"scope: expected one of {', '.join(SCOPES)}, got {point.scope!r}")
    return scope


def names_where(flag: str) -> tuple[str, ...]:
    """The scopes whose declaration sets `flag`, in order (for messages: "core", "layer or train")."""
    return tuple(name for name, scope in SCOPES.items() if getattr(scope, flag))
