"""A stand-in for selfattn.measure with the same API, for runner tests that must not time anything.

`python tests/runners/fake_measure.py ARGS...` runs `runners.sweep` with it installed.
FAKE_MEASURE_SLEEP_S (env) makes each point take that long, so a test can kill a sweep mid-way.
"""

from __future__ import annotations

import json
import os
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from selfattn.measure.budget import Budget  # noqa: E402  (the real one: same fields and checks)
from selfattn.metrics import ALL, metrics_label  # noqa: E402
from selfattn.point import Point, scale_label  # noqa: E402
from selfattn.results import Row  # noqa: E402


def measure_point(point: Point, budget: Budget | None = None, metrics=ALL, timing=None) -> Row:
    sleep_s = float(os.environ.get("FAKE_MEASURE_SLEEP_S", "0"))
    time.sleep(sleep_s)
    n, d = point.seq_len, point.head_dim
    metrics = tuple(metrics)
    return Row(metrics=metrics_label(metrics), **_values(point, n, d, sleep_s, metrics))


def _values(point: Point, n: int, d: int, sleep_s: float, metrics: tuple[str, ...]) -> dict:
    """The fake row's values; a metric left out leaves its column empty, as the real one does."""
    return dict(
        status="ok", backend=point.backend, backend_options=json.dumps(dict(point.backend_options)),
        precision=point.precision, device=point.device, mode=point.mode, scope=point.scope,
        batch=point.batch, heads=point.heads, q_len=point.q_len_resolved, seq_len=n, head_dim=d,
        causal=point.causal, scale=scale_label(point.scale), scale_value=point.scale_value,
        input_std=point.input_std, seed=point.seed, time_ms=1e-6 * n * n * d,
        peak_mem_bytes=4 * n * n if "memory" in metrics else None,
        logit_std=point.scale_value * d ** 0.5 if "stability" in metrics else None, measure_s=sleep_s,
    )


def module() -> types.ModuleType:
    """What stands in for the package selfattn.measure: this Budget and measure_point, and the package's own
    folder, so the submodules the runner imports and this does not fake (selfattn.measure.device) are real."""
    import selfattn.measure

    fake = types.ModuleType("selfattn.measure")
    fake.Budget, fake.measure_point = Budget, measure_point
    fake.__path__ = selfattn.measure.__path__
    return fake


def install() -> None:
    sys.modules["selfattn.measure"] = module()


if __name__ == "__main__":
    import runpy

    install()
    sys.argv[0] = "runners.sweep"
    runpy.run_module("runners.sweep", run_name="__main__", alter_sys=True)
