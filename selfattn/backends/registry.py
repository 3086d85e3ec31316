"""The one registry: a back-end name -> its `Backend`, built-ins and plugins alike.

A `Backend` is a function and its `Declaration` (contract.py), nothing else: the built-ins
(selfattn/backends/naive.py and the rest) are functions declared with the same `backend` decorator a
plugin uses, loaded by the same path (`selfattn.backends.naive:attention`). What the harness asks of
a back end it reads from the declaration: its options (`options_type`, `resolve_options`), the
`kernel` column (`kernel_label`), its memory model (`mem_bytes`), the time guard's `efficiency` and
`speed_on`, whether its calls compile (`compiles`), and the optional hooks (`prepare`, `kernel_ran`).
Whether a point can run is capability.py's question, answered from the same declaration.

A back end that cannot be loaded (an import error, a missing function, a bad declaration) is a
`Backend` with its `error`: listed with it, and each of its points an `unsupported` row naming it.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
from pathlib import PurePath
from types import ModuleType
from typing import Any, Callable, Mapping

import torch

from selfattn.backends import description
from selfattn.backends.contract import Declaration, Speed, declaration_of
from selfattn.backends.discovery import (BUILTIN_NAMES, describe_name, entry_points, file_module_name, file_of,
                                         is_file_path, is_path, path_name, same_target)
from selfattn.errors import BackendContractError, Unsupported
from selfattn.fields import defaults

DEFAULT_EFFICIENCY = 0.5  # the time guard's share of the matmul peak for a back end that declares none
# The facts the harness supplies when a back end leaves them out (the row's `backend_defaulted`).
SUPPLIABLE = ("mem_model", "efficiency", "kernel_label")


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """The options of a back end that declares none."""


class Backend:
    """A back end: `fn` and its `declaration`, where it came from (`source`: builtin | entry_point | path,
    `origin`: its `module:function`), and `error` when it could not be loaded."""

    def __init__(self, name: str, fn: Callable | None, declaration: Declaration, *, source: str, origin: str,
                 error: str | None = None, described: str | None = None) -> None:
        self.name, self.fn, self.declaration = name, fn, declaration
        self.source, self.origin, self.error = source, origin, error
        # where this process only knows the plugin's options (description.py): how it knows them; fn is None
        self.described = described
        self.options_type: type = declaration.options or NoOptions
        self.mem_model_declared = declaration.mem_model is not None
        # the time guard's fact is supplied only where neither an efficiency nor any speed was declared
        self.defaulted = tuple(fact for fact in SUPPLIABLE if getattr(declaration, fact) is None
                               and not (fact == "efficiency" and declaration.speed))

    @property
    def broken(self) -> bool:
        return self.error is not None

    @property
    def variants(self) -> tuple[str, ...]:
        return self.declaration.variants

    @property
    def efficiency(self) -> float:
        return self.declaration.efficiency or DEFAULT_EFFICIENCY

    def speed_on(self, device_type: str) -> Speed | None:
        return self.declaration.speed_on(device_type)

    def resolve_options(self, options: Mapping[str, Any], device: Any, dtype: Any) -> dict[str, Any]:
        """Every option filled in for `device` and `dtype` (a built-in tunes its defaults there)."""
        if self.declaration.resolve_options is not None:
            return self.declaration.resolve_options(dict(options), torch.device(device), dtype)
        return {**defaults(self.options_type), **options}

    def kernel_label(self, options: Mapping[str, Any]) -> str:
        label = self.declaration.kernel_label
        if self.broken:
            return ""
        if label is None:  # `module.function`; a file's: its stem's (`plugins/attn.py:fast` -> attn.fast)
            origin = self.origin
            if is_file_path(origin):
                file, _, attribute = origin.rpartition(":")
                origin = f"{PurePath(file).stem}:{attribute}"
            return origin.replace(":", ".")
        return str(label(dict(options)) if callable(label) else label)

    def mem_bytes(self, point: Any, options: Mapping[str, Any], device: str) -> int:
        """Peak bytes of one call of `point` beyond its inputs: the declared model, else naive's (assumed)."""
        if self.declaration.mem_model is not None:
            return int(self.declaration.mem_model(point, dict(options), device))
        return assumed_mem_bytes(point, device)

    def compiles(self, options: Mapping[str, Any]) -> bool:
        hook = self.declaration.compiles
        return bool(hook(dict(options))) if hook is not None else False

    def prepare(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, masks: Any, scale: float,
                **options: Any) -> dict[str, float]:
        hook = self.declaration.prepare
        return dict(hook(q, k, v, masks=masks, scale=scale, **options) or {}) if hook is not None else {}

    def kernel_ran(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, masks: Any, scale: float,
                   **options: Any) -> str | None:
        hook = self.declaration.kernel_ran
        return hook(q, k, v, masks=masks, scale=scale, **options) if hook is not None else None

    def bind(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, masks: Any, scale: float,
             **options: Any) -> Callable[[], torch.Tensor]:
        """The call on these inputs, its one-time work (a layout's conversion, the arguments) done here, not
        in the timed calls. What it may run was decided before (capability.why_not); each call's output is
        checked (shape, dtype, device: metadata only, no wait on the device)."""
        if self.broken or self.fn is None:
            raise Unsupported(f"backend {self.name} ({self.origin}) cannot be used: "
                              f"{self.error or 'its module is imported only where its points run'}")
        fn, declaration = self.fn, self.declaration
        bshd = declaration.layout == "BSHD"
        if bshd:  # (B, H, S, D) -> (B, S, H, D), contiguous: converted before, not inside, the timed calls
            q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        if declaration.takes_masks:
            arguments = dict(masks=masks, scale=scale, **options)
        else:
            arguments = dict(causal=masks.causal, window=masks.window, key_lengths=masks.key_lengths,
                             document_ids=masks.document_ids, scale=scale, **options)
            # the score transforms only when used: a plugin that declares none keeps its signature
            arguments.update({name: value for name, value in (("softcap", masks.softcap), ("alibi", masks.alibi),
                                                              ("sink", masks.sink)) if name in masks.variants})
        expected = tuple(q.shape)

        def call() -> torch.Tensor:
            out = fn(q, k, v, **arguments)
            self._check_output(out, expected, q)
            return out.transpose(1, 2) if bshd else out

        if bshd:  # what the function is handed, for the verdict's check that it left them unchanged
            call.handed = {"q": q, "k": k, "v": v}  # type: ignore[attr-defined]
        return call

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, masks: Any, scale: float,
                  **options: Any) -> torch.Tensor:
        """One call (its capability decided by the caller: selfattn.attention asks capability.why_not)."""
        return self.bind(q, k, v, masks=masks, scale=scale, **options)()

    def _check_output(self, out: Any, expected: tuple[int, ...], q: torch.Tensor) -> None:
        what = f"backend {self.name} ({self.origin}) returned"
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
        return f"<backend {self.name} ({self.source}: {self.origin})>"

    def __deepcopy__(self, memo: dict) -> Backend:  # a layer's float64 copy shares its back end: one per process
        return self


