"""Typed fields that carry their own rules, and one checker for every config section.

A sweep axis (`Point`), a budget limit (`Budget`), a back end's option (`Options` in each back
end's module) and a runner setting are all dataclass fields made with `spec(...)`: the type
comes from the annotation, the rest (allowed values, bounds, help text) from the metadata. So
each fact is written once and validation, error messages, ids and help all read it from there.

Errors are one line that names the key and what is allowed:
    seq_len: expected an integer >= 1, got 0
    seqlen: unknown key; did you mean seq_len?
    pos_enc: expected one of none, sinusoidal, learned, rope, got 'rop'; did you mean rope?
Pure Python on purpose: analysis/ and the runner's config checks import it without torch.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import operator
import types
import typing
from typing import Any, Callable, Iterable, Mapping, Sequence

_MISSING = dataclasses.MISSING


def spec(
    default: Any = _MISSING,
    *,
    help: str,
    choices: Sequence[Any] | None = None,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    parse: Callable[[Any], Any] | None = None,
    default_factory: Callable[[], Any] | Any = _MISSING,
    config: bool = True,
    plain: bool = True,
    null_means: str | None = None,
) -> Any:
    """A dataclass field with its rules: allowed `choices`, bounds (`ge`, `gt`, `le`), or a
    `parse` function that returns the canonical value or raises ValueError naming the key.
    `config=False`: a value the harness derives (FP8's format, from the precision), which a call may be given
    but a config never holds: conf/ and the config reference leave it out (`config_fields`).

    For `Point`'s fields (the sweep axes) only: `plain` (the default) says the field's default is the
    chapter's plain case, and the analysis leaves rows at any other value out of every study that does
    not name the axis (analysis/slices.py); `plain=False`: no plain case, every study varies the axis or
    fixes one value of it (back end, n, d_k, ...). `null_means`: the field whose value a null stands for
    (kv_heads: heads), which is what a row's column holds then."""
    metadata = {"help": help, "choices": tuple(choices) if choices is not None else None,
                "ge": ge, "gt": gt, "le": le, "lt": lt, "parse": parse, "config": config, "plain": plain,
                "null_means": null_means}
    if default_factory is not _MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def config_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of a `spec` dataclass a config holds (all but those made with config=False)."""
    return [f for f in dataclasses.fields(cls) if f.metadata.get("config", True)]


def field_types(cls: type) -> dict[str, Any]:
    """Field name -> its annotation, resolved (the modules use `from __future__ import annotations`)."""
    return dict(_resolved_hints(cls))


@functools.lru_cache(maxsize=None)
def _resolved_hints(cls: type) -> dict[str, Any]:
    # get_type_hints evaluates every annotation's text anew: for Row's ~150 fields a few ms, paid by
    # every job (each Point.validate, each config check) unless kept per class
    return typing.get_type_hints(cls)


def _kind(annotation: Any) -> tuple[Any, bool]:
    """(base type, nullable) of an annotation such as `int | None`."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        nullable = len(args) < len(typing.get_args(annotation))
        return (args[0] if len(args) == 1 else Any), nullable
    return annotation, False


def _bounds_text(meta: Mapping[str, Any]) -> str:
    parts = []
    if meta.get("gt") is not None:
        parts.append(f"> {meta['gt']:g}")
    if meta.get("ge") is not None:
        parts.append(f">= {meta['ge']:g}")
    if meta.get("le") is not None:
        parts.append(f"<= {meta['le']:g}")
    if meta.get("lt") is not None:
        parts.append(f"< {meta['lt']:g}")
    return " and ".join(parts)


SHOWN_CHARS = 60  # of a long value quoted in a one-line error


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """repr(value) for a one-line error, cut to `limit` characters with its length said, so a 100,000-character
    value stays one readable line; an integer too long for Python to print says its size instead."""
    try:
        text = repr(value)
    except ValueError:  # an int past sys.get_int_max_str_digits()
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(value) if isinstance(value, str) else len(text)} characters)"


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)


def allowed_text(f: dataclasses.Field, annotation: Any) -> str:
    """What a field accepts, as the words after 'expected' in an error message."""
    meta = f.metadata
    base, nullable = _kind(annotation)
    null = "null or " if nullable else ""
    if meta.get("choices"):
        return f"{null}one of {', '.join(_text(c) for c in meta['choices'])}"
    bounds = _bounds_text(meta)
    if base is bool:
        return f"{null}true or false"
    if base is int:
        return f"{null}an integer{' ' + bounds if bounds else ''}"
    if base is float:
        return f"{null}a finite number{' ' + bounds if bounds else ''}"
    if base is str:
        return f"{null}a string"
    return f"{null}a value"


