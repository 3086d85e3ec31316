"""Which mask and score-mod names exist, and the function behind each: built-ins, entry points, paths.

Named as back ends are (selfattn/backends/discovery.py):
- built in: selfattn/mods/catalogue.py (`mask=prefix_lm`, `score_mod=softcap`);
- an entry point of an installed package, in the group `selfattn.masks` or `selfattn.score_mods`
  (`dilated = my_pkg.masks:dilated` in its pyproject.toml);
- a path `module:attribute` (`mask=my_masks:dilated`), imported when the point is checked.
A name's rows carry the built-in's or entry point's name, or a path's last attribute, as back ends' do.

Pure Python until a plugin's module is imported (a path, an entry point asked for by name).
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Any, Mapping

from selfattn.fields import shown
from selfattn.mods.catalogue import BUILTINS
from selfattn.mods.contract import ATTRIBUTE, KINDS, NONE, BoundMod, ModDeclaration, ModSpec, is_direct, signature

ENTRY_POINT_GROUPS = {"mask": "selfattn.masks", "score_mod": "selfattn.score_mods"}


def is_path(name: object) -> bool:
    """Spelt as a path `module:attribute` (as a back end's path is: selfattn/backends/discovery.py)."""
    return isinstance(name, str) and ":" in name


def path_name(path: str) -> str:
    """A path's name: its last attribute (`my_masks:dilated` -> `dilated`), as a back end's path's."""
    return path.rsplit(":", 1)[-1].rsplit(".", 1)[-1]


@lru_cache(maxsize=None)
def entry_points(kind: str) -> dict[str, str]:
    """name -> `module:attr` of the installed packages' entry points in `kind`'s group."""
    from importlib.metadata import entry_points as installed

    return {ep.name: ep.value for ep in installed(group=ENTRY_POINT_GROUPS[kind])}


def names(kind: str) -> tuple[str, ...]:
    """Built-ins in the catalogue's order, then the entry points', sorted."""
    builtin = tuple(BUILTINS[kind])
    return builtin + tuple(sorted(n for n in entry_points(kind) if n not in builtin))


def mod_name(value: str) -> str:
    """The name rows carry for `value` as typed (a path: its last attribute)."""
    return path_name(value) if is_path(value) else value


def mod_source(value: str) -> str:
    if is_path(value):
        return "path"
    return "builtin" if value in BUILTINS_FLAT else "entry_point"


BUILTINS_FLAT = frozenset(n for kind in KINDS for n in BUILTINS[kind])


def resolve(kind: str, value: Any) -> ModSpec:
    """The ModSpec `value` names in `kind` (mask | score_mod); ValueError with one line otherwise."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{kind}: expected a name ({', '.join(names(kind))}), an entry point of {ENTRY_POINT_GROUPS[kind]} "
                         f"or a path module:function, got {shown(value)}")
    if value in BUILTINS[kind]:
        factory = BUILTINS[kind][value]
        return ModSpec(kind, value, f"selfattn.mods.catalogue:{factory.__name__}", "builtin", factory, False,
                       getattr(factory, ATTRIBUTE))
    if is_path(value):
        return _spec(kind, path_name(value), value, "path")
    found = entry_points(kind)
    if value in found:
        return _spec(kind, value, found[value], "entry_point")
    import difflib

    near = difflib.get_close_matches(value, names(kind), n=1)
    hint = f"; did you mean {near[0]}?" if near else ""
    raise ValueError(f"{kind}: expected one of {', '.join(names(kind))}, an entry point of {ENTRY_POINT_GROUPS[kind]} "
                     f"or a path module:function, got {value!r}{hint}")


def _spec(kind: str, name: str, target: str, source: str) -> ModSpec:
    module_name, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # an import error of the user's module: its first line
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"{kind}: cannot load {target}: {type(exc).__name__}: {first}") from None
    if not callable(obj):
        raise ValueError(f"{kind}: {target} is a {type(obj).__name__}, not a function {signature(kind)} or a factory of one")
    return ModSpec(kind, name, target, source, obj, is_direct(obj, kind), getattr(obj, ATTRIBUTE, ModDeclaration()))


def bind(kind: str, value: Any, options: Mapping[str, Any] | None = None) -> BoundMod | None:
    """The function `value` names with its `options` (config `mask.<param>`); None for `none`."""
    if value == NONE:
        if options:
            raise ValueError(f"{kind}.{next(iter(options))}: {kind}=none takes no parameters")
        return None
    return resolve(kind, value).bind(options or {})


def check_name(kind: str) -> Any:
    """A `Point` field's parser: the name as typed, when it resolves (a path is imported to check it)."""
    def check(value: Any) -> Any:
        if value != NONE:
            resolve(kind, value)
        return value

    return check


def fast_path(kind: str, value: Any, options: Mapping[str, Any]) -> dict[str, Any] | None:
    """The axes a built-in with a fast path stands for (`mask=causal` -> {"causal": True}), else None."""
    if not isinstance(value, str) or value not in BUILTINS[kind]:
        return None
    spec = resolve(kind, value)
    if spec.declaration.fast_path is None:
        return None
    return spec.declaration.fast_path(spec.check_options(options))
