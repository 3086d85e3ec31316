"""Which back-end names exist, answered without importing torch or any plugin.

A back end is named one of three ways:
- built in: `naive`, `sdpa`, `chunked`, `flex`, `triton` (modules in this package, BUILTIN_NAMES);
- an entry point in the group `selfattn.backends` of an installed package (`fast = my_pkg.attn:fast`
  in its pyproject.toml), read from the installed packages' metadata (importlib.metadata);
- a path, `module:attribute` (`my_pkg.attn:fast`), imported when a job first runs it, or a file's path
  and attribute (`plugins/attn.py:fast`, relative to the working folder, or absolute), loaded from that
  file when a job first runs it, with no package and no PYTHONPATH needed.

A back end's NAME is what its rows, figures and point ids carry: the built-in's name, the entry point's
name, or a path's last attribute (`my_pkg.attn:fast` and `plugins/attn.py:fast` are named `fast`). So a
function moved from a file to a module, or to an entry point of the same name, keeps its point ids, and
resume finds its rows.

`describe_name(name)` is the one answer to "is this back-end name known?": None, or why not in one line.
Everything here is pure Python and cheap: the sweep's configuration checks, the listing and the analysis
read it.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
from dataclasses import dataclass
from functools import lru_cache

from selfattn.fields import shown

ENTRY_POINT_GROUP = "selfattn.backends"
# The built-ins, in the order of tables, legends and colours everywhere.
BUILTIN_NAMES: tuple[str, ...] = ("naive", "sdpa", "chunked", "flex", "triton")
SOURCES = ("builtin", "entry_point", "path")
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_PATH = re.compile(rf"^{_IDENTIFIER}(\.{_IDENTIFIER})*:{_IDENTIFIER}(\.{_IDENTIFIER})*$")
# a file path plugin: anything ending in .py, then `:attribute` (the last colon splits: C:/x.py:f stays whole)
_FILE_PATH = re.compile(rf"^(?P<file>.+\.py):(?P<attribute>{_IDENTIFIER}(\.{_IDENTIFIER})*)$")


@dataclass(frozen=True)
class EntryPoint:
    """One entry point of the group: its name, its target (`module:attr`) and the package that declares it."""

    name: str
    target: str
    package: str

    @property
    def where(self) -> str:
        return f"entry point {self.name} = {self.target} (package {self.package})"


def is_path(name: str) -> bool:
    """Whether `name` is spelt as a path, `module:attribute` (its spelling may still be wrong)."""
    return isinstance(name, str) and ":" in name


def is_file_path(name: str) -> bool:
    """Whether path `name` names a file, `folder/file.py:function` (its file may still be missing)."""
    return is_path(name) and name.rsplit(":", 1)[0].endswith(".py")


def file_of(path: str) -> str:
    """The absolute file of a file path plugin (`plugins/attn.py:fast` -> /cwd/plugins/attn.py), resolved
    against this process's working folder (a sweep's jobs and workers keep the folder it started in)."""
    return os.path.realpath(os.path.expanduser(path.rsplit(":", 1)[0]))


def file_module_name(path: str) -> str:
    """The module name a file path plugin is loaded under: the file's stem and a hash of its absolute path, so
    every process (a worker, a resumed sweep) loads one file under one name (its options unpickle there) and
    two files of one stem stay apart. Not importable by that name: the registry loads the file itself."""
    file = file_of(path)
    stem = re.sub(r"\W", "_", os.path.basename(file)[: -len(".py")]) or "plugin"
    return f"selfattn_file_{stem}_{hashlib.sha1(file.encode()).hexdigest()[:10]}"


def same_target(a: str, b: str) -> bool:
    """Whether two targets as typed name one function (`plugins/a.py:f` and `./plugins/a.py:f` do)."""
    if is_file_path(a) and is_file_path(b):
        return file_of(a) == file_of(b) and a.rsplit(":", 1)[1] == b.rsplit(":", 1)[1]
    return a == b


def path_name(path: str) -> str:
    """The name a path's back end goes by: its last attribute (`my_pkg.attn:fast` -> `fast`)."""
    return path.rsplit(":", 1)[-1].rsplit(".", 1)[-1]


def backend_name(name: str) -> str:
    """The name rows and point ids carry for back end `name` as typed (a path: its attribute)."""
    return path_name(name) if is_path(name) else name


def backend_source(name: str) -> str:
    """builtin | entry_point | path, from the spelling alone (an unknown plain name reads entry_point)."""
    if is_path(name):
        return "path"
    return "builtin" if name in BUILTIN_NAMES else "entry_point"


