"""Can this point run here, and if not, why: the one answer, from the back end's declaration.

`why_not(backend, ask)` returns the reason in one line, or None. `Ask` is what a point (or a call of
`selfattn.attention` on tensors) asks in the declaration's terms: the device type, precision, head_dim,
masks, variants, backward, score function, scope and whether its calls compile. It runs before any input
is allocated; the rows (`selfattn.measure.run`), `selfattn.attention`, `python -m selfattn.backends` and
the sweep's check before its first point all ask it, so a refusal reads the same everywhere.

The rules that belong to the harness rather than to a back end are here too, as data beside the
declaration's: a CUDA device must be there, tf32 needs CUDA tensor cores, the FP8 path is forward-only and
eager and exists for the attention core alone, a generation loop cannot compile a shape per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from selfattn.backends.contract import FP8_PRECISIONS
from selfattn.scopes import SCOPES, Scope, scope_of
from selfattn.variants import unsupported_variants



@dataclass(frozen=True)
class Ask:
    """What a call asks of its back end (the declaration's terms)."""

    device: str  # device type: cpu | cuda
    precision: str  # a selfattn.precision name (fp32 for a call on float32 tensors)
    head_dim: int = 64
    heads: int = 1
    kv_heads: int = 1  # fewer than heads: grouped-query attention
    masks: tuple[str, ...] = ()  # the mask arguments used: causal, window, key_lengths, document_ids
    variants: tuple[str, ...] = ()  # selfattn/variants.py's names used
    backward: bool = False
    score: str = "dot"
    scope: str = "core"
    compiled: bool = False  # its calls run compiled code (the resolved options say)
    options: Mapping[str, Any] = field(default_factory=dict)  # the resolved options
    changed_options: tuple[str, ...] = ()  # options given away from their defaults


def ask_of_point(point: Any, device: str, options: Mapping[str, Any], compiled: bool,
                 changed_options: tuple[str, ...] = ()) -> Ask:
    """The Ask of a `selfattn.Point` on `device` (a device type) with its resolved `options`."""
    used = {"causal": point.causal, "window": point.window is not None, "key_lengths": point.pad_frac > 0,
            "document_ids": point.documents is not None, "mask_mod": getattr(point, "mask", "none") != "none",
            "score_mod": getattr(point, "score_mod", "none") != "none"}
    return Ask(device=device, precision=point.precision, head_dim=point.head_dim, heads=point.heads,
               kv_heads=point.kv_heads_resolved, masks=tuple(name for name, on in used.items() if on),
               variants=point.variants, backward=point.mode == "fwd_bwd" or _trains(point),
               score=point.score, scope=point.scope, compiled=compiled, options=dict(options),
               changed_options=changed_options)


def _trains(point: Any) -> bool:
    """A training run's backward runs whatever `mode` says (its declaration: selfattn/scopes/train.py)."""
    return getattr(scope_of(point.scope), "trains", False)


def _scope(ask: Ask) -> Scope:
    """The declaration of the scope `ask` runs in (a call on tensors, selfattn.attention's, is the core's)."""
    return scope_of(ask.scope) or SCOPES["core"]


def ask_of_call(q: Any, k: Any, masks: Any, precision: str, options: Mapping[str, Any], compiled: bool) -> Ask:
    """The Ask of a call on tensors (selfattn.attention): what its shapes, masks and grad state ask."""
    import torch

    used = {"causal": masks.causal, "window": masks.window is not None, "key_lengths": masks.key_lengths is not None,
            "document_ids": masks.document_ids is not None, "mask_mod": masks.mask_mod is not None,
            "score_mod": masks.score_mod is not None}
    backward = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k))
    return Ask(device=q.device.type, precision=precision, head_dim=q.shape[-1], heads=q.shape[1], kv_heads=k.shape[1],
               masks=tuple(name for name, on in used.items() if on), variants=masks.variants, backward=backward,
               compiled=compiled, options=dict(options))


