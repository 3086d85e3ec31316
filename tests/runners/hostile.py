"""Path plugins that attack the harness that runs them (tests/runners/test_isolation_holds.py).

Each computes a correct answer (misbehaving.fine) and meanwhile does what a hostile or careless plugin does:
`forges` writes a forged `ok` sdpa row, in both the old framing (a length and a pickle) and as a line of
JSON, to every pipe it can write; `garbage` writes 5 bytes; `pickled` writes a pickle whose loading would
run a command (touching HOSTILE_MARKER); `forks` leaves a detached daemon running; `changes_state` sets torch's
threads, default dtype and seed; `probe` writes what it sees of them to HOSTILE_PROBE; `interrupts` raises
KeyboardInterrupt; `closes_std` closes fds 1 and 2.
"""

from __future__ import annotations

import fcntl
import json
import os
import pickle
import struct
import subprocess

import torch

from misbehaving import fine


def _writable_pipes() -> list[int]:
    found = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                continue
            if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY:
                found.append(fd)
        except OSError:
            continue
    return found


def _to_every_pipe(data: bytes) -> None:
    for fd in _writable_pipes():
        if fd in (1, 2):  # the test's own capture of the output
            continue
        try:
            os.write(fd, data)
        except OSError:
            pass


class _Payload:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ.get('HOSTILE_MARKER', '/tmp/hostile-marker')}",))


def forges(q, k, v, **kw):
    forged = {"status": "ok", "backend": "sdpa", "time_ms": 0.000123}
    old = pickle.dumps(("row", forged, ""))
    _to_every_pipe(struct.pack("!Q", len(old)) + old)
    for kind in ("row", "predicted"):
        _to_every_pipe(json.dumps({"kind": kind, "nonce": "0" * 32, "point_id": "", "row": forged}).encode() + b"\n")
    return fine(q, k, v, **kw)


def garbage(q, k, v, **kw):
    _to_every_pipe(b"\x00\x01abc")
    return fine(q, k, v, **kw)


def pickled(q, k, v, **kw):
    data = pickle.dumps(("row", _Payload(), ""))
    _to_every_pipe(struct.pack("!Q", len(data)) + data)
    _to_every_pipe(data + b"\n")
    return fine(q, k, v, **kw)


def forks(q, k, v, **kw):
    if not os.environ.get("HOSTILE_FORKED"):
        os.environ["HOSTILE_FORKED"] = "1"
        # a daemon started and detached (forked twice, a session of its own), holding the worker's stdout;
        # its process id goes to HOSTILE_CHILD
        child = os.environ.get("HOSTILE_CHILD", os.devnull)
        subprocess.run(["sh", "-c", f"setsid sleep 300 & echo $! > {child}"], stdin=subprocess.DEVNULL)
    return fine(q, k, v, **kw)


def changes_state(q, k, v, **kw):
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(123)
    return fine(q, k, v, **kw)


def probe(q, k, v, **kw):
    path = os.environ.get("HOSTILE_PROBE")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "threads": torch.get_num_threads(), "dtype": str(torch.get_default_dtype()),
                                "seed": torch.initial_seed()}) + "\n")
    return fine(q, k, v, **kw)


def interrupts(q, k, v, **kw):
    raise KeyboardInterrupt("the plugin's own")


def closes_std(q, k, v, **kw):
    for fd in (1, 2):
        try:
            os.close(fd)
        except OSError:
            pass
    return fine(q, k, v, **kw)


def changes_interop(q, k, v, **kw):
    try:  # settable once per process, before any inter-op work: then never again
        torch.set_num_interop_threads(max(1, torch.get_num_interop_threads() + 1))
    except RuntimeError:
        pass
    return fine(q, k, v, **kw)
