"""The one registry: a back-end name -> the object the harness calls, built-ins and plugins alike.

Every entry answers the same members (the harness reads nothing else): NAME, Options, EFFICIENCY,
available(device), resolve_options(options, device, dtype), kernel_label(options),
predict_mem_bytes(point, options, device), attention(q, k, v, *, masks, scale, **options), and
bind(...) (the same call with its one-time work done: a layout's conversion), unsupported_reason(point,
device) (what it declares it cannot do, before anything is allocated), plus `source` (builtin |
entry_point | path), `origin`, `mem_model_declared` and `defaulted` (the facts the harness supplied).

A module of the eight members (the built-ins, selfattn/backends/naive.py and the rest) is wrapped as it
is: `ModuleBackend(module)`. A function of the public signature (contract.py) is a `PluginBackend`; one
that cannot be loaded is a `BrokenBackend` whose every point is an `unsupported` row naming the error.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import os
from types import ModuleType
from typing import Any, Callable, Mapping

import torch

from selfattn.backends.contract import Declaration, declaration_of
from selfattn.backends.discovery import (BUILTIN_NAMES, backend_name, describe_name, entry_points, is_path,
                                         path_name)
from selfattn.errors import BackendContractError, Unsupported
from selfattn.fields import defaults
from selfattn.variants import unsupported_variants

DEFAULT_EFFICIENCY = 0.5  # the time guard's share of the matmul peak for a back end that declares none


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """The options of a back end that declares none."""


class ModuleBackend:
    """A module with the eight members (NAME, Options, EFFICIENCY, available, resolve_options,
    kernel_label, predict_mem_bytes, attention; optionally kernel_ran, compiles, prepare, FP8_UNSUPPORTED)
    as a registry entry. Every member is read from the module when asked, so the module stays the one
    home of its facts."""

    mem_model_declared = True
    defaulted: tuple[str, ...] = ()

    def __init__(self, module: ModuleType, *, name: str | None = None, source: str = "builtin",
                 origin: str | None = None) -> None:
        self.module, self.NAME = module, name or module.NAME
        self.source, self.origin = source, origin or module.__name__

    def __getattr__(self, attr: str) -> Any:  # only for what this class does not define: the module's members
        if attr == "module":
            raise AttributeError(attr)
        return getattr(self.module, attr)

    @property
    def variants(self) -> tuple[str, ...]:
        """The variants the module declares (`VARIANTS`; none when it declares nothing)."""
        return tuple(getattr(self.module, "VARIANTS", ()))

    def unsupported_reason(self, point: Any, device: str) -> str | None:
        # the variants, asked here before anything is allocated; anything else the module refuses
        # itself, raising selfattn.Unsupported from its own call with the reason
        return variants_reason(self, point.variants) if point is not None else None

    def unavailable_reason(self, device: str) -> str | None:
        if self.module.available(torch.device(device)):
            return None
        why = getattr(self.module, "missing", None)  # optional: why it cannot run here
        text = why(torch.device(device)) if callable(why) else None
        return text or f"{self.origin}.available({device!r}) is false"

    def bind(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, masks: Any, scale: float,
             **options: Any) -> Callable[[], torch.Tensor]:
        check_variants(self, masks)
        attention = self.module.attention
        return lambda: attention(q, k, v, masks=masks, scale=scale, **options)

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, masks: Any, scale: float,
                  **options: Any) -> torch.Tensor:
        check_variants(self, masks)  # a module never sees a variant it did not declare
        return self.module.attention(q, k, v, masks=masks, scale=scale, **options)

    def __repr__(self) -> str:
        return f"<backend {self.NAME} ({self.source}: {self.origin})>"


class PluginBackend:
    """A function of the public signature with its Declaration (contract.py)."""

    def __init__(self, name: str, fn: Callable, declaration: Declaration, *, source: str, origin: str) -> None:
        self.NAME, self.fn, self.declaration, self.source, self.origin = name, fn, declaration, source, origin
        self.Options = declaration.options or NoOptions
        self.EFFICIENCY = declaration.efficiency or DEFAULT_EFFICIENCY
        self.SPEED = declaration.speed  # device type -> Speed: the guard's call time there (selfattn.measure.predict)
        self.mem_model_declared = declaration.mem_model is not None
        # the time guard's fact is supplied only where neither an efficiency nor any speed was declared
        self.defaulted = tuple(fact for fact in ("mem_model", "efficiency", "kernel_label")
                               if getattr(declaration, fact) is None and not (fact == "efficiency" and declaration.speed))

    @property
    def variants(self) -> tuple[str, ...]:
        return self.declaration.variants

    def available(self, device: torch.device | str) -> bool:
        return self.unavailable_reason(str(torch.device(device).type)) is None

    def unavailable_reason(self, device: str) -> str | None:
        device_type = torch.device(device).type
        if device_type not in self.declaration.devices:
            return f"declares devices {', '.join(self.declaration.devices)}, not {device_type}"
        missing = self.declaration.missing_env(device_type)
        return f"needs {' '.join(missing)}" if missing else None

    def env_reason(self, device_type: str) -> str | None:
        """Why this process's environment cannot run it on `device_type` (a required variable unset), or None."""
        missing = self.declaration.missing_env(device_type)
        if not missing:
            return None
        now = ", ".join(f"{m.split('=')[0]}={os.environ[m.split('=')[0]]!r}" if m.split('=')[0] in os.environ
                        else f"{m.split('=')[0]} unset" for m in missing)
        return (f"backend {self.NAME} ({self.origin}) needs {' '.join(missing)} on {device_type} (here: {now}); "
                "set it before the sweep starts")

    def resolve_options(self, options: Mapping[str, Any], device: Any, dtype: Any) -> dict[str, Any]:
        return {**defaults(self.Options), **options}

    def kernel_label(self, options: Mapping[str, Any]) -> str:
        label = self.declaration.kernel_label
        if label is None:
            return self.origin.replace(":", ".")
        return str(label(dict(options)) if callable(label) else label)

    def predict_mem_bytes(self, point: Any, options: Mapping[str, Any], device: str) -> int:
        if self.declaration.mem_model is not None:
            return int(self.declaration.mem_model(point, dict(options), device))
        return assumed_mem_bytes(point, device)

    def unsupported_reason(self, point: Any, device: str) -> str | None:
        """What the point asks that the declaration does not support, in one line, or None."""
        d, asked = self.declaration, []
        device_type = torch.device(device).type
        if device_type in d.devices and self.env_reason(device_type):
            return self.env_reason(device_type)
        if device_type not in d.devices:
            asked.append(f"device {device_type} (declared: {', '.join(d.devices)})")
        if not d.allows_precision(point.precision):
            asked.append(f"precision {point.precision} (declared: {', '.join(d.dtypes)})")
        masks = {"causal": point.causal, "window": point.window is not None, "key_lengths": point.pad_frac > 0,
                 "document_ids": point.documents is not None}
        missing = [name for name, used in masks.items() if used and name not in d.masks]
        if missing:
            asked.append(f"mask {', '.join(missing)} (declared: {', '.join(d.masks) or 'none'})")
        if not d.gqa and point.kv_heads_resolved != point.heads:
            asked.append(f"kv_heads={point.kv_heads_resolved} < heads={point.heads} (declared gqa=False)")
        if not d.backward and (point.mode == "fwd_bwd" or point.scope == "train"):
            asked.append("a backward pass (declared backward=False)")
        missing_variants = unsupported_variants(point.variants, d.variants)
        if missing_variants:
            asked.append(f"variant {', '.join(missing_variants)} (declared: {', '.join(d.variants) or 'none'})")
        return f"backend {self.NAME} ({self.origin}) does not support {'; '.join(asked)}" if asked else None

    def _check_call(self, q: torch.Tensor, k: torch.Tensor, masks: Any) -> None:
        """The declaration against these tensors (selfattn.attention's path: no point to ask beforehand)."""
        d = self.declaration
        if q.device.type in d.devices and self.env_reason(q.device.type):
            raise Unsupported(self.env_reason(q.device.type))
        precision = {torch.float64: "fp64", torch.float32: "fp32", torch.float16: "fp16",
                     torch.bfloat16: "bf16"}.get(q.dtype, str(q.dtype))
        used = {"causal": masks.causal, "window": masks.window is not None,
                "key_lengths": masks.key_lengths is not None, "document_ids": masks.document_ids is not None}
        problems = [f"device {q.device.type}"] if q.device.type not in d.devices else []
        problems += [f"dtype {precision}"] if not d.allows_precision(precision) else []
        problems += [f"mask {name}" for name, on in used.items() if on and name not in d.masks]
        problems += ["fewer K/V heads (gqa)"] if not d.gqa and k.shape[1] != q.shape[1] else []
        problems += ["a backward pass"] if not d.backward and torch.is_grad_enabled() and q.requires_grad else []
        problems += [f"variant {name}" for name in unsupported_variants(masks.variants, d.variants)]
        if problems:
            raise Unsupported(f"backend {self.NAME} ({self.origin}) does not support {'; '.join(problems)}")

    def bind(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, masks: Any, scale: float,
             **options: Any) -> Callable[[], torch.Tensor]:
        """The call on these inputs, its checks and its layout's conversion done once, here."""
        self._check_call(q, k, masks)
        bshd = self.declaration.layout == "BSHD"
        if bshd:  # (B, H, S, D) -> (B, S, H, D), contiguous: converted before, not inside, the timed calls
            q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        fn, expected = self.fn, tuple(q.shape)
        arguments = dict(causal=masks.causal, window=masks.window, key_lengths=masks.key_lengths,
                         document_ids=masks.document_ids, scale=scale, **options)
        # the score transforms only when used: a plugin that declares none keeps its signature
        arguments.update({name: value for name, value in (("softcap", masks.softcap), ("alibi", masks.alibi),
                                                          ("sink", masks.sink)) if name in masks.variants})

        def call() -> torch.Tensor:
            out = fn(q, k, v, **arguments)
            self._check_output(out, expected, q)
            return out.transpose(1, 2) if bshd else out

        if bshd:  # what the function is handed, for the verdict's check that it left them unchanged
            call.handed = {"q": q, "k": k, "v": v}  # type: ignore[attr-defined]
        return call

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, masks: Any, scale: float,
                  **options: Any) -> torch.Tensor:
        return self.bind(q, k, v, masks=masks, scale=scale, **options)()

    def _check_output(self, out: Any, expected: tuple[int, ...], q: torch.Tensor) -> None:
        """Shape, dtype and device of what the function returned (metadata only: no wait on the device)."""
        what = f"backend {self.NAME} ({self.origin}) returned"
        if not isinstance(out, torch.Tensor):
            raise BackendContractError(f"{what} {type(out).__name__}, expected one tensor shaped like q "
                                       f"{expected} ({self.declaration.layout})")
        if tuple(out.shape) != expected:
            raise BackendContractError(f"{what} shape {tuple(out.shape)}, expected {expected} "
                                       f"({self.declaration.layout}, q's shape)")
        if out.dtype != q.dtype:
            raise BackendContractError(f"{what} dtype {out.dtype}, expected q's {q.dtype}")
        if out.device != q.device:
            raise BackendContractError(f"{what} a tensor on {out.device}, expected q's device {q.device}")

    def __repr__(self) -> str:
        return f"<backend {self.NAME} ({self.source}: {self.origin})>"


