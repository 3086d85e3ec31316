"""A scope typed alone runs with the defaults that follow it (selfattn.point.SCOPE_DEFAULTS); a value
the user gave (typed, or set by an experiment or a grid) is kept, and refused if the scope cannot take it."""

from __future__ import annotations

import csv
import functools
from dataclasses import fields
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from runner_helpers import run_at_once, run_sweep
from runners import config, usage_doc
from runners.given import given_keys
from selfattn.point import AXES, SCOPE_DEFAULTS, Point, axis_default, scope_defaults

CONF = Path(__file__).resolve().parents[2] / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
SCOPES = next(f for f in fields(Point) if f.name == "scope").metadata["choices"]
config.register_resolvers()


def task_dict(cfg) -> dict:
    return OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=True)


def parsed(composer, overrides: list[str]) -> config.ParsedJob:
    """The job as the sweep parses it: composed by Hydra, the given keys read as runners/sweep.py reads them."""
    cfg = composer(overrides)
    return config.parse_job(task_dict(cfg), given_keys(cfg.hydra))


def refusal(point: Point) -> str:
    """What a point's run would refuse it with: its validation, then (scope=train) the recall task's size."""
    try:
        point.validate()
    except ValueError as exc:
        return str(exc)
    if point.scope == "train":
        from selfattn.train.task import pairs_for

        try:
            pairs_for(point.seq_len)
        except ValueError as exc:
            return str(exc)
    return ""


def test_every_scope_default_is_a_field_value_the_scope_takes():
    assert set(SCOPE_DEFAULTS) <= set(SCOPES)
    for scope, keys in SCOPE_DEFAULTS.items():
        assert set(keys) <= set(AXES), scope
        assert refusal(Point(scope=scope, **keys)) == "", scope


@pytest.mark.parametrize("scope, key", [(s, k) for s, keys in SCOPE_DEFAULTS.items() for k in keys])
def test_a_scope_default_only_replaces_a_value_the_scope_refuses(scope, key):
    """So a point that was valid before the scope's defaults keeps its values, hence its id (resume)."""
    point = Point(**{**scope_defaults(scope), "scope": scope, key: axis_default(key)})
    assert refusal(point).startswith(f"{key}: scope={scope}"), refusal(point)


@pytest.mark.parametrize("scope", SCOPES)
def test_a_scope_typed_alone_builds_a_point_with_its_defaults(composer, scope):
    job = parsed(composer, [f"scope={scope}", "device=cpu"])
    assert job.problem == "" and refusal(job.point) == ""
    plain = parsed(composer, ["device=cpu"]).point
    for key in AXES:  # the scope's defaults where it has some, every other axis as without the scope
        expected = scope if key == "scope" else scope_defaults(scope).get(key, getattr(plain, key))
        assert getattr(job.point, key) == expected, key


def test_typing_a_scopes_defaults_is_the_same_point(composer):
    alone = parsed(composer, ["scope=train", "device=cpu"])
    typed = parsed(composer, ["scope=train", "device=cpu", "mode=fwd_bwd", "seq_len=9"])
    assert alone.point_id == typed.point_id == config.parse_job(task_dict(composer(
        ["scope=train", "device=cpu", "mode=fwd_bwd", "seq_len=9"]))).point_id  # as before the scope's defaults


@pytest.mark.parametrize("overrides, message", [
    (["scope=train", "mode=fwd"], "mode: scope=train runs forward and backward, so mode must be fwd_bwd, got 'fwd'"),
    (["scope=generate", "causal=false"], "causal: scope=generate is autoregressive, so causal must be true"),
])
def test_a_typed_value_the_scope_cannot_take_is_refused(composer, overrides, message):
    job = parsed(composer, [*overrides, "device=cpu"])
    assert job.point is None and job.problem.startswith(message), job.problem


def test_a_typed_value_the_scope_takes_is_kept(composer):
    job = parsed(composer, ["scope=train", "seq_len=17", "device=cpu"])
    assert (job.point.mode, job.point.seq_len) == ("fwd_bwd", 17)


def test_an_experiments_keys_count_as_given(composer):
    cfg = composer(["experiment=training", "device=cpu", "heads=8", "scale=auto", "precision=fp32", "seed=0"])
    given = given_keys(cfg.hydra)
    assert {"scope", "mode", "seq_len", "batch", "heads", "experiment"} <= set(given)
    assert not {"causal", "window", "budget"} & set(given)
    lost = OmegaConf.merge(cfg.hydra, {"runtime": {"choices": {"experiment": "no_such_experiment"}}})
    assert given_keys(lost) is None  # a file not found: every key counts as given, as before


def test_given_keys_from_the_command_line(composer):
    cfg = composer(["seq_len=64", "+budget.new_key=1", "~mode", "backend=chunked", "backend.q_chunk=64", "heads=8"])
    assert given_keys(cfg.hydra) == ["seq_len", "budget", "backend", "heads"]


