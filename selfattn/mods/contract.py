"""Masks and score modifications as functions: the convention, and what one declares about itself.

The convention is the field's (torch's flex_attention, attention-gym):

    mask_mod(b, h, q_idx, kv_idx) -> bool            True: query q_idx of sequence b, head h sees key kv_idx
    score_mod(score, b, h, q_idx, kv_idx) -> score   the scaled logit, changed (before the mask and the softmax)

called with integer tensors that broadcast against each other (any shape), so a function written for
flex_attention runs here unchanged, and one written with tensor operations also runs on whole blocks.

Positions are bottom-right aligned, as every mask of the harness is (docs/api.md): the harness passes
query row i of a call with q_len queries and seq_len keys as q_idx = i + (seq_len - q_len), its position
in the sequence, and key j as kv_idx = j. When q_len == seq_len that is flex_attention's own q_idx (the
row); when q_len < seq_len (a decode step, a chunk of queries after a prefix) a function written
top-left, as attention-gym's are, gets the offset added for it, so its `q_idx >= kv_idx` is the
project's causal mask. A function that really means top-left rows subtracts `seq_len - q_len` itself.

A mask or score mod reaches a sweep as a *factory*: a function of keyword parameters that returns the
mask_mod (attention-gym's `generate_prefix_lm_mask(prefix_length)` is one), its parameters the config's
`mask.<name>=value` keys; or directly as a mask_mod / score_mod of four / five positional arguments and no
parameters. `declare_mod` attaches what a factory wants the harness to know (its parameters' help, the fast
path of a built-in); a plain function needs nothing.

Pure Python: the point's checks, the listing and the analysis read this without torch.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

KINDS = ("mask", "score_mod")
ARITY = {"mask": 4, "score_mod": 5}  # positional arguments of a mask_mod, of a score_mod
ATTRIBUTE = "selfattn_mod"  # where `declare_mod` puts the declaration on a factory
NONE = "none"  # the name of "no function": every key seen, every score as it is


@dataclass(frozen=True)
class Param:
    """One parameter of a factory: config key `mask.<name>` (or `score_mod.<name>`)."""

    name: str
    default: Any
    help: str = ""
    ge: float | None = None  # the smallest value allowed (numbers)

    def check(self, value: Any, prefix: str) -> Any:
        """The value, checked against the default's type and the bound; ValueError naming the key otherwise."""
        key = f"{prefix}{self.name}"
        kind = type(self.default)
        if self.default is None:
            return value
        if kind is bool:
            if not isinstance(value, bool):
                raise ValueError(f"{key}: expected true or false, got {value!r}")
            return value
        if kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{key}: expected an integer{self._bound()}, got {value!r}")
        elif kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{key}: expected a finite number{self._bound()}, got {value!r}")
            value = float(value)
        elif not isinstance(value, kind):
            raise ValueError(f"{key}: expected a {kind.__name__}, got {value!r}")
        if self.ge is not None and value < self.ge:
            raise ValueError(f"{key}: expected {'an integer' if kind is int else 'a number'}{self._bound()}, got {value!r}")
        return value

    def _bound(self) -> str:
        return "" if self.ge is None else f" >= {self.ge:g}"


@dataclass(frozen=True)
class ModDeclaration:
    """What a factory says about itself (every field optional)."""

    help: str = ""
    params: tuple[Param, ...] | None = None  # None: read from the factory's keyword defaults
    # a built-in that today's axes already say: (checked params) -> those axes' values ({"causal": True}); the
    # sweep measures the axes' point instead (the same id, the interval masks' fast paths)
    fast_path: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None
    # whether the function reads b or h (False lets every back end share one mask across sequences and heads)
    per_sequence: bool = True
    per_head: bool = True


def declare_mod(fn: Callable | None = None, /, **declared: Any) -> Any:
    """Declare a factory's help, parameters and fast path: `@declare_mod(help="...", per_head=False)`."""
    declaration = ModDeclaration(**declared)

    def mark(function: Callable) -> Callable:
        setattr(function, ATTRIBUTE, declaration)
        return function

    return mark(fn) if fn is not None else mark


