"""Path plugins that end, crash or hang the process they run in (tests/runners/test_isolate*.py).

Each is what a real kernel does wrong: `exits` calls sys.exit(0), `os_exit` os._exit(3), `aborts` os.abort(),
`segfaults` reads address 0, `sleeps` sleeps 120 s, `spins` never returns, `hog` allocates until it fails;
`raises` raises an ordinary error; `fine` and `fine_too` are correct, the ordinary points around them. `MISBEHAVING_PID_FILE`, when set, gets
the process id of the process that runs a misbehaving call (so a test can tell it was stopped).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

import torch


def fine(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    k, v = (t.repeat_interleave(q.shape[1] // k.shape[1], 1) for t in (k, v))
    s = torch.einsum("bhmd,bhnd->bhmn", q, k) * scale
    if causal:
        m, n = q.shape[2], k.shape[2]
        s = s.masked_fill(~torch.ones(m, n, dtype=torch.bool, device=q.device).tril(n - m), float("-inf"))
    return torch.einsum("bhmn,bhnd->bhmd", s.softmax(-1), v)


fine_too = fine


def _say_pid() -> None:
    path = os.environ.get("MISBEHAVING_PID_FILE")
    if path:
        with open(path, "w") as f:
            f.write(str(os.getpid()))


def exits(q, k, v, **kw):
    sys.exit(0)


def os_exit(q, k, v, **kw):
    os._exit(3)


def aborts(q, k, v, **kw):
    os.abort()


def segfaults(q, k, v, **kw):
    ctypes.string_at(0)


def sleeps(q, k, v, **kw):
    _say_pid()
    time.sleep(120)
    return fine(q, k, v, **kw)


def spins(q, k, v, **kw):
    _say_pid()
    while True:
        pass


def hog(q, k, v, **kw):
    kept = []
    while True:  # 256 MiB at a time, each written (resident), until an allocation fails
        kept.append(torch.ones(2**28, dtype=torch.uint8))


def raises(q, k, v, **kw):
    raise RuntimeError("kernel raised")
