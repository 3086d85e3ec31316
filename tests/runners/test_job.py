"""One job in-process (fake measurement): rows, resume, retry, invalid points, progress line."""

from __future__ import annotations

import json

import pytest

from runners import job, progress, row_store
from selfattn.metrics import ALL

BASE = {"name": "t", "backend": {"name": "naive", "upcast_softmax": False}, "precision": {"name": "fp32"},
        "device": "cpu", "batch": 1, "heads": 2, "seq_len": 64, "q_len": None, "head_dim": 16, "d_model": None,
        "causal": False, "scale": "auto", "mode": "fwd", "scope": "core", "input_std": 1.0, "seed": 0,
        "budget": {"timing_s": 0.1}, "retry_failed": False, "grids": None, "grid_point": None,
        "wandb": {"mode": "disabled"}}


def ctx(tmp_path, num=0, multirun=True, varying=("seq_len",)):
    return job.JobContext(job_dir=tmp_path / str(num), sweep_dir=tmp_path, multirun=multirun, index=num,
                          varying=list(varying), sweep_id="t/x")


def test_a_job_writes_its_row_and_the_csv(tmp_path, fake_measure, capsys):
    row = job.run_job(BASE, ctx(tmp_path))
    saved = json.loads((tmp_path / "0" / "row.json").read_text())
    assert saved["status"] == "ok" and saved["point_id"] == row["point_id"] and saved["sweep_id"] == "t/x"
    assert saved["job_wall_s"] >= saved["point_wall_s"] >= saved["measure_s"] >= 0 and saved["jobs_sharing_device"] == 1
    assert (tmp_path / "results.csv").read_text().count("\n") == 2
    assert "naive seq_len=64 fp32 -> " in capsys.readouterr().out


def test_resume_skips_done_points_and_retry_failed_reruns_failures(tmp_path, fake_measure, monkeypatch, capsys):
    job.run_job(BASE, ctx(tmp_path))
    calls = []
    real = fake_measure.measure_point
    monkeypatch.setattr(fake_measure, "measure_point", lambda p, b=None, m=ALL, *rest: calls.append(p) or real(p, b, m, *rest))
    import sys

    sys.modules["selfattn.measure"].measure_point = fake_measure.measure_point
    job.run_job(BASE, ctx(tmp_path))  # same point again: skipped
    assert calls == [] and "skipped" in capsys.readouterr().out
    # a failed row is kept by default and measured again with retry_failed=true
    saved = json.loads((tmp_path / "0" / "row.json").read_text())
    row_store.write_row(tmp_path / "0", {**saved, "status": "error", "error": "boom"})
    job.run_job(BASE, ctx(tmp_path))
    assert calls == []
    job.run_job({**BASE, "retry_failed": True}, ctx(tmp_path))
    assert len(calls) == 1
    assert row_store.point_status(tmp_path, saved["point_id"]) == "ok"


def test_invalid_point_in_a_sweep_is_a_row_and_in_a_single_run_an_error(tmp_path, fake_measure):
    bad = {**BASE, "d_model": 100, "heads": 3}
    row = job.run_job(bad, ctx(tmp_path))
    assert row["status"] == "invalid" and row["error"].startswith("heads: 3 does not divide d_model=100")
    assert row["heads"] == 3 and row["backend"] == "naive"
    job.run_job(bad, ctx(tmp_path, num=1))  # resume: the invalid point is known, not a duplicate
    assert len(row_store.read_rows(tmp_path)) == 1
    with pytest.raises(job.InvalidPoint, match=r"^seq_len: expected an integer >= 1, got 0$"):
        job.run_job({**BASE, "seq_len": 0}, ctx(tmp_path / "single", multirun=False))


