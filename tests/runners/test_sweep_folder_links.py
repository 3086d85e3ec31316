"""A sweep folder others can write into cannot be turned against its user (runners/folder_lock.py, row_store.py).

Through the real command line (the fake measure: nothing timed): a symbolic link planted as the folder's lock,
its reserve file, multirun.yaml or a job folder leaves its target byte-identical; a `hydra.sweep.subdir` that
leads out of the sweep folder is refused in one line, exit 2, with nothing made outside; a planted row file
with an unknown status or a negative time is named and its point measured again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner_helpers import run_sweep

GRID = ("-m", "backend=naive,sdpa", "seq_len=64", "head_dim=16", "heads=1")


def _victim(tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    target.write_bytes(b"the user's own file\n")
    return target


@pytest.mark.parametrize("name", [".sweep.lock", ".results.reserve", "multirun.yaml", ".results.lock", ".points"])
def test_a_link_planted_for_a_file_of_the_folder_is_refused_and_its_target_untouched(tmp_path, name):
    folder, target = tmp_path / "sweep", _victim(tmp_path, "victim")
    folder.mkdir()
    (folder / name).symlink_to(target)
    out = run_sweep(*GRID, f"hydra.sweep.dir={folder}", fake=True, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip() == (f"error: hydra.sweep.dir: could not write {folder / name}: it is a symbolic link, "
                                  "which the harness never writes through in a sweep folder (ELOOP); nothing was "
                                  "measured")
    assert target.read_bytes() == b"the user's own file\n" and not (folder / "0").exists()


def test_a_job_folder_planted_as_a_link_gets_no_row_and_the_sweep_goes_on(tmp_path):
    folder, elsewhere = tmp_path / "sweep", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    (folder / "0").symlink_to(elsewhere)
    out = run_sweep(*GRID, f"hydra.sweep.dir={folder}", fake=True, timeout=120)
    assert out.returncode == 1, out.stderr[-2000:]
    assert list(elsewhere.iterdir()) == []  # no row.json written through the link
    assert f"could not write {folder / '0'}: it is a symbolic link" in out.stderr
    assert "once the link is removed, the same command measures" in out.stderr
    assert json.loads((folder / "1" / "row.json").read_text())["status"] == "ok"  # the other point: its row


@pytest.mark.parametrize("subdir", ["../x", "/tmp/x", "a/../../x", "."])
def test_a_subdir_leading_out_of_the_sweep_folder_is_refused_before_hydra_starts(tmp_path, subdir):
    out = run_sweep(*GRID, f"hydra.sweep.dir={tmp_path / 'sweep'}", f"hydra.sweep.subdir={subdir}", fake=True)
    assert out.returncode == 2
    assert out.stderr.strip() == ("error: hydra.sweep.subdir: a folder inside the sweep folder (plain parts joined by "
                                  f"/, no '..', not absolute, not empty), got {subdir!r}")
    assert not (tmp_path / "sweep").exists()


def test_a_subdir_interpolated_out_of_the_sweep_folder_is_refused_before_its_folder_is_made(tmp_path):
    out = run_sweep(*GRID, f"hydra.sweep.dir={tmp_path / 'a' / 'sweep'}", "hydra.sweep.subdir=${name}/../../x",
                    fake=True)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1] == (
        f"error: hydra.sweep.subdir: the job's folder {tmp_path / 'a' / 'x'} is not inside the sweep folder "
        f"{tmp_path / 'a' / 'sweep'}")
    assert not (tmp_path / "a" / "x").exists()


@pytest.mark.parametrize("change, why", [
    ({"status": "bogus"}, "status 'bogus' is not one of ok, oom"),
    ({"time_ms": -5}, "column 'time_ms' is -5: it cannot be negative"),
])
def test_a_planted_row_file_is_named_and_its_point_measured_again(tmp_path, change, why):
    folder = tmp_path / "sweep"
    assert run_sweep(*GRID, f"hydra.sweep.dir={folder}", fake=True).returncode == 0
    row_file = folder / "1" / "row.json"
    row = json.loads(row_file.read_text())
    row_file.write_text(json.dumps({**row, **change}))
    out = run_sweep(*GRID, f"hydra.sweep.dir={folder}", fake=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"warning: {row_file} holds no valid row ({why}" in out.stderr, out.stderr
    assert "[2/2] sdpa" in out.stdout  # measured again
    assert json.loads(row_file.read_text())["status"] == "ok"