def broken(name: str, *, source: str, origin: str, error: str) -> Backend:
    """A back end that could not be loaded: listed with `error`; each of its points an `unsupported` row."""
    return Backend(name, None, Declaration(), source=source, origin=origin, error=error)


def assumed_mem_bytes(point: Any, device: str) -> int:
    """The memory a back end without a model is assumed to need: naive's, which materializes every score
    (the most any of the usual kernels allocate), with q, k, v and the output converted once more."""
    from selfattn.backends import naive

    copies = 2 * point.out_bytes + point.kv_bytes
    return int(naive.predict_mem_bytes(point, defaults(naive.Options), device) + copies)


_loaded: dict[str, Backend] = {}
_lookups = [0]  # get_backend's calls in this process (tests/backends/test_lookups.py counts a point's)


def lookups() -> int:
    """How many times get_backend was asked in this process."""
    return _lookups[0]


def get_backend(name: str, here: bool = False) -> Backend:
    """The `Backend` of back end `name` (as typed: a built-in, an entry point's name or a path).

    A name that is not known raises ValueError (discovery.describe_name's line); a plugin that fails to
    import, is not callable or declares something invalid is a broken Backend saying so. In a process that
    describes plugins elsewhere (description.LIMIT_S set: the sweep's), a plugin is its description (its
    options, no function) unless `here`: a point that runs in this process imports it (isolate=false).
    """
    _lookups[0] += 1
    if name in _loaded and not (here and _loaded[name].described):
        return _loaded[name]
    problem = describe_name(name)
    if problem:
        raise ValueError(problem)
    if name in BUILTIN_NAMES:
        entry = _load(name, f"selfattn.backends.{name}:attention", "builtin")
    else:
        given_name, target, source = ((path_name(name), name, "path") if is_path(name)
                                      else (name, entry_points()[name].target, "entry_point"))
        entry = (_described(given_name, target, source, name, description.LIMIT_S)
                 if description.LIMIT_S is not None and not here else _load(given_name, target, source))
    for other in _loaded.values():  # two paths of one name in one process: the second is refused
        if (other is not _loaded.get(name) and not entry.broken and other.name == entry.name
                and not same_target(other.origin, entry.origin) and other.source == "path" == entry.source):
            entry = broken(entry.name, source="path", origin=name,
                           error=f"its name {entry.name} is taken by the path {other.origin}; rename one")
    _loaded[name] = entry
    return entry