@lru_cache(maxsize=1)
def _entry_points() -> tuple[EntryPoint, ...]:
    """Every entry point of the group in the installed packages (metadata only: nothing is imported)."""
    from importlib import metadata  # here, not at the top: the report and a refused typo never ask, and the
    # module and the email package it imports take tens of milliseconds
    found = []
    for dist in metadata.distributions():
        for ep in dist.entry_points:
            if ep.group == ENTRY_POINT_GROUP:
                found.append(EntryPoint(ep.name, ep.value, dist.metadata["Name"] or "?"))
    # one package seen twice on sys.path (an editable install beside a copy) declares nothing twice
    return tuple(sorted(set(found), key=lambda e: (e.name, e.package, e.target)))


def refresh() -> None:
    """Forget the entry points read so far (after a package was installed in this process's life)."""
    _entry_points.cache_clear()


def entry_points() -> dict[str, EntryPoint]:
    """{name: entry point} of the group, refused ones left out (see `refused_entry_points`)."""
    refused = refused_entry_points()
    return {ep.name: ep for ep in _entry_points() if ep.name not in refused}


def refused_entry_points() -> dict[str, str]:
    """{name: why refused}: a name a built-in has, or one two packages register (both sources named)."""
    by_name: dict[str, list[EntryPoint]] = {}
    for ep in _entry_points():
        by_name.setdefault(ep.name, []).append(ep)
    refused = {}
    for name, eps in by_name.items():
        if name in BUILTIN_NAMES:
            refused[name] = (f"backend: {name} is refused: {eps[0].where} has the name of the built-in back end "
                             f"selfattn.backends.{name} (rename the entry point)")
        elif len({ep.target for ep in eps}) > 1:
            refused[name] = (f"backend: {name} is refused: registered twice, by {eps[0].where} and by "
                             f"{eps[1].where} (uninstall or rename one)")
        elif not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*", name) or ":" in name:
            refused[name] = f"backend: {name!r} is refused: {eps[0].where}: a name is letters, digits, _ . + -"
    return refused


def backend_names() -> tuple[str, ...]:
    """The built-ins in their order, then the installed entry points' names, sorted."""
    return (*BUILTIN_NAMES, *sorted(entry_points()))


def describe_name(name: object) -> str | None:
    """None when back end `name` is known, else one line saying why not (and what was meant).

    Known: a built-in, an installed entry point, or a well-formed path `module:attribute` or
    `file.py:attribute` whose name (its attribute) is not a built-in's or another entry point's. Nothing is
    imported or read: whether the path's module imports (or its file exists) is the job's to find out (a failed
    import gives `unsupported` rows naming it; the command line refuses a missing file first, cli_check.py).
    """
    if not isinstance(name, str) or not name:
        return f"backend: expected a back-end name or a path module:function, got {shown(name)}"
    if is_path(name):
        if is_file_path(name):
            if not _FILE_PATH.match(name):
                return (f"backend: {shown(name)} is not a file path file.py:function "
                        "(e.g. plugins/attn.py:fast; the function a Python name)")
        elif not _PATH.match(name):
            return (f"backend: {shown(name)} is not a path module:function (e.g. my_pkg.attn:fast) "
                    "or file.py:function (e.g. plugins/attn.py:fast)")
        return collision(name)
    if name in BUILTIN_NAMES:  # an entry point of a built-in's name is refused; the built-in stays itself
        return None
    refused = refused_entry_points()
    if name in refused:
        return refused[name]
    known = backend_names()
    if name in known:
        return None
    near = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f"; did you mean {near[0]}?" if near else ""
    return (f"backend: expected one of {', '.join(known)} or a path module:function (a plugin, "
            f"docs/plugins.md), got {shown(name)}{hint}")


def collision(path: str) -> str | None:
    """Why path `path` may not be used (its name is a built-in's or an entry point's with another target), or None."""
    name = path_name(path)
    if name in BUILTIN_NAMES:
        return (f"backend: {path} is refused: its name {name} is the built-in back end selfattn.backends.{name}'s "
                "(rename the function)")
    ep = entry_points().get(name)
    if ep is not None and ep.target != path:
        return f"backend: {path} is refused: its name {name} is taken by {ep.where} (rename one)"
    return None


def check_backend(value: object) -> str:
    """`Point.backend`'s rule: a known name (describe_name), returned as given; else ValueError."""
    problem = describe_name(value)
    if problem:
        raise ValueError(problem)
    return value  # type: ignore[return-value]
