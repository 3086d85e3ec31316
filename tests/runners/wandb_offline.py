"""Read an offline wandb run back from its folder: the .wandb log's records (wandb.Api is online-only)."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path


def wandb_records(path: Path):
    """Records of a .wandb file: a 7-byte header, then LevelDB-style log blocks of protobufs."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block, pos, buf = path.read_bytes(), 32768, 7, b""
    if len(data) < 7:  # the service has created the file but not yet written its header: read it next time
        return
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if pos + 7 + length > len(data):  # wandb's service is still writing this chunk: read it next time
            return
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk  # full/first start a record, middle/last extend it
        if kind in (1, 4):
            record = pb.Record()
            try:
                record.ParseFromString(buf)
            except Exception:  # DecodeError: a record caught half written (its exit record is not there yet)
                return
            yield record


def read_run(path: Path) -> dict:
    """One run's group, job type, name, config, history steps, summary, files and artifacts (by name:
    type and {path in the artifact: the staged copy on disk})."""
    run = {"history": [], "summary": {}, "config": {}, "job_type": None, "group": None, "name": None,
           "files": set(), "artifacts": {}, "folder": path.parent, "exited": False}
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run["job_type"], run["group"] = record.run.job_type, record.run.run_group
            run["name"] = record.run.display_name
            run["config"].update({i.key: json.loads(i.value_json) for i in record.run.config.update})
        elif kind == "history":
            run["history"].append(_items(record.history.item))
        elif kind == "summary":
            run["summary"].update(_items(record.summary.update))
        elif kind == "files":
            run["files"] |= {f.path for f in record.files.files}
        elif kind == "artifact":
            contents = {c.path: Path(c.local_path) for c in record.artifact.manifest.contents}
            run["artifacts"][record.artifact.name] = (record.artifact.type, contents)
        elif kind == "exit":
            run["exited"] = True
    return run


def _items(items) -> dict:
    """{key: value}; a nested key (an image's or a table's fields) joined by '/'."""
    return {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}


def read_runs(folder: Path, timeout_s: float = 60) -> list[dict]:
    """Every offline run under folder/wandb/, once each has its exit record: `run.finish()` returns before
    wandb's service has written the run's log (a process that ends waits for it; a test reading it in-process
    must wait too)."""
    deadline = time.monotonic() + timeout_s
    while True:
        runs = [read_run(p) for p in sorted(Path(folder).glob("wandb/offline-run-*/run-*.wandb"))]
        if all(r["exited"] for r in runs) or time.monotonic() > deadline:
            return runs
        time.sleep(0.2)
