"""`python -m selfattn.backends.describe NAME`: plugin NAME's options as one line of JSON (description.py).

Started by the sweep's process, which never imports a plugin itself: this process imports it, writes
`{"name", "options"}` (or `{"name", "error"}` where it does not load) to what was its stdout, and ends with
os._exit (a plugin's threads and atexit hooks are not waited for). The plugin's own prints go nowhere: fd 1
points at /dev/null before it is imported. It dies with its parent (PR_SET_PDEATHSIG, Linux).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any


def _die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent ended before the call above
        os._exit(1)


def main(argv: list[str]) -> int:
    _die_with_parent()
    out = os.dup(1)  # the answer's descriptor, close-on-exec; fd 1 itself is the plugin's, and goes nowhere
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    name = argv[0] if argv else ""
    from selfattn.backends.description import fields_as_data
    from selfattn.backends.registry import get_backend

    answer: dict[str, Any]
    try:
        entry = get_backend(name)
        answer = ({"name": entry.name, "error": entry.error} if entry.broken else
                  {"name": entry.name, "options": fields_as_data(entry.options_type)})
    except ValueError as exc:  # not a back end's name (the sweep's process checked it before asking)
        answer = {"name": name, "error": str(exc)}
    data = (json.dumps(answer, default=str) + "\n").encode()
    view = memoryview(data)
    while view:
        view = view[os.write(out, view):]
    return 0


if __name__ == "__main__":
    os._exit(main(sys.argv[1:]))