def why_not(backend: Any, ask: Ask) -> str | None:
    """Why `backend` (a registry.Backend) cannot run what `ask` asks here, in one line; None when it can.

    In order: the machine (a CUDA device, tf32's tensor cores), then a recurrent scope's own rule (no back end
    runs there), the back end's declaration, and the rules of the harness's paths it would take (FP8, a
    compiled generation loop)."""
    why = _machine_reason(ask)
    if why or not _scope(ask).attention:  # no attention back end runs in it
        return why or (_fp8_reason(ask) if ask.precision in FP8_PRECISIONS else None)
    return _declared_reason(backend, ask) or _path_reason(ask)


def unavailable(backend: Any, device: str) -> str | None:
    """Why `backend` cannot run on device type `device` at all (the listing's "no (...)"), or None."""
    if backend.broken:
        return backend.error
    d = backend.declaration
    if device not in d.devices:
        return f"declares devices {', '.join(d.devices)}, not {device}"
    missing = d.unavailable(device) if d.unavailable is not None else None
    if missing:
        return missing
    needs = d.missing_env(device)
    return f"needs {' '.join(needs)}" if needs else None


def _declared_reason(backend: Any, ask: Ask) -> str | None:
    """What the declaration says `backend` cannot do of `ask`: the device first (nothing else matters where
    it cannot run at all), then every other fact it lacks, in one line."""
    d, who = backend.declaration, f"backend {backend.name}"
    if (reason := _device_reason(backend, ask)) is not None:
        return reason
    asked: list[str] = []
    keys: list[str] = []
    for gap in (_precision_gap, _head_dim_gap, _mask_gap, _gqa_gap, _backward_gap, _variant_gap, _score_gap):
        if (found := gap(d, ask)) is not None:
            asked.append(found[0])
            keys += found[1]
    if asked:
        return _line(who, asked, d.gaps, keys)
    if ask.score == "additive" and ask.changed_options:  # its own computation: the dot product's options do nothing
        return (f"score=additive: {backend.name}'s option {ask.changed_options[0]} applies to its dot-product path, "
                "not to additive scores")
    return None


def _device_reason(backend: Any, ask: Ask) -> str | None:
    """Why `backend` cannot run on the asked device at all (broken, undeclared, unavailable, its environment)."""
    d, who = backend.declaration, f"backend {backend.name}"
    if backend.broken:
        return f"{who} ({backend.origin}) cannot be used: {backend.error}"
    if ask.device not in d.devices:
        return _line(who, [f"device {ask.device} (declared: {', '.join(d.devices)})"], d.gaps, [ask.device])
    missing = d.unavailable(ask.device) if d.unavailable is not None else None
    if missing:
        return f"{who} cannot run on {ask.device}: {missing}"
    return _env_line(backend, ask.device) if d.missing_env(ask.device) else None


# Each fact a declaration may lack: (what was asked and what is declared, the keys its `gaps` may explain), or None.
Gap = tuple[str, list[str]]


def _precision_gap(d: Any, ask: Ask) -> Gap | None:
    if d.allows_precision(ask.precision, ask.device):
        return None
    on = f" on {ask.device}" if isinstance(d.dtypes, dict) else ""
    return (f"precision {ask.precision}{on} (declared: {', '.join(d.dtypes_on(ask.device)) or 'none'})",
            ["fp8" if ask.precision in FP8_PRECISIONS else ask.precision])


def _head_dim_gap(d: Any, ask: Ask) -> Gap | None:
    if d.max_head_dim is None or ask.head_dim <= d.max_head_dim:
        return None
    return f"head_dim {ask.head_dim} (declared: at most {d.max_head_dim})", ["head_dim"]


def _mask_gap(d: Any, ask: Ask) -> Gap | None:
    missing = [name for name in ask.masks if name not in d.masks]
    return (f"mask {', '.join(missing)} (declared: {', '.join(d.masks) or 'none'})", missing) if missing else None