def check_value(key: str, value: Any, f: dataclasses.Field, annotation: Any) -> Any:
    """One value against its field; returns the canonical value or raises a one-line ValueError."""
    meta = f.metadata
    base, nullable = _kind(annotation)
    given = value

    def bad() -> ValueError:
        return ValueError(f"{key}: expected {allowed_text(f, annotation)}, got {_text(given) if given is None else shown(given)}")

    if meta.get("parse") is not None:  # a spelling of its own (e.g. scale: auto | none | number)
        try:
            return meta["parse"](value)
        except ValueError as err:
            raise ValueError(f"{key}: {str(err).split(': ', 1)[-1]}") from None
    if value is None:
        if nullable or base is Any:
            return None
        raise bad()
    if not _of_type(value, base):
        raise bad()
    if base is float:
        value = float(value)
    if meta.get("choices") is not None and value not in meta["choices"]:
        near = nearest(value, [c for c in meta["choices"] if isinstance(c, str)]) if isinstance(value, str) else None
        raise ValueError(f"{bad()}; did you mean {near}?") if near else bad()
    if base in (int, float) and not all(holds(value, meta[name]) for name, holds in _BOUNDS.items()
                                        if meta.get(name) is not None):
        raise bad()
    return value


_BOUNDS = {"gt": operator.gt, "ge": operator.ge, "le": operator.le, "lt": operator.lt}  # a field's bounds, checked


def _of_type(value: Any, base: Any) -> bool:
    """Whether a non-None `value` is of the field's base type (a bool is no number; a float is finite)."""
    if base is bool or base is str:
        return isinstance(value, base)
    if base is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if base is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return True


def nearest(key: str, candidates: Iterable[str]) -> str | None:
    """The candidate a typo most likely meant (`seqlen` -> `seq_len`), or None."""
    candidates = list(candidates)
    tail = key.rsplit(".", 1)[-1]
    for name in candidates:  # the same key in another section: `kernel` -> `backend.kernel`
        if name.rsplit(".", 1)[-1] == tail and name != key:
            return name
    match = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    return match[0] if match else None


def unknown_key(key: str, candidates: Iterable[str]) -> ValueError:
    """'seqlen: unknown key; did you mean seq_len?' (or the allowed keys when nothing is close).

    A key inside a section (`budget.timng_s`) is matched within that section first.
    """
    candidates = list(candidates)
    section = key.rsplit(".", 1)[0] + "." if "." in key else None
    siblings = [c for c in candidates if section and c.startswith(section)]
    if siblings:  # compare within the section: a shared prefix says nothing about the typo
        tails = {c.rsplit(".", 1)[-1]: c for c in siblings}
        tail = nearest(key.rsplit(".", 1)[-1], list(tails))
        near = tails[tail] if tail else None
    else:
        near = nearest(key, candidates)
    allowed = siblings or candidates
    hint = f"did you mean {near}?" if near else f"allowed: {', '.join(allowed) or 'none'}"
    return ValueError(f"{key}: unknown key; {hint}")


def check_fields(cls: type, node: Mapping[str, Any] | None, *, prefix: str = "",
                 fill_defaults: bool = True) -> dict[str, Any]:
    """Check a mapping against a dataclass made of `spec` fields: no unknown key, every value
    allowed. Returns the canonical values, defaults filled in unless `fill_defaults` is False."""
    node = dict(node or {})
    hints = field_types(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    for key in node:
        if key not in known:
            raise unknown_key(f"{prefix}{key}", [f"{prefix}{name}" for name in known])
    checked: dict[str, Any] = {}
    for name, f in known.items():
        if name in node:
            checked[name] = check_value(f"{prefix}{name}", node[name], f, hints[name])
        elif fill_defaults:
            checked[name] = default_of(f)
    return checked


def default_of(f: dataclasses.Field) -> Any:
    if f.default is not _MISSING:
        return f.default
    if f.default_factory is not _MISSING:
        return f.default_factory()
    raise ValueError(f"{f.name}: required")


def defaults(cls: type) -> dict[str, Any]:
    """Field name -> default value of a `spec` dataclass."""
    return {f.name: default_of(f) for f in dataclasses.fields(cls)}


def validate_instance(obj: Any, *, prefix: str = "") -> None:
    """Check every field of a dataclass instance against its own spec (for __post_init__/validate)."""
    hints = field_types(type(obj))
    for f in dataclasses.fields(obj):
        check_value(f"{prefix}{f.name}", getattr(obj, f.name), f, hints[f.name])