class BrokenBackend(PluginBackend):
    """A plugin that could not be loaded: listed with its error; each of its points an `unsupported` row."""

    def __init__(self, name: str, *, source: str, origin: str, error: str) -> None:
        super().__init__(name, self._refuse, Declaration(), source=source, origin=origin)
        self.error = error

    def _refuse(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        raise Unsupported(self.unsupported_reason(None, "cpu"))

    def unavailable_reason(self, device: str) -> str | None:
        return self.error

    def unsupported_reason(self, point: Any, device: str) -> str | None:
        return f"backend {self.NAME} ({self.origin}) cannot be used: {self.error}"

    def bind(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, masks: Any, scale: float,
             **options: Any) -> Callable[[], torch.Tensor]:
        raise Unsupported(self.unsupported_reason(None, str(q.device)))

    def kernel_label(self, options: Mapping[str, Any]) -> str:
        return ""


def variants_reason(entry: Any, used: tuple[str, ...]) -> str | None:
    """Why `entry` cannot run a call that uses the variants `used` (selfattn/variants.py), or None."""
    missing = unsupported_variants(used, entry.variants)
    if not missing:
        return None
    gaps = getattr(entry, "VARIANT_GAPS", None) or {}  # a module's own word on why (sdpa: softcap's tanh)
    why = "; ".join(gaps[name] for name in missing if name in gaps)
    return (f"backend {entry.NAME} does not support {', '.join(missing)} "
            f"(it declares {', '.join(entry.variants) or 'no variant'})" + (f": {why}" if why else ""))


def check_variants(entry: Any, masks: Any) -> None:
    """Raise selfattn.Unsupported when the call's variants are not all declared by `entry`."""
    why = variants_reason(entry, masks.variants)
    if why:
        raise Unsupported(why)


def assumed_mem_bytes(point: Any, device: str) -> int:
    """The memory a back end without a model is assumed to need: naive's, which materializes every score
    (the most any of the usual kernels allocate), with q, k, v and the output converted once more."""
    from selfattn.backends import naive

    copies = 2 * point.out_bytes + point.kv_bytes
    return int(naive.predict_mem_bytes(point, defaults(naive.Options), device) + copies)


_loaded: dict[str, Any] = {}


def get_backend(name: str) -> Any:
    """The registry entry of back end `name` (as typed: a built-in, an entry point's name or a path).

    A name that is not known raises ValueError (discovery.describe_name's line); a plugin that fails to
    import, is not callable or declares something invalid is a BrokenBackend saying so.
    """
    if name in _loaded:
        return _loaded[name]
    problem = describe_name(name)
    if problem:
        raise ValueError(problem)
    if name in BUILTIN_NAMES:
        entry: Any = ModuleBackend(importlib.import_module(f"selfattn.backends.{name}"))
    elif is_path(name):
        entry = _load(path_name(name), name, "path")
    else:
        entry = _load(name, entry_points()[name].target, "entry_point")
    for other in _loaded.values():  # two paths of one name in one process: the second is refused
        if other.NAME == entry.NAME and other.origin != entry.origin and other.source == "path" == entry.source:
            entry = BrokenBackend(entry.NAME, source="path", origin=name,
                                  error=f"its name {entry.NAME} is taken by the path {other.origin}; rename one")
    _loaded[name] = entry
    return entry


def forget() -> None:
    """Drop the loaded plugins (a test that edits one, or installs a package, loads it again)."""
    for name in [n for n in _loaded if n not in BUILTIN_NAMES]:
        del _loaded[name]


def _load(name: str, target: str, source: str) -> Any:
    """Import `module:attribute` and wrap what it holds; any failure becomes a BrokenBackend."""
    module_name, _, attribute = target.partition(":")
    obj: Any = None  # stays None when the module itself fails to import
    part = ""
    try:
        obj = importlib.import_module(module_name)
        for part in filter(None, attribute.split(".")):
            obj = getattr(obj, part)
    except BaseException as err:  # noqa: BLE001 - a plugin's import may raise anything, SystemExit included
        if not isinstance(err, (Exception, SystemExit)):  # Ctrl-C, or the sweep's SIGINT/SIGTERM exception
            raise  # (runners.interrupts.Interrupted): the run ends; it is no broken plugin
        hint = ""
        if isinstance(err, AttributeError) and isinstance(obj, ModuleType):  # a misspelt function: the nearest
            near = difflib.get_close_matches(part, [n for n in vars(obj) if not n.startswith("_")], n=1, cutoff=0.6)
            hint = f"; did you mean {module_name}:{near[0]}?" if near and "." not in attribute else ""
        return BrokenBackend(name, source=source, origin=target, error=f"import failed: {_one_line(err)}{hint}")
    if isinstance(obj, ModuleType) and hasattr(obj, "attention") and hasattr(obj, "Options"):
        return ModuleBackend(obj, name=name, source=source, origin=target)  # today's module shape
    if not callable(obj):
        return BrokenBackend(name, source=source, origin=target,
                             error=f"{target} is a {type(obj).__name__}, not a function")
    try:
        declaration = declaration_of(obj)
    except ValueError as err:
        return BrokenBackend(name, source=source, origin=target, error=f"bad declaration: {err}")
    return PluginBackend(name, obj, declaration, source=source, origin=target)


def _one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())}"[:300]


__all__ = ["BrokenBackend", "ModuleBackend", "NoOptions", "PluginBackend", "backend_name", "forget", "get_backend"]