def test_a_user_experiment_on_the_search_path_counts(composer, tmp_path):
    mine = tmp_path / "experiment"
    mine.mkdir()
    (mine / "mine.yaml").write_text("# @package _global_\nname: mine\nscope: generate\ncausal: false\n")
    cfg = composer(["experiment=mine", f"hydra.searchpath=[file://{tmp_path}]"])
    assert given_keys(cfg.hydra) == ["experiment", "name", "scope", "causal"]
    assert config.parse_job(task_dict(cfg), given_keys(cfg.hydra)).problem.startswith("causal: scope=generate")


def test_given_values_are_kept_and_refused_where_the_scope_cannot_take_them(composer):
    base = task_dict(composer(["device=cpu"]))
    generate = {**base, "scope": "generate", "causal": False}
    assert config.parse_job(generate, given=["scope"]).point.causal is True
    assert config.parse_job(generate, given=["scope", "causal"]).problem.startswith("causal: scope=generate")
    assert config.parse_job(generate).problem.startswith("causal:")  # given=None: every key given, as before


def test_a_grid_points_scope_brings_its_defaults_and_its_keys_count_as_given(composer):
    grids = [{"scope": ["train"]}, {"scope": ["train"], "mode": ["fwd"]}]
    base = {**task_dict(composer(["device=cpu"])), "grids": grids}
    assert config.parse_job({**base, "grid_point": 0}, given=["grid_point"]).point.mode == "fwd_bwd"
    assert config.parse_job({**base, "grid_point": 1}, given=["grid_point"]).problem.startswith("mode: scope=train")


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_no_experiment_point_changes(composer, name):
    """Every experiment's first and last job: the same point id with the scope's defaults as without them."""
    cfg = composer([f"experiment={name}", "device=cpu"])
    sweeper = cfg.hydra.sweeper.params
    params = OmegaConf.to_container(sweeper, resolve=True) if sweeper is not None else {}  # smoke: a single run
    jobs = [[f"{k}={str(v).split(',')[i]}" for k, v in params.items()] for i in (0, -1)]
    if "grid_point" in params:
        total = len(config.grid_points(OmegaConf.to_container(cfg.grids, resolve=True)))
        jobs = [["grid_point=0"], [f"grid_point={total - 1}"]]
    for overrides in jobs:
        job = composer([f"experiment={name}", "device=cpu", *overrides])
        given = given_keys(job.hydra)
        assert given is not None
        assert config.parse_job(task_dict(job), given).point_id == config.parse_job(task_dict(job)).point_id


def test_help_says_which_defaults_follow_the_scope(monkeypatch):
    footer = OmegaConf.load(CONF / "hydra" / "help" / "selfattn.yaml")["footer"]
    assert usage_doc.scope_defaults_text() in footer
    monkeypatch.setitem(SCOPE_DEFAULTS, "layer", {"causal": True})  # the negative control: a default added
    assert usage_doc.scope_defaults_text() not in footer


@pytest.mark.slow
def test_every_scope_typed_alone_gives_an_ok_row(tmp_path):
    """Through the command line: one multirun, each job a scope typed alone; what no scope's defaults
    touch is cut to the least effort (one head of 16: the training run's d_model 16)."""
    proc = run_sweep("-m", f"scope={','.join(SCOPES)}", "device=cpu", "heads=1", "head_dim=16", "metrics=[]",
                     "budget.timing_s=0.01",
                     "budget.measure_device_peak=false", "report=false", "wandb.mode=disabled",
                     f"hydra.sweep.dir={tmp_path}", timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with (tmp_path / "results.csv").open(newline="") as f:
        rows = {r["scope"]: r for r in csv.DictReader(f)}
    assert set(rows) == set(SCOPES)
    for scope, row in rows.items():
        assert row["status"] == "ok", (scope, row["error"])
        expected = {"mode": "fwd", "seq_len": "1024", "causal": "false", **{  # results.csv spells booleans so
            k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in scope_defaults(scope).items()}}
        assert {k: row[k] for k in expected} == expected, scope


@pytest.mark.slow
def test_values_the_scope_cannot_take_are_refused_whether_typed_or_from_an_experiment(tmp_path):
    mine = tmp_path / "my_conf" / "experiment"
    mine.mkdir(parents=True)
    (mine / "mine.yaml").write_text("# @package _global_\nname: mine\nscope: generate\ncausal: false\n")
    runs = run_at_once({  # two processes, two folders: side by side
        "typed": functools.partial(run_sweep, "scope=train", "mode=fwd", f"hydra.run.dir={tmp_path / 'typed'}"),
        "from_file": functools.partial(run_sweep, "experiment=mine",
                                       f"hydra.searchpath=[file://{tmp_path / 'my_conf'}]",
                                       f"hydra.run.dir={tmp_path / 'mine'}")})
    typed, from_file = runs["typed"], runs["from_file"]
    assert typed.returncode == 2
    assert typed.stderr.strip().splitlines()[-1] == \
        "error: mode: scope=train runs forward and backward, so mode must be fwd_bwd, got 'fwd'"
    # without the experiment's keys counted as given, causal would follow the scope and the point would run
    assert from_file.returncode == 2
    assert from_file.stderr.strip().splitlines()[-1].startswith("error: causal: scope=generate is autoregressive")
