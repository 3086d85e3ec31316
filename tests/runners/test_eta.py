"""The ETA from the time guard's predictions (runners/eta.py): the points left, predicted, times the ratio measured."""

from __future__ import annotations

import pytest

from runners import config, eta
from runners.progress import eta_s


def measured(predicted: eta.Predicted, points: list[int], clock: float = 100.0) -> None:
    for point in points:
        predicted.measuring({"grid_point": point}, None, clock)
        predicted.measured({"grid_point": point})


def test_the_points_left_are_predicted_and_scaled_by_the_ratio_measured_so_far():
    predicted = eta.Predicted()
    predicted.tried, predicted.seconds = True, [10.0, 1.0, 1.0, 1.0, 1.0]  # a grid whose first point is its largest
    measured(predicted, [0])
    # 30 s for a point predicted at 10: the four small ones left are 4 predicted seconds, 12 measured ones
    assert predicted.eta_s(total=5, now=130.0) == pytest.approx(12.0)
    # the average of the finished jobs would have said 4 x 30 s: ten times the time left
    assert eta_s(0.0, 1, 5, now=30.0) == pytest.approx(120.0)
    measured(predicted, [1])
    assert predicted.eta_s(total=5, now=133.0) == pytest.approx(3 * 33 / 11)


def test_skipped_points_cost_nothing_and_other_swept_keys_repeat_the_grid():
    predicted = eta.Predicted()
    predicted.tried, predicted.seconds = True, [2.0, 2.0]
    predicted.skipped({"grid_point": 0})  # a resumed sweep's point: done, no time
    measured(predicted, [1])
    assert predicted.eta_s(total=4, now=104.0) == pytest.approx(2 * 2.0 * 4 / 2)  # seed=0,1: each point twice
    assert predicted.eta_s(total=3, now=104.0) is None  # not the grid times a whole number: the average answers


def test_without_grids_or_predictions_the_average_answers():
    predicted = eta.Predicted()
    measured(predicted, [0])
    assert predicted.eta_s(total=5) is None  # nothing predicted (no grids in the config)
    plain = eta.Predicted()
    plain.tried, plain.seconds = True, [1.0]
    plain.measuring({}, None, 0.0)
    plain.measured({})  # a job that is no grid point: the predictions say nothing of the sweep
    assert plain.eta_s(total=5) is None


def test_the_default_sweeps_points_are_each_predicted(monkeypatch):
    from hydra import compose, initialize_config_dir

    from runners.cli_check import conf_dir

    config.register_resolvers()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base=None):
        cfg = compose("config", overrides=["experiment=quick", "grid_point=0"])
    seconds = eta.predict_grid(cfg, None)
    assert seconds is not None and len(seconds) == len(config.grid_points(cfg.grids)) == 219
    assert all(s > 0 for s in seconds) and max(seconds) > 5 * min(seconds)  # they differ: the point of predicting
