"""A full disk (ENOSPC) or a lost permission (EACCES) while a row is written: nothing partial is left,
earlier rows stay, the job says so in one line, and the rerun measures exactly the points left without a row.

Root ignores folder permissions, so both are simulated where row_store writes (its fsync, its mkstemp)."""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path

import pytest

from runners import job, row_store

from test_job import BASE, ctx

SEQ_LENS = (16, 32, 48)


def leftovers(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*.tmp")]


def fail_writes_to(monkeypatch, target: str, code: int, at: str = "fsync") -> None:
    """Make row_store's writes of files named `target` fail with `code`: ENOSPC at the fsync (after the
    bytes went into the temporary file) or, at="flush", when the bytes are flushed (a file written
    without fsync, as index entries are); EACCES at the temporary file's creation."""
    if code == errno.ENOSPC and at == "flush":
        real_fdopen = row_store.os.fdopen

        class Full:
            def __init__(self, f):
                self.f = f

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return self.f.__exit__(*exc)

            def write(self, text):
                return self.f.write(text)

            def flush(self):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

            def fileno(self):
                return self.f.fileno()

        def fdopen(fd, *args, **kwargs):
            f = real_fdopen(fd, *args, **kwargs)
            return Full(f) if Path(os.readlink(f"/proc/self/fd/{fd}")).name.startswith(f".{target}.") else f

        monkeypatch.setattr(row_store.os, "fdopen", fdopen)
    elif code == errno.ENOSPC:
        real = row_store.os.fsync

        def fsync(fd):
            if Path(os.readlink(f"/proc/self/fd/{fd}")).name.startswith(f".{target}."):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(fd)

        monkeypatch.setattr(row_store.os, "fsync", fsync)
    else:
        real_mkstemp = row_store.tempfile.mkstemp

        def mkstemp(*args, prefix="", **kwargs):
            if prefix.startswith(f".{target}."):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), kwargs.get("dir"))
            return real_mkstemp(*args, prefix=prefix, **kwargs)

        monkeypatch.setattr(row_store.tempfile, "mkstemp", mkstemp)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES], ids=["ENOSPC", "EACCES"])
def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch, code):
    path = tmp_path / "row.json"
    row_store.atomic_write_text(path, '{"old": 1}')
    fail_writes_to(monkeypatch, "row.json", code)
    with pytest.raises(OSError) as caught:
        row_store.atomic_write_text(path, '{"new": 2}')
    assert caught.value.errno == code and caught.value.filename == str(path)  # the file meant, not a temporary name
    assert path.read_text() == '{"old": 1}' and leftovers(tmp_path) == []
    line = row_store.write_failure(caught.value)
    assert line == f"could not write {path}: {os.strerror(code)} ({errno.errorcode[code]})"


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES], ids=["ENOSPC", "EACCES"])
def test_a_sweep_on_a_full_disk_loses_nothing_and_the_rerun_measures_the_missing_point(
        tmp_path, fake_measure, monkeypatch, capsys, code):
    measured = []
    real = fake_measure.measure_point
    sys.modules["selfattn.measure"].measure_point = lambda p, b=None, *rest: measured.append(p.seq_len) or real(p, b, *rest)

    def sweep():
        for num, n in enumerate(SEQ_LENS):
            job.run_job({**BASE, "seq_len": n}, ctx(tmp_path, num=num))

    job.run_job({**BASE, "seq_len": SEQ_LENS[0]}, ctx(tmp_path, num=0))
    first = (tmp_path / "0" / "row.json").read_text()
    capsys.readouterr()
    with monkeypatch.context() as full:  # the disk fills up during job 1 and is freed before job 2
        fail_writes_to(full, "row.json", code)
        job.run_job({**BASE, "seq_len": SEQ_LENS[1]}, ctx(tmp_path, num=1))
    job.run_job({**BASE, "seq_len": SEQ_LENS[2]}, ctx(tmp_path, num=2))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert (f"could not write {tmp_path / '1' / 'row.json'}: {os.strerror(code)} ({errno.errorcode[code]})"
            in err[0] and "seq_len=32" in err[0] and "not recorded" in err[0]), err[0]
    assert not (tmp_path / "1" / "row.json").exists() and leftovers(tmp_path) == []
    assert (tmp_path / "0" / "row.json").read_text() == first  # earlier rows intact
    assert sorted(r["seq_len"] for r in row_store.read_rows(tmp_path)) == [16, 48]

    measured.clear()
    sweep()  # the rerun after the disk is freed: only the missing point
    assert measured == [SEQ_LENS[1]]
    rows = row_store.read_rows(tmp_path)
    assert sorted(r["seq_len"] for r in rows) == list(SEQ_LENS) and all(r["status"] == "ok" for r in rows)
    assert (tmp_path / "results.csv").read_text().count("\n") == 1 + len(SEQ_LENS)


def test_a_single_run_that_cannot_write_its_row_says_so_in_one_error(tmp_path, fake_measure, monkeypatch):
    fail_writes_to(monkeypatch, "row.json", errno.ENOSPC)
    with pytest.raises(job.RowNotWritten, match=r"^could not write .*row\.json: No space left on device \(ENOSPC\)"):
        job.run_job(BASE, ctx(tmp_path, multirun=False))
    assert leftovers(tmp_path) == [] and not list(tmp_path.rglob("row*.json"))


def test_a_full_disk_at_the_index_entry_keeps_the_row_and_the_rerun_does_not_measure_it(
        tmp_path, fake_measure, monkeypatch, capsys):
    job.run_job({**BASE, "seq_len": 16}, ctx(tmp_path, num=0))  # the index exists
    point = job.config.parse_job({**BASE, "seq_len": 32}).point_id
    with monkeypatch.context() as full:
        fail_writes_to(full, point, errno.ENOSPC, at="flush")  # index entries are written without fsync
        job.run_job({**BASE, "seq_len": 32}, ctx(tmp_path, num=1))
    assert "ENOSPC" in capsys.readouterr().err and leftovers(tmp_path) == []
    assert json.loads((tmp_path / "1" / "row.json").read_text())["seq_len"] == 32
    sys.modules["selfattn.measure"].measure_point = lambda p, b=None, *rest: pytest.fail("measured again")
    job.run_job({**BASE, "seq_len": 32}, ctx(tmp_path, num=1))
    assert "skipped" in capsys.readouterr().out
