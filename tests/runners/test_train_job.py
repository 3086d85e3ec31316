"""scope=train through the runner (real measurement): the curve beside the row, resume, wandb's series."""

from __future__ import annotations

import csv
import json
import sys
import types

from runners import job, row_store
from runners.curves import CURVE_FILE
from selfattn.results import decode_curve

TRAIN = {"name": "t", "backend": {"name": "naive"}, "precision": {"name": "fp32"}, "device": "cpu", "batch": 4,
         "heads": 2, "seq_len": 5, "q_len": None, "head_dim": 8, "d_model": None, "scope": "train", "mode": "fwd_bwd",
         "steps": 5, "lr": 0.01, "scale": "none", "seed": 1, "wandb": {"mode": "disabled"}}


def ctx(tmp_path, num=0):
    return job.JobContext(job_dir=tmp_path / str(num), sweep_dir=tmp_path, multirun=True, index=num,
                          varying=["scale"], sweep_id="t/x")


def test_the_curve_goes_beside_the_row_and_a_resumed_sweep_does_not_train_again(tmp_path, monkeypatch, capsys):
    row = job.run_job(TRAIN, ctx(tmp_path))
    assert row["status"] == "ok", row["error"]
    out = capsys.readouterr().out  # the progress line gives the run's outcome
    assert "naive scale=none fp32 -> " in out and "ms/step, loss " in out and " 0 non-finite steps, ok" in out
    with open(tmp_path / "0" / CURVE_FILE, newline="") as f:
        table = [(int(r["step"]), float(r["loss"]), float(r["accuracy"])) for r in csv.DictReader(f)]
    assert table == decode_curve(row["loss_curve"]) and [s for s, _, _ in table] == [1, 2, 3, 4, 5]
    with open(tmp_path / "results.csv", newline="") as f:
        (written,) = list(csv.DictReader(f))
    assert decode_curve(written["loss_curve"]) == table and written["steps"] == "5" and written["scope"] == "train"

    import selfattn.measure as measure

    monkeypatch.setattr(measure, "measure_point", lambda *a, **k: (_ for _ in ()).throw(AssertionError("measured")))
    job.run_job(TRAIN, ctx(tmp_path, 1))  # the same point in a rerun: skipped by its id
    assert "skipped" in capsys.readouterr().out and len(row_store.read_rows(tmp_path)) == 1
    monkeypatch.undo()
    other = job.run_job({**TRAIN, "scale": "auto"}, ctx(tmp_path, 2))  # another point of the grid is measured
    assert other["status"] == "ok" and other["point_id"] != row["point_id"]


def _fake_wandb(monkeypatch, logged):
    class Run:
        def __init__(self):
            self.summary = {}

        def log(self, values, step=None):
            logged.append((step, values))

        def finish(self):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    fake = types.SimpleNamespace(init=lambda **kw: Run(), Settings=lambda **kw: None,
                                 plot=types.SimpleNamespace(line_series=lambda **kw: ("series", kw)))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    from runners.wandb_log import SINK

    monkeypatch.setattr(SINK, "disabled", False)
    monkeypatch.setattr(SINK, "run", None)
    return SINK


def test_wandb_gets_the_curve_as_a_series_in_either_layout(tmp_path, monkeypatch):
    logged: list = []
    sink = _fake_wandb(monkeypatch, logged)
    row = job.run_job({**TRAIN, "wandb": {"mode": "offline"}}, ctx(tmp_path))
    kind, series = logged[-1][1][f"loss_curve/{row['point_id']}"]
    assert kind == "series" and series["xs"] == [1, 2, 3, 4, 5]
    assert series["ys"] == [[loss for _, loss, _ in decode_curve(row["loss_curve"])]]
    assert "loss_curve" not in logged[-1][1]  # the JSON cell itself is not a metric
    sink.close()
    logged.clear()
    job.run_job({**TRAIN, "seed": 2, "wandb": {"mode": "offline", "run_per_point": True}}, ctx(tmp_path, 1))
    assert [step for step, _ in logged] == [1, 2, 3, 4, 5] and set(logged[0][1]) == {"train/loss", "train/accuracy"}
    assert json.loads((tmp_path / "1" / "row.json").read_text())["status"] == "ok"
