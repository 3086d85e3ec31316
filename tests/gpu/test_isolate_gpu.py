"""On a GPU the isolated worker owns the device for its points: the sweep's process never initialises CUDA
for them, and a crash of the worker on the device is a row like on a CPU (runners/isolate.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = '''
import json, torch
from runners import isolate
from selfattn.measure.budget import Budget
from selfattn.point import Point

budget = Budget(timing_s=0.05, accuracy_rows=4)
def run(name):
    return isolate.run_isolated(Point(backend=f"misbehaving:{name}", device="cuda", seq_len=256, heads=2,
                                      head_dim=64, precision="fp16"), budget, ("memory", "accuracy"))
ok, crashed, again = run("fine"), run("segfaults"), run("fine_too")
print(json.dumps({"ok": ok.row.status, "device": ok.row.device, "name": ok.row.device_name,
                  "crashed": [crashed.status, crashed.error], "again": again.row.status,
                  "parent_cuda": torch.cuda.is_initialized()}))
'''


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_an_isolated_cuda_point_runs_in_the_worker_and_the_parent_never_touches_the_device():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests" / "runners")])}
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["ok"] == "ok" and seen["device"] == "cuda" and seen["name"], seen
    assert seen["crashed"] == ["crashed", "the back end's process ended with SIGSEGV"], seen
    assert seen["again"] == "ok", seen  # a new worker took the device
    assert seen["parent_cuda"] is False, seen  # the sweep's process never initialised CUDA
