"""The command line's spelling, checked before Hydra parses it: each bad override one line naming its key.

Hydra's own messages for a malformed override name no key and leave the user to find the override
(`no viable alternative at input '[1,2'`, `LexerNoViableAltException: seq_len=１２８`), and some are a
traceback (a 5000-digit integer: Python refuses to read it). `problems` parses each override alone and says
what is wrong with it and what is allowed; runners/cli_check.py prints them (exit 2). Then, on overrides that
parse: an interpolation that names no key or resolver (`seq_len=${oops}`, which would fail in every job),
and `name`, `hydra.sweep.dir`, `hydra.run.dir` against runners/paths.py's rules (a folder must not be
empty, a file, or under one; `name` stays inside sweeps/).
"""

from __future__ import annotations

import re
import sys
import unicodedata
from pathlib import Path
from typing import Any, Iterable, Sequence

from runners import paths
from selfattn.fields import shown

GRAMMAR = ("a number, a word, a quoted string, a list [a,b], a dict {k:v}, or a sweep a,b | range(a,b) | "
           "choice(a,b)")
# Resolvers a value may call: Hydra's and OmegaConf's, and the project's (runners/config.py's register_resolvers)
RESOLVERS = ("now", "hydra", "oc.env", "oc.select", "oc.decode", "oc.create", "oc.deprecated", "oc.dict.keys",
             "oc.dict.values", "by_device", "grid_range")
_INTERPOLATION = re.compile(r"\$\{([^}]*)\}")
FOLDER_KEYS = ("hydra.sweep.dir", "hydra.run.dir")
DEFAULT_ROOT = "sweeps"  # where conf/config.yaml puts runs and sweeps, under the current folder


def key_of(override: str) -> str:
    """The key an override sets, as typed (without +, ++ or ~), quoted and cut when it is long or odd."""
    key = override.split("=", 1)[0].lstrip("+~")
    return key if key.isascii() and key.isprintable() and 0 < len(key) <= 60 else shown(key)


def override_problem(override: str) -> str:
    """'' when Hydra's grammar reads `override`, else one line: its key and what is allowed."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        OverridesParser.create().parse_overrides([override])
        return ""
    except ValueError as exc:  # not Hydra's: Python's int() refusing a huge integer
        key, value = key_of(override), override.split("=", 1)[-1]
        if "digits" in str(exc):
            return (f"{key}: an integer of {len(value.strip().lstrip('+-'))} digits; Python reads at most "
                    f"{sys.get_int_max_str_digits()} (and no axis needs more than a few)")
        return f"{key}: {shown(value)} cannot be read ({str(exc).splitlines()[0][:120]})"
    except Exception as exc:  # Hydra's OverrideParseException and what its lexer raises
        return _grammar_problem(override, exc)


def _grammar_problem(override: str, exc: Exception) -> str:
    if "=" not in override:
        return f"{shown(override)}: expected key=value (or +key=value, ~key), got no '='"
    key, value = override.split("=", 1)
    bare = key.lstrip("+~")
    if not bare.isascii():
        return f"{shown(bare)}: a key is ASCII letters, digits, _ . / @ (the config's names), got non-ASCII characters"
    odd = [c for c in value if not c.isascii()]
    if any(unicodedata.category(c) == "Nd" for c in odd):
        return f"{bare}: digits are ASCII 0-9, got {shown(value)} (full-width or other script digits)"
    bare = key_of(override)
    if value.startswith("(") and value.endswith(")"):  # a Python tuple: the grammar's pair is a list
        return f"{bare}: {shown(value)} is a tuple, which the override grammar lacks; write a pair as a list: [{value[1:-1]}]"
    why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if override in why:  # "Error parsing override 'window=...'": it names nothing the line does not
        why = "it does not parse"
    return f"{bare}: {shown(value)} is not a value the override grammar reads ({shown(why, 80)[1:-1]}); a value is {GRAMMAR}"


def interpolation_problem(key: str, value: Any, known: Iterable[str]) -> str:
    """'' unless `value` interpolates a key the config lacks or a resolver nobody registered."""
    if not isinstance(value, str):
        return ""
    known = set(known)
    for inner in _INTERPOLATION.findall(value):
        inner = inner.strip()
        if ":" in inner:
            resolver = inner.split(":", 1)[0]
            if resolver not in RESOLVERS:
                return f"{key}: {shown(value)} calls no resolver named {shown(resolver)}; known: {', '.join(RESOLVERS)}"
        elif inner.lstrip(".").split(".", 1)[0].split("[", 1)[0] not in known:
            return f"{key}: {shown(value)} refers to no key of the config ({shown(inner)}); write the value itself"
    return ""


def path_problems(parsed: Sequence[Any]) -> list[str]:
    """`name` and the folders on the command line against runners/paths.py's rules."""
    found = []
    for o in parsed:
        if o.is_delete():
            continue
        key = o.key_or_group
        values = _values(o)
        for value in values:
            if key == "name" and isinstance(value, str) and "${hydra:" in value.replace(" ", ""):
                found.append(f"name: {shown(value)} is known only inside a job (Hydra's `hydra:` resolver), but the "
                             "sweep's folder and wandb group need it before the first; write the name itself")
            elif key == "name" and not (isinstance(value, str) and "${" in value):
                found.append(paths.name_problem(value if isinstance(value, str) else str(value)))
            elif key == "hydra.sweeper.max_batch_size" and not (
                    value is None or isinstance(value, int) and not isinstance(value, bool) and value > 0):
                found.append(f"hydra.sweeper.max_batch_size: expected a positive integer (jobs launched at once) "
                             f"or null (all), got {shown(value)}")
            elif key == paths.SUBDIR_KEY and not (isinstance(value, str) and "${" in value):
                found.append(paths.subdir_problem(value))  # an interpolation: judged per job (runners/sweep.py)
            elif key in FOLDER_KEYS:
                text = "" if value is None else str(value)
                literal = text.split("${", 1)[0]  # `sweeps/x/${now:...}`: what is there before the clock
                if "${" in text:
                    literal = literal.rsplit("/", 1)[0] if "/" in literal else "."
                found.append(paths.folder_problem(key, literal if "${" in text else text))
    if not any(o.key_or_group in FOLDER_KEYS for o in parsed):  # conf/config.yaml's sweeps/<name>/<time>
        found.append(paths.folder_problem("hydra.sweep.dir (by default sweeps/ in the current folder)", DEFAULT_ROOT))
    return [f for f in found if f]


def _values(override: Any) -> list[Any]:
    try:
        return list(override.sweep_iterator()) if override.is_sweep_override() else [override.value()]
    except Exception:
        return []


def problems(overrides: Sequence[str]) -> list[str]:
    """Every override Hydra's grammar cannot read, one line each (none when the whole line parses)."""
    return [p for p in (override_problem(o) for o in overrides if not o.startswith("-")) if p]  # -m: a flag