def forget() -> None:
    """Drop the loaded plugins (a test that edits one, or installs a package, loads it again)."""
    for name in [n for n in _loaded if n not in BUILTIN_NAMES]:
        del _loaded[name]


def _described(name: str, target: str, source: str, typed: str, limit_s: float) -> Backend:
    """Plugin `typed` as a child process describes it (description.py): its options, or its load error, or, where
    the child could not say (a hang, a crash), no options and the reason; no function in this process."""
    told = description.describe(typed, limit_s)
    if told.error is not None:
        return broken(name, source=source, origin=target, error=told.error)
    declaration = Declaration(options=told.options) if told.options is not None else Declaration()
    return Backend(name, None, declaration, source=source, origin=target,
                   described=told.unknown or "described by its own process")


def _load(name: str, target: str, source: str) -> Backend:
    """Import `module:attribute` and wrap the function it holds; any failure becomes a broken Backend."""
    module_name, _, attribute = target.rpartition(":") if is_file_path(target) else target.partition(":")
    obj: Any = None  # stays None when the module itself fails to import
    part = ""
    try:
        obj = _load_file(target) if is_file_path(target) else importlib.import_module(module_name)
        for part in filter(None, attribute.split(".")):
            obj = getattr(obj, part)
    except BaseException as err:  # noqa: BLE001 - a plugin's import may raise anything, SystemExit included
        if not isinstance(err, (Exception, SystemExit)):  # Ctrl-C, or the sweep's SIGINT/SIGTERM exception
            raise  # (runners.interrupts.Interrupted): the run ends; it is no broken plugin
        hint = ""
        if isinstance(err, AttributeError) and isinstance(obj, ModuleType):  # a misspelt function: the nearest
            near = difflib.get_close_matches(part, [n for n in vars(obj) if not n.startswith("_")], n=1, cutoff=0.6)
            hint = f"; did you mean {module_name}:{near[0]}?" if near and "." not in attribute else ""
            if is_file_path(target) and obj.__name__ == file_module_name(target):  # not the internal module name
                err = AttributeError(f"{module_name} has no attribute {part!r}")
        return broken(name, source=source, origin=target, error=f"import failed: {_one_line(err)}{hint}")
    if isinstance(obj, ModuleType) or not callable(obj):
        what = "a module" if isinstance(obj, ModuleType) else f"a {type(obj).__name__}"
        return broken(name, source=source, origin=target,
                      error=f"{target} is {what}, not a function (name module:function; docs/plugins.md)")
    try:
        declaration = declaration_of(obj)
    except ValueError as err:
        return broken(name, source=source, origin=target, error=f"bad declaration: {err}")
    return Backend(name, obj, declaration, source=source, origin=target)


def _load_file(target: str) -> ModuleType:
    """The module of file path plugin `target` (`plugins/attn.py:fast`), loaded from its file once per process
    under discovery.file_module_name (registered in sys.modules first: a dataclass of options looks its module
    up while it is built, and pickle finds it there in an isolated worker that loaded the same file)."""
    import importlib.util
    import os
    import sys

    file, name = file_of(target), file_module_name(target)
    if name in sys.modules:
        return sys.modules[name]
    if not os.path.isfile(file):
        raise FileNotFoundError(f"no such file {file}" + (f" (relative to {os.getcwd()})"
                                                          if not os.path.isabs(target.rsplit(':', 1)[0]) else ""))
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"{file} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]  # a fixed file loads again in a later process, not half of this one
        raise
    return module


def _one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())}"[:300]


__all__ = ["Backend", "NoOptions", "assumed_mem_bytes", "broken", "forget", "get_backend", "lookups"]
