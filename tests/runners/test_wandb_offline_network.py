"""wandb.mode=offline makes no network attempt: a sweep run in a network namespace with only loopback, its
connect() calls traced, tries no address but the loopback's (runners/wandb_log.py, OFFLINE_ENV)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from runner_helpers import ROOT, sweep_cmd


def _can_trace_in_a_namespace() -> bool:
    if not (shutil.which("unshare") and shutil.which("strace")):
        return False
    return subprocess.run(["unshare", "-n", "strace", "-qq", "-e", "trace=connect", "true"],
                          capture_output=True).returncode == 0


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(not _can_trace_in_a_namespace(), reason="needs unshare -n (root or user namespaces) and strace")
def test_an_offline_sweep_tries_no_address_beyond_loopback(tmp_path):
    trace = tmp_path / "connect.trace"
    cmd = ["unshare", "-n", "strace", "-f", "-qq", "-e", "trace=connect", "-o", str(trace),
           *sweep_cmd("-m", "backend=naive,sdpa", "seq_len=64", "head_dim=16", "heads=1", "wandb.mode=offline",
                      f"hydra.sweep.dir={tmp_path / 'sweep'}", fake=True)]
    # not the test session's WANDB_MODE=offline (tests/conftest.py), which hides the lookup: only the command's key
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "warning: wandb off" not in out.stderr  # wandb ran: its runs are in the sweep folder
    assert list((tmp_path / "sweep").glob("wandb/offline-run-*")), list((tmp_path / "sweep").iterdir())
    attempts = [line for line in trace.read_text().splitlines() if "connect(" in line
                and "AF_INET" in line and not re.search(r'inet_addr\("127\.|inet_pton\(AF_INET6, "::1"', line)]
    assert attempts == [], attempts
