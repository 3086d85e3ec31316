"""The isolated worker's memory limit comes from the container's cgroup (runners/cgroup_memory.py), read through
the function the worker calls (runners/isolate_worker.memory_limit): a fake cgroup tree in a temp folder standing
for /sys/fs/cgroup, both layouts; and, where this machine lets a test make a child memory cgroup (root, a
writable memory controller), a sweep inside a 3 GiB one whose allocating plugin gets an `oom` row from the
limit instead of the kernel's out-of-memory killer (`crashed`)."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from runners import cgroup_memory, isolate_worker

GiB = 2**30
HOST_FREE = 64 * GiB  # what MemAvailable says in the fake: more than any cgroup below
MAPPED = GiB  # what the worker maps before the point, in the fake


@pytest.fixture
def fake_tree(tmp_path, monkeypatch):
    """A temp folder as /sys/fs/cgroup and a temp file as /proc/self/cgroup; the host's MemAvailable fixed."""
    monkeypatch.setattr(cgroup_memory, "CGROUP_ROOT", tmp_path / "cgroup")
    monkeypatch.setattr(cgroup_memory, "PROC_CGROUP", tmp_path / "proc_self_cgroup")
    monkeypatch.setattr(cgroup_memory, "host_available_bytes", lambda: HOST_FREE)
    monkeypatch.setattr(isolate_worker, "_mapped_bytes", lambda: MAPPED)
    return tmp_path


def _write(folder: Path, **files: object) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_", ".", 1)).write_text(f"{text}\n")


def _worker_limit() -> int | None:
    before = resource.getrlimit(resource.RLIMIT_AS)
    with isolate_worker.memory_limit("cpu", 0.5) as limit:
        assert limit is None or resource.getrlimit(resource.RLIMIT_AS)[0] == limit  # set while the point runs
    assert resource.getrlimit(resource.RLIMIT_AS) == before  # and lifted after it
    return limit


def test_v2_the_tightest_limit_up_the_tree_counts_and_max_means_none(fake_tree):
    (fake_tree / "proc_self_cgroup").write_text("0::/user.slice/job\n")
    root = fake_tree / "cgroup"
    _write(root / "user.slice" / "job", memory_max="max", memory_current=5 * GiB)
    _write(root / "user.slice", memory_max=3 * GiB, memory_current=2 * GiB, memory_stat="anon 1\ninactive_file 1024")
    assert _worker_limit() == MAPPED + (GiB + 1024) // 2  # half the parent's room, its page cache counted
    _write(root / "user.slice", memory_max="max")
    assert _worker_limit() == MAPPED + HOST_FREE // 2  # "max" everywhere: no cgroup limit, the host's
    with isolate_worker.memory_limit("cuda", 0.5) as limit:
        assert limit is None


def test_v1_the_memory_controllers_limit_and_its_huge_value_means_none(fake_tree):
    (fake_tree / "proc_self_cgroup").write_text("5:cpu,cpuacct:/slurm\n4:memory:/slurm/job_7\n0::/\n")
    job = fake_tree / "cgroup" / "memory" / "slurm" / "job_7"
    _write(job, memory_limit_in_bytes=2 * GiB, memory_usage_in_bytes=GiB // 2, memory_stat="total_inactive_file 0")
    assert _worker_limit() == MAPPED + (3 * GiB // 2) // 2
    _write(job, memory_limit_in_bytes=9223372036854771712)  # v1's "no limit"
    assert _worker_limit() == MAPPED + HOST_FREE // 2


def test_no_cgroup_files_at_all_is_the_hosts_memory(fake_tree):
    (fake_tree / "proc_self_cgroup").write_text("0::/\n")
    assert _worker_limit() == MAPPED + HOST_FREE // 2


def _child_memory_cgroup() -> tuple[Path, str] | None:
    """A fresh child of this process's memory cgroup (v2 where it is the memory controller's, else v1) and the
    file its limit goes in; None where this machine does not allow one."""
    if os.geteuid() != 0:
        return None
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    root = Path("/sys/fs/cgroup")
    for line in lines:
        hierarchy, controllers, path = line.split(":", 2)
        if hierarchy == "0" and (root / "cgroup.controllers").is_file() and \
                "memory" in (root / path.lstrip("/") / "cgroup.controllers").read_text().split():
            parent, limit_file = root / path.lstrip("/"), "memory.max"
        elif "memory" in controllers.split(","):
            parent, limit_file = root / "memory" / path.lstrip("/"), "memory.limit_in_bytes"
        else:
            continue
        child = parent / f"selfattn-test-{os.getpid()}"
        try:
            child.mkdir()
        except OSError:
            return None
        return child, limit_file
    return None


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_in_a_3_gib_cgroup_an_allocating_plugin_meets_the_limit_not_the_oom_killer(tmp_path):
    made = _child_memory_cgroup()
    if made is None:
        pytest.skip("this machine does not let a test make a child memory cgroup (not root, or no memory controller)")
    child, limit_file = made
    root_dir = Path(__file__).resolve().parents[2]
    try:
        (child / limit_file).write_text(str(3 * GiB))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root_dir), str(Path(__file__).parent)]),
               "HYDRA_FULL_ERROR": "0"}
        enter = f"echo $$ > {child / 'cgroup.procs'} && exec \"$@\""
        probe = subprocess.run(["sh", "-c", enter, "sh", sys.executable, "-c",
                                "from runners import cgroup_memory; print(cgroup_memory.cgroup_room_bytes())"],
                               cwd=root_dir, env=env, capture_output=True, text=True, timeout=120)
        room = int(probe.stdout.strip())
        assert 0 < room <= 3 * GiB, probe
        out = subprocess.run(["sh", "-c", enter, "sh", sys.executable, "-m", "runners.sweep", "-m",
                              "backend=misbehaving:hog", "experiment=smoke", "report=false",
                              f"hydra.sweep.dir={tmp_path / 'hog'}"],
                             cwd=root_dir, env=env, capture_output=True, text=True, timeout=500)
        row = pd.read_csv(tmp_path / "hog" / "results.csv", keep_default_na=False).iloc[0]
        assert row["status"] == "oom", (row["status"], row["error"], out.stderr[-2000:])
        limit_gib = float(re.search(r"memory limit of ([\d.]+) GiB", row["error"]).group(1))
        host_gib = cgroup_memory.host_available_bytes() / GiB
        assert limit_gib < host_gib * 0.8, (limit_gib, host_gib)  # not from the host's MemAvailable
    finally:
        for pid in (child / "cgroup.procs").read_text().split() if (child / "cgroup.procs").exists() else ():
            try:  # a process the test started, left in the cgroup: it cannot be removed while one is there
                os.kill(int(pid), 9)
            except OSError:
                pass
        for _ in range(50):  # the kernel frees a cgroup a moment after its last process ends
            try:
                child.rmdir()
                break
            except OSError:
                time.sleep(0.1)
