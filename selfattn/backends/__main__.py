"""`python -m selfattn.backends [--json] [PATH ...]`: every back end, where it came from, and whether it can run here.

Lists the built-ins, every installed entry point of the group `selfattn.backends` (refused ones with the
reason), and each path `module:function` or `file.py:function` given as an argument; what each declares (the
mask arguments it honours, `all` for the four, then the mask functions it runs; its precisions and whether it
takes GQA and a backward pass, per device type where they differ; the attention variants of selfattn/variants.py),
and for each device type of this machine yes, or why not (a plugin that fails to import says its error; one whose
declared environment is missing says "cpu: no (needs TRITON_INTERPRET=1)").
`--json` prints the same back ends as one JSON document: each one's whole declaration (its options with
their defaults, choices and help; hooks by their `module:function`) and, for cpu and cuda, whether it can
run on this machine and why not (selfattn/backends/capability.py: the reason its points' rows would give).
Exits 2 when a name given as an argument is refused, 1 when one cannot be loaded.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

from selfattn.backends.contract import DEVICE_TYPES, MASK_ARGUMENTS, MASK_FUNCTIONS
from selfattn.backends.discovery import BUILTIN_NAMES, describe_name, entry_points, refused_entry_points

SOURCE_WORDS = {"builtin": "built in", "entry_point": "entry point", "path": "path"}


def device_types() -> list[str]:
    import torch

    return ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


def why_not_here(entry: Any, device: str) -> str | None:
    """Why `entry` cannot run on device type `device` of this machine, or None (the listing's cell)."""
    from selfattn.backends.capability import unavailable

    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return "no CUDA device is available to this process"
    return unavailable(entry, device)


def where_from(entry: Any) -> str:
    """`module:function` of a back end, and the package of an entry point's."""
    if entry.source == "entry_point":
        return entry_points()[entry.name].where.split(" = ", 1)[1]
    return entry.origin


HEADER = ("name", "source", "from", "masks", "dtypes", "gqa", "backward", "variants", "on this machine")


def _per_device(value: Any, text: Any) -> str:
    """A declared fact as one cell: `text(value)`, or `cpu:... cuda:...` where it is a mapping per device type."""
    if isinstance(value, dict):
        return " ".join(f"{device}:{text(v)}" for device, v in value.items())
    return text(value)


def declared(entry: Any) -> tuple[str, str, str, str, str]:
    """(masks, dtypes, gqa, backward, variants) as the listing shows what `entry` declares ('-' for none)."""
    if entry.broken:
        return ("",) * 5
    d = entry.declaration
    # `all` stands for the four mask arguments; the mask functions it runs follow them (`all,mask_mod`)
    arguments = [m for m in d.masks if m in MASK_ARGUMENTS]
    functions = [m for m in MASK_FUNCTIONS if m in d.masks]
    masks = ",".join((["all"] if set(arguments) == set(MASK_ARGUMENTS) else arguments) + functions) or "-"
    yes = lambda flag: "yes" if flag else "no"  # noqa: E731
    return (masks, _per_device(d.dtypes, lambda v: ",".join(v) or "-"), yes(d.gqa), _per_device(d.backward, yes),
            ",".join(d.variants) or "-")


def describe(name: str, devices: list[str]) -> tuple[str, ...]:
    """(name, source, where from, masks, dtypes, gqa, backward, variants, on this machine) of back end `name` as
    typed (HEADER)."""
    from selfattn.backends.registry import get_backend

    problem = describe_name(name)
    if problem:
        return name, "path" if ":" in name else "?", "", "", "", "", "", "", f"refused: {problem}"
    entry = get_backend(name)
    states = []
    for device in devices:
        why = why_not_here(entry, device)
        states.append(f"{device}: yes" if why is None else f"{device}: no ({why})")
    return (entry.name, SOURCE_WORDS[entry.source], where_from(entry), *declared(entry), "; ".join(states))


def names(paths: list[str]) -> list[str]:
    return [*BUILTIN_NAMES, *sorted(entry_points()), *paths]


def listing(paths: list[str]) -> list[tuple[str, ...]]:
    devices = device_types()
    rows = [describe(name, devices) for name in names(paths)]
    rows += [(name, "entry point", *[""] * 6, f"refused: {why}") for name, why in sorted(refused_entry_points().items())]
    return rows


def _plain(value: Any) -> Any:
    """A declaration's value as JSON: tuples as lists, a function or class by its `module:name`."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(value):
        return f"{getattr(value, '__module__', '?')}:{getattr(value, '__qualname__', repr(value))}"
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def _options(options_type: type) -> list[dict[str, Any]]:
    from selfattn.fields import default_of

    return [{"name": f.name, "default": _plain(default_of(f)), "choices": _plain(f.metadata.get("choices")),
             "help": f.metadata.get("help", "")} for f in dataclasses.fields(options_type)]


def as_json(name: str) -> dict[str, Any]:
    """One back end's record: name, source, origin, error, its whole declaration, and per device type whether it
    can run on this machine and why not."""
    from selfattn.backends.registry import get_backend

    problem = describe_name(name)
    if problem:
        return {"name": name, "refused": problem}
    entry = get_backend(name)
    declaration = {f.name: _plain(getattr(entry.declaration, f.name)) for f in dataclasses.fields(entry.declaration)}
    declaration["options"] = _options(entry.options_type)
    here = {device: {"can_run": why is None, "why_not": why}
            for device in DEVICE_TYPES for why in [why_not_here(entry, device)]}
    return {"name": entry.name, "source": entry.source, "origin": where_from(entry), "error": entry.error,
            "declaration": declaration, "defaulted": list(entry.defaulted), "here": here}


def main(argv: list[str]) -> int:
    if any(arg in ("-h", "--help") for arg in argv):
        print(__doc__.strip())
        return 0
    paths = [arg for arg in argv if arg != "--json"]
    unknown = [arg for arg in paths if arg.startswith("-")]
    if unknown:
        print(f"error: {unknown[0]}: unknown option (allowed: --json, -h)", file=sys.stderr)
        return 2
    if "--json" in argv:
        backends = [as_json(name) for name in names(paths)]
        backends += [{"name": name, "source": "entry_point", "refused": why}
                     for name, why in sorted(refused_entry_points().items())]
        print(json.dumps({"backends": backends}, indent=2))
    else:
        rows = [HEADER, *listing(paths)]
        last = len(HEADER) - 1  # "on this machine": as long as its reason, never padded
        widths = [max(len(row[i]) for row in rows) for i in range(last)]
        for row in rows:
            print("  ".join(cell.ljust(width) for cell, width in zip(row[:last], widths)) + "  " + row[last])
    if any(describe_name(arg) for arg in paths):
        return 2
    from selfattn.backends.registry import get_backend

    return 1 if any(get_backend(arg).broken for arg in paths) else 0  # named, and cannot load


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:  # Ctrl-C while a plugin imports: one line, not a traceback
        print("interrupted", file=sys.stderr)
        sys.exit(130)