@pytest.mark.parametrize("typed, cell", [(0, "0"), ("abc", "abc")], ids=["zero", "text"])
def test_a_refused_row_shows_the_value_as_typed_in_its_file_csv_and_progress_line(tmp_path, fake_measure, capsys,
                                                                                   typed, cell):
    import csv

    row = job.run_job({**BASE, "seq_len": typed}, ctx(tmp_path))
    assert row["status"] == "invalid" and row["seq_len"] == typed
    assert json.loads((tmp_path / "0" / "row.json").read_text())["seq_len"] == typed
    with open(tmp_path / "results.csv", newline="") as f:
        (written,) = list(csv.DictReader(f))
    assert written["seq_len"] == cell and written["status"] == "invalid" and written["head_dim"] == "16"
    assert f"naive seq_len={cell} fp32 -> invalid: seq_len: expected an integer >= 1" in capsys.readouterr().out
    job.run_job({**BASE, "seq_len": typed}, ctx(tmp_path, num=1))  # resume: known by its id, shown as typed
    assert f"naive seq_len={cell} fp32 -> skipped" in capsys.readouterr().out


def test_a_bad_wandb_setting_stops_a_single_run_but_not_a_sweep(tmp_path, fake_measure, monkeypatch, capsys):
    from runners.wandb_log import SINK

    monkeypatch.setattr(SINK, "disabled", False)  # restored afterwards: the sink is per process
    bad = {**BASE, "wandb": {"mode": "offlne"}}
    with pytest.raises(job.InvalidPoint, match=r"^wandb.mode: expected one of offline, online, disabled, got 'offlne'; did you mean offline\?$"):
        job.run_job(bad, ctx(tmp_path / "single", multirun=False))
    assert job.run_job(bad, ctx(tmp_path))["status"] == "ok"
    assert capsys.readouterr().err.count("warning: wandb off") == 1


def test_a_crashing_measurement_still_leaves_an_error_row(tmp_path, fake_measure, monkeypatch):
    import sys

    def broken(point, budget=None, metrics=None, timing=None):
        raise RuntimeError("bug in measure")

    monkeypatch.setattr(sys.modules["selfattn.measure"], "measure_point", broken)
    row = job.run_job(BASE, ctx(tmp_path))
    assert row["status"] == "error" and "bug in measure" in row["error"]


def test_grid_points_apply_their_keys(tmp_path, fake_measure):
    grids = {"a": {"backend": ["sdpa"], "seq_len": [32]}, "b": {"head_dim": [8, 32], "scale": ["none"]}}
    first = job.run_job({**BASE, "grids": grids, "grid_point": 0}, ctx(tmp_path, 0, varying=()))
    last = job.run_job({**BASE, "grids": grids, "grid_point": 2}, ctx(tmp_path, 1, varying=()))
    assert (first["backend"], first["seq_len"]) == ("sdpa", 32)
    assert (last["backend"], last["head_dim"], last["scale"]) == ("naive", 32, "none")


def test_progress_line():
    row = {"status": "ok", "backend": "chunked", "seq_len": 4096, "causal": True, "precision": "fp32",
           "time_ms": 41.23, "peak_mem_bytes": 9.3 * 2**20}
    text = progress.line(17, 96, progress.describe(row, ["seq_len", "causal", "experiment"]), row, eta=72)
    assert text == "[17/96] chunked seq_len=4096 causal=true fp32 -> 41.2 ms, 9.3 MiB, ok (ETA 1m12s)"
    assert progress.fmt_ms(8.0) == "8.00 ms" and progress.fmt_ms(0.0123) == "0.0123 ms" and progress.fmt_ms(2682.2) == "2682 ms"
    failed = {**row, "status": "oom", "error": "CUDA out of memory\nmore"}
    assert progress.line(None, None, "x", failed) == "x -> oom: CUDA out of memory"
    # a plugin that cannot be loaded: what failed comes last, after its name and path, and must stay in the line
    broken = {**row, "status": "unsupported", "error": "Unsupported: backend fsat (my_pkg.attn:fsat) cannot be used: "
              "import failed: AttributeError: module 'my_pkg.attn' has no attribute 'fsat'"}
    assert progress.line(None, None, "x", broken).endswith("has no attribute 'fsat'")
    compiled = {**row, "backend_options": '{"compile": true, "q_chunk": null}', "compile_s": 7.31, "recompiled": True}
    assert progress.line(1, 2, progress.describe(compiled, ["seq_len"]), compiled) == (
        "[1/2] chunked+compile seq_len=4096 fp32 -> 41.2 ms, 9.3 MiB, ok, compiled in 7.3 s")
    reused = {**compiled, "recompiled": False, "compile_s": 0.05}
    assert progress.line(None, None, "x", reused).endswith("ok, first call (compiled code reused) 0.1 s")
    noisy = {**row, "noisy": True, "noise": "spread 34% > 10%"}  # its timing passed a noise limit: said in the line
    assert progress.line(None, None, "x", noisy) == "x -> 41.2 ms, 9.3 MiB, ok, noisy (spread 34% > 10%)"
    assert "noisy" not in progress.line(None, None, "x", {**row, "noisy": False})


