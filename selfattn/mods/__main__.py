"""`python -m selfattn.mods`: every mask and score function a sweep can name, with its parameters.

    python -m selfattn.mods                         # the table: kind, name, source, parameters, fast path
    python -m selfattn.mods --json                  # the same as JSON
    python -m selfattn.mods my_masks:dilated        # one function by path (or name): its parameters
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from selfattn.mods.contract import KINDS, NONE
from selfattn.mods.discovery import ENTRY_POINT_GROUPS, names, resolve


def describe(kind: str, name: str) -> dict[str, Any]:
    """One function's line: where it is from, its parameters and defaults, and the axes it stands for."""
    try:
        spec = resolve(kind, name)
    except ValueError as exc:
        return {"kind": kind, "name": name, "source": "", "from": "", "parameters": "", "fast_path": "",
                "help": str(exc)}
    fast = spec.declaration.fast_path
    axes = ""
    if fast is not None:
        try:
            axes = " ".join(f"{k}={json.dumps(v)}" for k, v in fast({p.name: p.default for p in spec.params}).items())
        except ValueError:
            axes = ""
    return {"kind": kind, "name": spec.name, "source": spec.source, "from": spec.origin,
            "parameters": " ".join(f"{kind}.{p.name}={p.default}" for p in spec.params),
            "fast_path": axes or ("" if fast is None else "-"), "help": spec.help}


def table(rows: list[dict[str, Any]]) -> str:
    from tabulate import tabulate

    shown = [{"kind": r["kind"], "name": r["name"], "source": r["source"], "parameters (defaults)": r["parameters"],
              "as today's axes": r["fast_path"], "what it sees / does": r["help"]} for r in rows]
    return tabulate(shown, headers="keys", tablefmt="plain")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m selfattn.mods", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="functions to describe (names or paths module:function)")
    parser.add_argument("--kind", choices=KINDS, default=None, help="only masks, or only score mods")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    kinds = [args.kind] if args.kind else list(KINDS)
    if args.names:
        rows = [describe(args.kind or "mask", name) for name in args.names]
    else:
        rows = [describe(kind, name) for kind in kinds for name in names(kind) if not (kind == "score_mod" and name == NONE)]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(table(rows))
        print(f"\nmask=NAME mask.PARAM=VALUE, score_mod=NAME score_mod.PARAM=VALUE; plugins: a path module:function, "
              f"or an entry point of {' / '.join(ENTRY_POINT_GROUPS.values())} (docs/plugins.md)")
    return 1 if any(not r["source"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
