"""A plugin module's import, within a time limit in a process that must not hang on it.

The sweep's own process imports a plugin's module while Hydra composes a job (its options make the job's
config and the point's id). A module whose import hangs (a lock, a network mount, a bug) would stall the
sweep there. So that process (runners/sweep.py sets ENV_LIMIT, read here once) imports a plugin in a thread and waits at
most LIMIT_S seconds: past it, ImportHangs (the back end is a broken one saying so) and the module stays
that thread's, never imported again by this process. The isolated worker keeps plain imports (LIMIT_S
None): its point's time limit stops a hang there, as a `timeout` row. Stdlib only.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from types import ModuleType
from typing import Any, Callable

ENV_LIMIT = "SELFATTN_PLUGIN_IMPORT_S"
LIMIT_S: float | None = float(os.environ[ENV_LIMIT]) if os.environ.get(ENV_LIMIT) else None  # None: a plain import
_hung: dict[str, threading.Thread] = {}  # module -> the thread still importing it


class ImportHangs(Exception):
    """The module's import did not finish within LIMIT_S."""


def imported(module_name: str, load: Callable[[str], ModuleType] = importlib.import_module) -> ModuleType:
    """load(module_name) (an import by default; a file plugin's loader), within LIMIT_S where set (else
    ImportHangs)."""
    if LIMIT_S is None or module_name in sys.modules and module_name not in _hung:
        return load(module_name)
    thread = _hung.get(module_name)
    if thread is None:
        done: dict[str, Any] = {}

        def run() -> None:
            try:
                done["module"] = load(module_name)
            except BaseException as err:  # noqa: BLE001 - handed to the caller, which judges it
                done["error"] = err

        thread = threading.Thread(target=run, name=f"import {module_name}", daemon=True)
        thread.start()
        thread.join(LIMIT_S)
        if not thread.is_alive():
            if "error" in done:
                raise done["error"]
            return done["module"]
        _hung[module_name] = thread
    if thread.is_alive():
        raise ImportHangs(f"its import did not finish within {LIMIT_S:g} s (it hangs, or is that slow)")
    del _hung[module_name]  # it finished late: imported now, from sys.modules
    return load(module_name)
