"""The metrics as registered (selfattn/measure/metric_steps.py, read by selfattn/metrics.py): one declaration of
each column and its type, where its function is, at least one measurement per metric, nothing filled undeclared."""

from __future__ import annotations

import dataclasses
import typing

import pytest
import torch

from selfattn import metrics
from selfattn.measure import metric_steps
from selfattn.results import Row

ROW_TYPES = typing.get_type_hints(Row)


@pytest.mark.parametrize("metric", metrics.DECLARED, ids=lambda m: m.name)
def test_a_metric_s_columns_are_row_columns_of_its_declared_type(metric):
    for column, kind in metric.columns.items():
        assert column in ROW_TYPES, f"{metric.name}: {column} is not a column of results.csv"
        allowed = typing.get_args(ROW_TYPES[column]) or (ROW_TYPES[column],)
        assert kind in allowed, f"{metric.name}: {column} declared {kind.__name__}, the row holds {ROW_TYPES[column]}"


def test_every_metric_is_measured_and_every_measurement_declared():
    measured = {entry.metric for entry in metric_steps.REGISTERED}
    assert measured == set(metrics.BY_NAME)
    assert all(entry.stage in metric_steps.STAGES for entry in metric_steps.REGISTERED)


def test_no_column_is_filled_by_two_metrics():
    columns = [c for m in metrics.DECLARED for c in m.columns]
    assert len(columns) == len(set(columns))


def test_the_metrics_key_names_the_chosen_ones_in_order():
    assert metrics.ALL == ("memory", "accuracy", "stability", "permutation", "traffic", "path_length")
    assert metrics.metric_of("peak_alloc_bytes") == "memory" and metrics.metric_of("time_ms") is None


def _measured(**kwargs) -> metric_steps.Measured:
    fields = {f.name: None for f in dataclasses.fields(metric_steps.Measured) if f.default is dataclasses.MISSING}
    return metric_steps.Measured(**{**fields, "plan_call_s": 0.0, **kwargs})


def test_a_measurement_filling_an_undeclared_column_is_refused(monkeypatch):
    monkeypatch.setattr(metric_steps, "REGISTERED", [])
    metric_steps.measures("permutation")(lambda m: {"perm_max_abs_diff": 0.0, "time_ms": 1.0})
    with pytest.raises(ValueError, match=r"metric permutation: columns \['time_ms'\] are not declared"):
        metric_steps.run_stage(metric_steps.AFTER_VERDICT, _measured(), ["permutation"])


def test_only_chosen_metrics_run_and_always_ones_where_they_apply(monkeypatch):
    monkeypatch.setattr(metric_steps, "REGISTERED", [])
    ran = []
    metric_steps.measures("permutation")(lambda m: ran.append("permutation") or {"perm_max_abs_diff": 0.0})
    metric_steps.measures("rope_shift", applies=lambda m: m.device == "cpu")(
        lambda m: ran.append("rope") or {"rope_shift_max_abs_diff": 0.0})
    assert metric_steps.run_stage(metric_steps.AFTER_VERDICT, _measured(device="cpu"), []) == {
        "rope_shift_max_abs_diff": 0.0}
    metric_steps.run_stage(metric_steps.AFTER_VERDICT, _measured(device="cuda"), ["permutation"])
    assert ran == ["rope", "permutation"]


def test_an_undeclared_metric_or_stage_is_refused():
    with pytest.raises(ValueError, match="metric: 'undeclared_metric' is not declared"):
        metric_steps.measures("undeclared_metric")
    with pytest.raises(ValueError, match="stage: expected one of"):
        metric_steps.measures("memory", stage="later")


@pytest.mark.parametrize("kwargs, message", [
    ({"columns": {"x_ratio": complex}}, "column 'x_ratio': expected a type of float, int, bool, str"),
    ({"columns": {}}, "columns: declare at least one"),
    ({"columns": {"gbps": float}}, "column 'gbps' is metric traffic's already"),
    ({"columns": {"x_ratio": float}, "after": {"y": "time_ms"}}, r"after: \['y'\] are not columns of the metric"),
])
def test_a_bad_declaration_is_refused_naming_what(monkeypatch, kwargs, message):
    monkeypatch.setattr(metric_steps, "DECLARED", dict(metric_steps.DECLARED))
    with pytest.raises(ValueError, match=message):
        metric_steps.measures("x_metric", **kwargs)


def test_a_metric_is_declared_once(monkeypatch):
    monkeypatch.setattr(metric_steps, "DECLARED", dict(metric_steps.DECLARED))
    with pytest.raises(ValueError, match="metric: 'memory' is declared twice"):
        metric_steps.measures("memory", columns={"x_bytes": int})


def test_a_declaration_places_its_first_column_or_the_ones_it_names():
    assert metrics.BY_NAME["stability"].after == {"logit_std": "grad_err_bound"}
    assert metrics.BY_NAME["traffic"].after == {"bytes_moved": "device_peak_tflops",
                                                "device_peak_gbps_source": "device_peak_tflops_source"}


def test_a_point_measured_with_some_metrics_leaves_the_others_empty():
    from selfattn.measure import Budget, measure_point
    from selfattn.point import Point

    row = measure_point(Point(seq_len=32, heads=2, head_dim=8, device="cpu"), Budget(timing_s=0.02),
                        metrics=["traffic"])
    assert row.status == "ok", row.error
    assert row.metrics == "traffic" and row.bytes_moved > 0 and row.gbps > 0
    assert row.peak_mem_bytes is None and row.max_abs_err is None and row.logit_std is None
    assert row.err_bound is not None  # the verdict runs whatever `metrics` says
    assert torch.get_num_threads() >= 1
