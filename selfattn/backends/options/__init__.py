"""The built-in back ends' `Options`, declared without torch: one module per back end (`options/<name>.py`).

A back end's module imports torch; its options are plain data, so they live here, and the back end's module
re-exports them (`from selfattn.backends.naive import Options` still works). What reads options without
running anything reads them here: the command line's check (runners/cli_check.py, before torch is imported)
and the config group `backend`, whose built-in options Hydra's ConfigStore holds from these dataclasses
(runners/config.py's register_resolvers), so no YAML restates them. A built-in without a module here has no
options. The fields' `help` is what `python -m selfattn.backends` and docs/api.md show.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from selfattn.fields import config_fields, default_of


def builtin_options_type(name: str) -> type | None:
    """Built-in back end `name`'s `Options` (from selfattn/backends/options/<name>.py), None when it has none."""
    module = f"{__name__}.{name}"
    if importlib.util.find_spec(module) is None:
        return None
    return importlib.import_module(module).Options


def builtin_node(name: str) -> dict[str, Any]:
    """The config group `backend`'s option for built-in `name`: its name and every config key at its default
    (a value the harness derives, FP8's format, is no key)."""
    options = builtin_options_type(name)
    keys = config_fields(options) if options is not None else []
    return {"name": name, **{f.name: default_of(f) for f in keys}}
