"""The sweep's requests to its isolated worker are JSON, rebuilt through the same field checks a config passes
(runners/isolate_request.py): no pickle on the channel, and a request that fails a check is refused with the
field's one-line reason."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from runners import isolate, isolate_request
from selfattn.measure.budget import Budget
from selfattn.measure.timing_options import TimingOptions
from selfattn.point import Point

HERE = Path(__file__).resolve().parent


def _decoded(framed: bytes) -> isolate_request.Request:
    (size,) = isolate_request.HEADER.unpack(framed[:isolate_request.HEADER.size])
    assert size == len(framed) - isolate_request.HEADER.size
    return isolate_request.decode(framed[isolate_request.HEADER.size:])


def test_a_point_and_its_budget_travel_as_field_mappings_and_come_back_equal():
    point = Point(backend="naive", backend_options={"block": 64, "sizes": (1, 2)}, seq_len=48, heads=2, head_dim=8,
                  window=(8, 0), causal=True, device="cpu", mask_options={}, scale=0.5)
    budget = Budget(timing_s=0.01, accuracy_rows=4, measure_device_peak=False)
    framed = isolate_request.encode("n" * 32, "pid-1", point, budget, ("accuracy", "stability"), TimingOptions())
    message = json.loads(framed[isolate_request.HEADER.size:])
    assert message["point"]["window"] == [8, 0] and message["budget"]["timing_s"] == 0.01
    request = _decoded(framed)
    assert (request.nonce, request.point_id, request.budget, request.metrics) == (
        "n" * 32, "pid-1", budget, ("accuracy", "stability"))
    assert request.point.window == (8, 0) and request.point.columns() == point.columns()


@pytest.mark.parametrize("change, reason", [
    (lambda m: m["point"].update(seq_len=-3), "point.seq_len: expected an integer >= 1, got -3"),
    (lambda m: m["point"].update(seqlen=3), "point.seqlen: unknown key; did you mean point.seq_len?"),
    (lambda m: m["budget"].update(mem_fraction=2), "budget.mem_fraction: expected a finite number > 0 and <= 1, got 2"),
    (lambda m: m.update(budget=[1]), "budget: expected a mapping of its fields"),
    (lambda m: m.update(metrics=["acuracy"]), "metrics: unknown metric 'acuracy'; did you mean accuracy?"),
    (lambda m: m.update(extra=1), "request: unknown key 'extra'"),
])
def test_a_request_that_fails_a_field_check_is_refused_naming_it(change, reason):
    framed = isolate_request.encode("n", "p", Point(backend="naive", device="cpu"), Budget(), (), TimingOptions())
    message = json.loads(framed[isolate_request.HEADER.size:])
    change(message)
    with pytest.raises(ValueError) as err:
        isolate_request.decode(json.dumps(message).encode())
    assert str(err.value) == reason


def test_a_pickle_is_no_request():
    with pytest.raises(ValueError):
        isolate_request.identity(pickle.dumps(("point", "n", "p", Point(), Budget(), ())))


def test_the_worker_answers_a_refused_request_with_its_reason_and_serves_the_next(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE.parents[1]), str(HERE)]))
    good = Point(backend="misbehaving:fine", seq_len=32, heads=1, head_dim=8, device="cpu")
    budget = Budget(timing_s=0.01, accuracy_rows=4, measure_device_peak=False)
    real_encode = isolate_request.encode

    def with_a_bad_field(nonce, point_id, point, budget, metrics, timing):  # a request the worker's checks refuse
        framed = real_encode(nonce, point_id, point, budget, metrics, timing)
        message = json.loads(framed[isolate_request.HEADER.size:])
        message["point"]["heads"] = 0
        data = json.dumps(message).encode()
        return isolate_request.HEADER.pack(len(data)) + data

    try:
        monkeypatch.setattr(isolate_request, "encode", with_a_bad_field)
        refused = isolate.run_isolated(good, budget, ())
        assert (refused.status, refused.error) == (
            "error", "the isolated process refused the request: point.heads: expected an integer >= 1, got 0")
        pid = isolate.worker_pid()
        monkeypatch.setattr(isolate_request, "encode", real_encode)
        served = isolate.run_isolated(good, budget, ())
        assert served.row is not None and served.row.status == "ok" and isolate.worker_pid() == pid
    finally:
        isolate.stop_worker()
