"""A path plugin whose module never finishes importing (tests/runners/test_isolation_holds.py)."""

import time

time.sleep(600)


def attn(q, k, v, **kw):  # never reached
    return q
