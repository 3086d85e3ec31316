"""`python3 scripts/floor_pins.py [PYPROJECT] [EXTRA ...]`: each direct dependency pinned to its floor, one a line.

What the lowest-versions CI stage (scripts/ci_lowest.sh) installs: for every requirement of [project]
dependencies and of the named extras, `name==floor` from its `>=floor`. A requirement without a `>=` floor is
refused by name (the stage could not say which version it proves), and a name listed twice takes its highest
floor. Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

REQUIREMENT = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?P<spec>[^;]*)(?:;.*)?$")
FLOOR = re.compile(r">=\s*(?P<version>[0-9][0-9A-Za-z.+!-]*)")


def floor_of(requirement: str) -> tuple[str, str]:
    """(normalized name, floor version) of one requirement string; ValueError names it when it has no floor."""
    match = REQUIREMENT.match(requirement)
    if match is None:
        raise ValueError(f"{requirement!r}: not a requirement this script reads (name, extras, specifiers)")
    floor = FLOOR.search(match["spec"])
    if floor is None:
        raise ValueError(f"{requirement!r}: no '>=' floor: the lowest-versions stage needs one for every direct "
                         "dependency")
    return re.sub(r"[-_.]+", "-", match["name"]).lower(), floor["version"]


def _version_key(version: str) -> tuple:
    return tuple(int(part) if part.isdigit() else -1 for part in re.split(r"[.+!-]", version))


def floor_pins(pyproject: Path, extras: list[str]) -> list[str]:
    """`name==floor` for the project's dependencies and those of `extras`, in the order first listed."""
    project = tomllib.loads(pyproject.read_text())["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [extra for extra in extras if extra not in optional]
    if unknown:
        raise ValueError(f"extras {unknown}: not in [project.optional-dependencies] (has {sorted(optional)})")
    floors: dict[str, str] = {}
    for requirement in [*project.get("dependencies", []), *(r for extra in extras for r in optional[extra])]:
        name, version = floor_of(requirement)
        if name not in floors or _version_key(version) > _version_key(floors[name]):
            floors[name] = version
    return [f"{name}=={version}" for name, version in floors.items()]


def main(argv: list[str]) -> int:
    pyproject = Path(argv[0]) if argv else Path("pyproject.toml")
    try:
        print("\n".join(floor_pins(pyproject, argv[1:])))
    except (ValueError, KeyError, OSError) as exc:
        print(f"floor_pins: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
