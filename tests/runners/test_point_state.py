"""What a back end changes of the process is put back after its point (runners/point_state.py), and the
isolated worker's memory limit reads the cgroup's (runners/cgroup_memory.py)."""

from __future__ import annotations

import os
import signal

import torch

from runners import cgroup_memory, point_state


def test_torch_state_rng_and_fd_2_are_put_back_and_named():
    threads, dtype, seed = torch.get_num_threads(), torch.get_default_dtype(), torch.initial_seed()
    changes = point_state.Changes()
    handler = signal.getsignal(signal.SIGTERM)
    with point_state.kept(changes, signals=(signal.SIGTERM,)):
        torch.set_num_threads(1 if threads > 1 else 2)
        torch.set_default_dtype(torch.float64)
        torch.manual_seed(123)
        torch.set_grad_enabled(False)
        signal.signal(signal.SIGTERM, lambda *a: None)
        os.close(2)
    assert (torch.get_num_threads(), torch.get_default_dtype(), torch.initial_seed()) == (threads, dtype, seed)
    assert torch.is_grad_enabled() and signal.getsignal(signal.SIGTERM) is handler
    os.fstat(2)  # open again
    note = changes.note()
    assert "num_threads" in note and "default_dtype (float32 -> float64)" in note and "grad_enabled" in note
    assert "the SIGTERM handler" in note and "fd 2 (closed)" in note and not changes.unrestorable


def test_nothing_changed_says_nothing():
    changes = point_state.Changes()
    with point_state.kept(changes):
        torch.ones(3).sum()
    assert changes.note() == ""


def test_the_cgroup_room_is_the_tightest_limit_v2_and_v1(tmp_path):
    leaf = tmp_path / "a" / "b"
    leaf.mkdir(parents=True)
    (leaf / "memory.max").write_text("max\n")
    (leaf / "memory.current").write_text("100\n")
    (tmp_path / "a" / "memory.max").write_text(str(3 * 2**30))
    (tmp_path / "a" / "memory.current").write_text(str(2**30))
    assert cgroup_memory.cgroup_room_bytes("0::/a/b\n", tmp_path) == 2 * 2**30
    (tmp_path / "a" / "memory.stat").write_text(f"anon 5\ninactive_file {2**20}\nactive_file 7\n")
    assert cgroup_memory.cgroup_room_bytes("0::/a/b\n", tmp_path) == 2 * 2**30 + 2**20  # page cache it can reclaim
    v1 = tmp_path / "memory" / "job"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(str(2**30))
    (v1 / "memory.usage_in_bytes").write_text(str(2**29))
    assert cgroup_memory.cgroup_room_bytes("4:memory:/job\n", tmp_path) == 2**29
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712")  # v1's "no limit"
    assert cgroup_memory.cgroup_room_bytes("4:memory:/job\n", tmp_path) is None
    assert cgroup_memory.cgroup_room_bytes("", tmp_path) is None