def _gqa_gap(d: Any, ask: Ask) -> Gap | None:
    if ask.kv_heads == ask.heads or d.gqa:
        return None
    return f"kv_heads={ask.kv_heads} < heads={ask.heads} (declared gqa=False)", ["gqa"]


def _backward_gap(d: Any, ask: Ask) -> Gap | None:
    if not ask.backward or d.backward_on(ask.device):
        return None
    on = f" on {ask.device}" if isinstance(d.backward, dict) else ""
    return f"a backward pass{on} (declared backward=False)", ["backward"]


def _variant_gap(d: Any, ask: Ask) -> Gap | None:
    missing = unsupported_variants(ask.variants, d.variants)
    return (f"variant {', '.join(missing)} (declared: {', '.join(d.variants) or 'none'})", missing) if missing else None


def _score_gap(d: Any, ask: Ask) -> Gap | None:
    return None if ask.score in d.scores else (f"score={ask.score} (declared: {', '.join(d.scores)})", [ask.score])


# Why a score function a back end does not declare cannot run there, where its own `gaps` say nothing.
SCORE_GAPS = {"additive": "additive scores are selfattn/additive.py's own computation, materialized on naive's path"}


def _line(who: str, asked: list[str], gaps: Mapping[str, str], keys: list[str]) -> str:
    """"backend X does not support A; B: why A; why B" (each why the declaration's `gaps` gives)."""
    gaps = {**SCORE_GAPS, **gaps}
    whys = list(dict.fromkeys(gaps[key] for key in keys if key in gaps))
    return f"{who} does not support {'; '.join(asked)}" + (f": {'; '.join(whys)}" if whys else "")


def _env_line(backend: Any, device: str) -> str:
    import os

    missing = backend.declaration.missing_env(device)
    names = [m.split("=")[0] for m in missing]
    now = ", ".join(f"{n}={os.environ[n]!r}" if n in os.environ else f"{n} unset" for n in names)
    return (f"backend {backend.name} ({backend.origin}) needs {' '.join(missing)} on {device} (here: {now}); "
            "set it before the sweep starts")


def _machine_reason(ask: Ask) -> str | None:
    """What this machine lacks for the point, whatever the back end: a CUDA device, tf32's tensor cores."""
    if ask.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return "device cuda: no CUDA device is available to this process"
    if ask.precision == "tf32":
        from selfattn.precision import tf32_reason

        return tf32_reason(ask.device)
    return None


def _path_reason(ask: Ask) -> str | None:
    """The rules of the harness's own paths a declared point takes: FP8's, a compiled generation loop's."""
    if ask.precision in FP8_PRECISIONS:
        why = _fp8_reason(ask)
        if why:
            return why
    if ask.compiled and _scope(ask).autoregressive:
        return (f"scope={ask.scope} with a compiled back end: every step's cache length is a new shape to compile "
                "(a loop of new_tokens compilations)")
    return None


def _fp8_reason(ask: Ask) -> str | None:
    """The FP8 path (selfattn/fp8.py) is the attention core's forward, eager; its products need what they ask."""
    p = ask.precision
    scope = _scope(ask)
    if scope.trains:
        return f"precision {p}: scope={scope.name} has no FP8 path (only the FP8 forward is built)"
    if not scope.attention:
        return (f"precision {p}: scope={scope.name} ({scope.kernel}) has no FP8 path; FP8 is built for "
                "the attention back ends naive and chunked")
    if ask.score == "additive":
        return (f"precision {p}: score=additive (selfattn/additive.py) has no FP8 path; FP8 is built for the dot "
                "product of naive and chunked")
    if ask.backward:
        return f"precision {p}: only the FP8 forward is built (no FP8 backward), so mode=fwd_bwd cannot run"
    if ask.compiled:
        return f"precision {p} with backend.compile=true: the FP8 path runs eager only (not built compiled)"
    if "fp8_matmul" in ask.options:
        from selfattn.fp8 import matmul_reason

        return matmul_reason(ask.options["fp8_matmul"], ask.device)
    return None
