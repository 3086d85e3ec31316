"""The scopes, declared: what each one measures and accepts, as data the rest of the harness reads.

One module per scope (core.py, layer.py, generate.py, lstm.py, gru.py, train.py), each a `SCOPE = Scope(...)`;
`SCOPES` holds them in the order `scope`'s choices list them. Validation (selfattn/point.py), capability
(selfattn/backends/capability.py, resolved.py) and measurement (selfattn/measure/run.py, metric_steps.py,
path_length.py) read a scope's declaration instead of branching on its name. Pure Python: the config
checks and the analysis read it without torch.

What a scope runs (its workload: inputs, the timed call, the float64 reference) is in
selfattn/measure/workload.py, and its FLOPs, bytes and memory model in selfattn/measure/predict.py,
flops.py and traffic.py.
"""

from __future__ import annotations

from typing import Any, Mapping

from selfattn.scopes.declaration import Scope


def _load() -> dict[str, Scope]:
    from selfattn.scopes import core, generate, gru, layer, lstm, train

    return {module.SCOPE.name: module.SCOPE for module in (core, layer, generate, lstm, gru, train)}


SCOPES: Mapping[str, Scope] = _load()


def scope_of(name: Any) -> Scope | None:
    """The declaration of scope `name`, or None for a name that is not a scope."""
    return SCOPES.get(name) if isinstance(name, str) else None


def names_where(flag: str) -> tuple[str, ...]:
    """The scopes whose declaration sets `flag`, in order (for messages: "core", "layer or train")."""
    return tuple(name for name, scope in SCOPES.items() if getattr(scope, flag))