def test_missing_wandb_is_one_warning_and_the_csv_is_complete(tmp_path, fake_measure, monkeypatch, capsys):
    import sys

    from runners.wandb_log import SINK

    monkeypatch.setattr(SINK, "disabled", False)
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    offline = {**BASE, "wandb": {"mode": "offline"}}
    job.run_job(offline, ctx(tmp_path, 0))
    job.run_job({**offline, "seq_len": 32}, ctx(tmp_path, 1))
    err = capsys.readouterr().err
    assert err.count("warning: wandb off for this process (not installed)") == 1
    assert len(row_store.read_rows(tmp_path)) == 2 and (tmp_path / "results.csv").read_text().count("\n") == 3


def test_metrics_are_recorded_not_part_of_the_id_and_a_resume_asking_for_more_measures_again(tmp_path, fake_measure,
                                                                                          monkeypatch, capsys):
    few = job.run_job({**BASE, "metrics": ["memory"]}, ctx(tmp_path))
    assert few["metrics"] == "memory" and few["peak_mem_bytes"] and few["logit_std"] is None
    calls = []
    real = fake_measure.measure_point
    import sys

    sys.modules["selfattn.measure"].measure_point = lambda p, b=None, m=ALL, *rest: calls.append(tuple(m)) or real(p, b, m, *rest)
    job.run_job({**BASE, "metrics": []}, ctx(tmp_path))  # fewer than the row has: skipped, the same point id
    job.run_job({**BASE, "metrics": ["memory"]}, ctx(tmp_path))
    assert calls == [] and "skipped" in capsys.readouterr().out
    again = job.run_job({**BASE, "metrics": ["stability"]}, ctx(tmp_path))  # more: measured again, nothing lost
    assert calls == [("memory", "stability")] and again["point_id"] == few["point_id"]
    assert again["metrics"] == "memory,stability" and again["logit_std"] is not None
    assert [r["metrics"] for r in row_store.best_rows(row_store.read_rows(tmp_path))] == ["memory,stability"]
    job.run_job(BASE, ctx(tmp_path))  # the default asks for all of them
    assert calls[-1] == ALL


def test_unknown_metric_is_refused_with_did_you_mean(tmp_path, fake_measure):
    with pytest.raises(job.InvalidPoint, match=r"^metrics: unknown metric 'memroy'; did you mean memory\?$"):
        job.run_job({**BASE, "metrics": ["memroy"]}, ctx(tmp_path / "single", multirun=False))
    row = job.run_job({**BASE, "metrics": ["acuracy"]}, ctx(tmp_path))  # a sweep: an invalid row, and it goes on
    assert row["status"] == "invalid" and "did you mean accuracy?" in row["error"]
    with pytest.raises(job.InvalidPoint, match=r"^metrics: expected a list of metric names"):
        job.run_job({**BASE, "metrics": "memory"}, ctx(tmp_path / "single2", multirun=False))


def test_the_progress_line_of_a_point_without_memory_says_so(tmp_path, fake_measure, capsys):
    job.run_job({**BASE, "metrics": []}, ctx(tmp_path))
    assert "naive seq_len=64 fp32 -> " in (out := capsys.readouterr().out) and ", memory not measured, ok" in out
    job.run_job({**BASE, "seq_len": 32}, ctx(tmp_path, num=1))
    assert "memory not measured" not in capsys.readouterr().out
