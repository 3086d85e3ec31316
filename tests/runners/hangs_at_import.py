"""A path plugin whose module never finishes importing (tests/runners/test_isolation_holds.py). Each process that
imports it adds its pid to $HANGS_PIDS, so the test sees which processes did (never the sweep's own)."""

import os
import time

if os.environ.get("HANGS_PIDS"):
    with open(os.environ["HANGS_PIDS"], "a") as pids:
        pids.write(f"{os.getpid()}\n")
time.sleep(600)


def attn(q, k, v, **kw):  # never reached
    return q
