"""A plugin's options as data, learned in a short-lived process, so that the sweep's own never runs its code.

The sweep's process needs a plugin's options while Hydra composes a job (they make the job's config and the
point's id), but the plugin's code runs only where its points run: the isolated worker, under the point's
time limit. So that process (runners/sweep.py sets ENV_LIMIT; read here once) asks a child,
`python -m selfattn.backends.describe NAME`, for the plugin's options as JSON, waits at most LIMIT_S
seconds, once per plugin per process (the registry keeps the answer), and rebuilds them as a dataclass of
`spec` fields (`options_type`), which every check in that process reads as it reads a built-in's. A field
with a `parse` function of its own (code) accepts any value here; the worker's check is the real one.

A child that does not answer in time, dies or says something that is no description leaves the plugin
`unknown` here: no options, and its points go to the worker, where the same hang or crash is the point's
`timeout` or `crashed` row. The child leads its own session, is killed (its whole group) past the limit and
dies with this process (PR_SET_PDEATHSIG), so a signal that ends the sweep while it waits ends it too.
Stdlib only, besides selfattn.fields.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from selfattn.fields import _kind, default_of, field_types, spec

ENV_LIMIT = "SELFATTN_PLUGIN_DESCRIBE_S"
LIMIT_S: float | None = float(os.environ[ENV_LIMIT]) if os.environ.get(ENV_LIMIT) else None  # None: import here
KINDS: dict[str, Any] = {"bool": bool, "int": int, "float": float, "str": str, "any": Any}
BOUNDS = ("ge", "gt", "le", "lt")
MAX_ANSWER_BYTES = 1 << 20  # a description is a few KiB: past this it is no description


@dataclass(frozen=True)
class Description:
    """What the child said of a plugin: its name, its options (a rebuilt dataclass), the plugin's own load
    error (it does not import, is no function, declares something invalid), or why nothing is known."""

    name: str
    options: type | None = None
    error: str | None = None
    unknown: str | None = None


def fields_as_data(cls: type) -> list[dict[str, Any]]:
    """The `spec` fields of an options dataclass as JSON-able data (the child's side)."""
    hints = field_types(cls)
    described = []
    for f in dataclasses.fields(cls):
        base, nullable = _kind(hints[f.name])
        meta = f.metadata
        kind = next((k for k, t in KINDS.items() if t is base), "any")
        if meta.get("parse") is not None:  # a spelling of its own: only the plugin's code can check it
            kind, nullable = "any", True
        described.append({"name": f.name, "kind": kind, "nullable": nullable, "default": _plain(default_of(f)),
                          "help": str(meta.get("help") or ""), "config": bool(meta.get("config", True)),
                          "choices": None if meta.get("choices") is None else [_plain(c) for c in meta["choices"]],
                          **{b: meta.get(b) for b in BOUNDS}})
    return described


def _plain(value: Any) -> Any:
    """A value as JSON holds it (a tuple as a list); anything else as its text."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return str(value)


def options_type(name: str, described: Any) -> type:
    """The options dataclass rebuilt from `fields_as_data`'s data; ValueError where the data is not that."""
    if not isinstance(described, list):
        raise ValueError("its options are no list")
    made = []
    for entry in described:
        if not isinstance(entry, dict) or not str(entry.get("name", "")).isidentifier() or entry.get("kind") not in KINDS:
            raise ValueError(f"an option that is no field ({str(entry)[:80]})")
        if any(entry.get(b) is not None and not isinstance(entry[b], (int, float)) for b in BOUNDS):
            raise ValueError(f"option {entry['name']}: a bound that is no number")
        choices = entry.get("choices")
        if choices is not None and not isinstance(choices, list):
            raise ValueError(f"option {entry['name']}: choices that are no list")
        base = KINDS[entry["kind"]]
        annotation = base | None if entry.get("nullable") and base is not Any else base
        default = entry.get("default")
        bounds: dict[str, Any] = {b: entry.get(b) for b in BOUNDS}
        kept: dict[str, Any] = ({"default_factory": lambda d=default: json.loads(json.dumps(d))}
                                if isinstance(default, (list, dict)) else {"default": default})
        made_spec = spec(help=str(entry.get("help", "")), choices=choices, config=bool(entry.get("config", True)),
                         **bounds, **kept)
        made.append((entry["name"], annotation, made_spec))
    return dataclasses.make_dataclass(f"{name}_Options", made, frozen=True)


def from_answer(name: str, text: str) -> Description:
    """The child's answer (one JSON object) checked and rebuilt; an answer that is not one is `unknown`."""
    try:
        answer = json.loads(text)
        if not isinstance(answer, dict) or not isinstance(answer.get("name"), str):
            raise ValueError("no description")
        error = answer.get("error")
        if error is not None:
            return Description(answer["name"], error=str(error)[:500])
        return Description(answer["name"], options=options_type(answer["name"], answer.get("options")))
    except ValueError as exc:
        return Description(name, unknown=f"its description could not be read ({str(exc)[:120]})")


def describe(name: str, limit_s: float) -> Description:
    """Back end `name` (a plugin's name as typed) described by a child process within `limit_s` seconds."""
    env = {k: v for k, v in os.environ.items() if k != ENV_LIMIT}  # the child imports the plugin itself
    proc = subprocess.Popen([sys.executable, "-m", "selfattn.backends.describe", name], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        return Description(name, unknown=f"its import did not finish within {limit_s:g} s here (it hangs, or is "
                                         "that slow)")
    finally:
        _kill_group(proc)
    if proc.returncode != 0 or not out.strip():
        return Description(name, unknown=f"its description ended with exit status {proc.returncode}")
    if len(out) > MAX_ANSWER_BYTES:
        return Description(name, unknown=f"its description was {len(out)} bytes")
    return from_answer(name, out.decode(errors="replace"))


def _kill_group(proc: subprocess.Popen) -> None:
    """The child and whatever its plugin started in its session: killed, and the child reaped."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()