@dataclass(frozen=True)
class ModSpec:
    """A named mask or score mod: where it comes from, and how to make its function."""

    kind: str  # mask | score_mod
    name: str  # what rows carry: a built-in's or entry point's name, a path's last attribute
    origin: str  # module:function
    source: str  # builtin | entry_point | path
    target: Callable  # the factory, or the mask_mod / score_mod itself (`direct`)
    direct: bool  # target is the mask_mod / score_mod itself (no parameters)
    declaration: ModDeclaration = field(default_factory=ModDeclaration)

    @property
    def params(self) -> tuple[Param, ...]:
        if self.direct:
            return ()
        if self.declaration.params is not None:
            return self.declaration.params
        return factory_params(self.target)

    @property
    def help(self) -> str:
        doc = (inspect.getdoc(self.target) or "").strip().splitlines()
        return self.declaration.help or (doc[0] if doc else "")

    def check_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Every parameter, given or at its default, checked: `mask.prefx` -> one line naming the nearest key."""
        from selfattn.fields import unknown_key

        prefix = f"{self.kind}."
        params = {p.name: p for p in self.params}
        for key in options:
            if key not in params:
                if not params:
                    raise ValueError(f"{prefix}{key}: {self.kind} {self.name} takes no parameters")
                raise unknown_key(f"{prefix}{key}", [f"{prefix}{name}" for name in params])
        values = {}
        for name, param in params.items():
            if name not in options and param.default is inspect.Parameter.empty:
                raise ValueError(f"{prefix}{name}: {self.kind} {self.name} needs it (no default)")
            values[name] = param.check(options[name], prefix) if name in options else param.default
        return values

    def bind(self, options: Mapping[str, Any] | None = None) -> "BoundMod":
        values = self.check_options(options or {})
        fn = self.target if self.direct else self.target(**values)
        if not callable(fn):
            raise ValueError(f"{self.kind}: {self.origin}({_args(values)}) returned {type(fn).__name__}, "
                             f"not a {self.kind} function")
        return BoundMod(self, tuple(sorted(values.items())), fn)


@dataclass(frozen=True, eq=False)
class BoundMod:
    """A mask or score mod with its parameters: the function the back ends and the reference call."""

    spec: ModSpec
    params: tuple[tuple[str, Any], ...]
    fn: Callable
    # geometry kept per (shape, device): dense masks, block maps, pair counts (selfattn/mods/geometry.py)
    cache: dict = field(default_factory=dict, repr=False)

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def label(self) -> str:
        """`prefix_lm(prefix=256)`: what a kernel label or a listing shows."""
        return f"{self.spec.name}({_args(dict(self.params))})" if self.params else self.spec.name

    @property
    def key(self) -> tuple:
        """What decides the function's values: its origin and parameters (a cache key across Masks)."""
        return (self.spec.kind, self.spec.origin, self.params) if self.spec.source != "callable" else (id(self.fn),)

    @property
    def per_head(self) -> bool:
        return self.spec.declaration.per_head

    # What selfattn/masks.py and score_mods.py ask of a function, answered by selfattn/mods/geometry.py (imported
    # here, when asked, so that those modules import nothing of this package)
    def keep(self, masks: Any, batch: int, heads: int, q_len: int, seq_len: int, device: Any, **where: Any) -> Any:
        """Bool (B or 1, H or 1, rows, keys): `masks`' whole mask, this mask function's included."""
        from selfattn.mods.geometry import keep

        return keep(masks, batch, heads, q_len, seq_len, device, **where)

    def empty_rows(self, masks: Any, batch: int, heads: int, q_len: int, seq_len: int) -> bool:
        from selfattn.mods.geometry import empty_rows

        return empty_rows(masks, batch, heads, q_len, seq_len)

    def apply(self, scores_BHMN: Any, q_len: int, seq_len: int, **where: Any) -> Any:
        """This score function on scaled scores (batch, heads, rows, keys)."""
        from selfattn.mods.geometry import apply_score_mod

        return apply_score_mod(self, scores_BHMN, q_len, seq_len, **where)

    @property
    def per_sequence(self) -> bool:
        return self.spec.declaration.per_sequence


def from_callable(fn: Callable, kind: str) -> BoundMod:
    """A function handed to `selfattn.attention(mask_mod=...)` itself: no name to look up, no parameters."""
    if isinstance(fn, BoundMod):
        return fn
    if not callable(fn):
        raise ValueError(f"{kind}: expected a function {signature(kind)}, got {type(fn).__name__}")
    name = getattr(fn, "__name__", type(fn).__name__)
    spec = ModSpec(kind, name, f"{getattr(fn, '__module__', '?')}:{name}", "callable", fn, True,
                   getattr(fn, ATTRIBUTE, ModDeclaration()))
    return BoundMod(spec, (), fn)


def signature(kind: str) -> str:
    return "(b, h, q_idx, kv_idx) -> bool" if kind == "mask" else "(score, b, h, q_idx, kv_idx) -> score"


def factory_params(fn: Callable) -> tuple[Param, ...]:
    """A factory's parameters from its signature: keyword defaults give the type (no default: required)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return ()
    return tuple(Param(p.name, p.default) for p in sig.parameters.values()
                 if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def is_direct(fn: Callable, kind: str) -> bool:
    """Whether `fn` is a mask_mod / score_mod itself (ARITY positional parameters, none with a default) rather
    than a factory of keyword parameters."""
    if hasattr(fn, ATTRIBUTE):
        return False
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) == ARITY[kind] and all(p.default is p.empty for p in positional)


def _args(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())
