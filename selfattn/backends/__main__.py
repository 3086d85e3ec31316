"""`python -m selfattn.backends [PATH ...]`: every back end, where it came from, and whether it can run here.

Lists the built-ins, every installed entry point of the group `selfattn.backends` (refused ones with the
reason), and each path `module:function` given as an argument; the attention variants each declares
(selfattn/variants.py), and for each device type of this machine yes, or why not (a plugin that fails to
import says its error; one whose declared environment is missing says "cpu: no (needs TRITON_INTERPRET=1)").
Exits 2 when a name given as an argument is refused, 1 when one cannot be loaded.
"""

from __future__ import annotations

import sys

from selfattn.backends.discovery import BUILTIN_NAMES, describe_name, entry_points, refused_entry_points

SOURCE_WORDS = {"builtin": "built in", "entry_point": "entry point", "path": "path"}


def device_types() -> list[str]:
    import torch

    return ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


def describe(name: str, devices: list[str]) -> tuple[str, str, str, str, str]:
    """(name, source, where from, variants, on this machine) of back end `name` as typed."""
    from selfattn.backends.registry import get_backend

    problem = describe_name(name)
    if problem:
        return name, "path" if ":" in name else "?", "", "", f"refused: {problem}"
    entry = get_backend(name)
    where = entry.origin
    if entry.source == "entry_point":
        where = entry_points()[name].where.split(" = ", 1)[1]
    states = []
    for device in devices:
        why_not = entry.unavailable_reason(device)
        states.append(f"{device}: yes" if why_not is None else f"{device}: no ({why_not})")
    variants = ",".join(getattr(entry, "variants", ())) or "-"
    return entry.NAME, SOURCE_WORDS[entry.source], where, variants, "; ".join(states)


def listing(paths: list[str]) -> list[tuple[str, str, str, str, str]]:
    devices = device_types()
    rows = [describe(name, devices) for name in (*BUILTIN_NAMES, *sorted(entry_points()), *paths)]
    rows += [(name, "entry point", "", "", f"refused: {why}") for name, why in sorted(refused_entry_points().items())]
    return rows


def main(argv: list[str]) -> int:
    if any(arg in ("-h", "--help") for arg in argv):
        print(__doc__.strip())
        return 0
    rows = [("name", "source", "from", "variants", "on this machine"), *listing(argv)]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths)) + "  " + row[4])
    refused = [arg for arg in argv if describe_name(arg)]
    if refused:
        return 2
    from selfattn.backends.registry import BrokenBackend, get_backend

    broken = [arg for arg in argv if isinstance(get_backend(arg), BrokenBackend)]  # named, and cannot load
    return 1 if broken else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:  # Ctrl-C while a plugin imports: one line, not a traceback
        print("interrupted", file=sys.stderr)
        sys.exit(130)
