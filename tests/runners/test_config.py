"""Configs: every experiment composes, sweeps what it says, and builds valid points."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from runners import config as C
from runners.callbacks import count_jobs, jobs_sharing_device
from selfattn.point import Point

CONF = Path(__file__).resolve().parents[2] / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
C.register_resolvers()


@pytest.fixture(scope="module")
def composer():
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield lambda overrides: compose("config", overrides=overrides, return_hydra_config=True)
    GlobalHydra.instance().clear()


def task_dict(cfg):
    """The job's own config (what the task function gets), resolved, as a dict."""
    return OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=True)


def test_the_issue_lists_every_experiment():
    assert set(EXPERIMENTS) == {"quick", "quadratic_cost", "scaling_stability", "causal_mask", "heads",
                                "precision_accuracy", "cross_gpu"}


@pytest.mark.parametrize("name", EXPERIMENTS)
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_experiment_composes_and_its_first_and_last_points_are_valid(composer, name, device):
    text = (CONF / "experiment" / f"{name}.yaml").read_text()
    assert text.startswith("# @package _global_") and "2-core CPU" in text and "H200" in text
    cfg = composer([f"experiment={name}", f"device={device}"])
    assert cfg.name == name and cfg.hydra.mode.name == "MULTIRUN"
    params = OmegaConf.to_container(cfg.hydra.sweeper.params, resolve=True)
    assert params, "an experiment sweeps something"
    total = count_jobs(cfg)
    assert 8 <= total <= 200, total  # small enough to finish in minutes on its device family
    # the first and the last job of the product, composed the way Hydra composes them
    firsts = [f"{k}={str(v).split(',')[0]}" for k, v in params.items()]
    lasts = [f"{k}={str(v).split(',')[-1]}" for k, v in params.items()]
    if "grid_point" in params:  # the union of grids: range(0,N)
        firsts, lasts = ["grid_point=0"], [f"grid_point={total - 1}"]
    for overrides in (firsts, lasts):
        job = composer([f"experiment={name}", f"device={device}", *overrides])
        flat = task_dict(job)
        if device == "cuda":  # building the point resolves devices only; cuda need not exist here
            flat["device"] = "cuda"
        try:
            point = C.point_from_config(flat)
        except ValueError as exc:
            assert name == "heads" and "does not divide" in str(exc)  # the one intended invalid
            continue
        assert isinstance(point, Point) and point.device == device


def test_sizes_adapt_to_the_device(composer):
    cpu = composer(["experiment=quadratic_cost", "device=cpu"]).hydra.sweeper.params.seq_len
    gpu = composer(["experiment=quadratic_cost", "device=cuda"]).hydra.sweeper.params.seq_len
    assert max(map(int, cpu.split(","))) <= 4096
    assert max(map(int, gpu.split(","))) >= 131072  # chunked to 128K on a GPU (naive: budget skips)


def test_quick_is_the_union_of_its_grids(composer):
    cfg = composer(["experiment=quick", "device=cpu"])
    points = C.grid_points(cfg.grids)
    assert count_jobs(cfg) == len(points) == 3 * 2 * 7 + 4 * 2 + 2 * 2 * 2 * 2
    flat = task_dict(cfg)
    built = {C.point_id(C.point_from_config({**flat, "grid_point": i})) for i in range(len(points))}
    assert len(built) == len(points) - 1  # one stability point (d=64, scale=auto) is also a cost point
    stability = C.point_from_config({**flat, "grid_point": 3 * 2 * 7 + 4 * 2 - 1})
    assert (stability.backend, stability.head_dim, stability.scale) == ("naive", 1024, "none")
    overflow = C.point_from_config({**flat, "grid_point": len(points) - 1})
    assert (overflow.backend, overflow.precision, overflow.head_dim, overflow.scale, overflow.input_std) == (
        "sdpa", "fp16", 1024, "none", 32.0)


def test_help_lists_groups_and_experiments():
    text = (CONF / "config.yaml").read_text()
    for name in EXPERIMENTS:
        assert f"  {name} " in text
    assert "$APP_CONFIG_GROUPS" in text


BASE = {"backend": {"name": "naive", "upcast_softmax": False}, "precision": {"name": "fp32"}, "device": "cpu",
        "batch": 1, "heads": 8, "seq_len": 64, "q_len": None, "head_dim": 16, "d_model": None, "causal": False,
        "scale": "auto", "mode": "fwd", "scope": "core", "input_std": 1.0, "seed": 0,
        "budget": {"timing_s": 0.1}, "grids": None, "grid_point": None}


@pytest.mark.parametrize("change, key, allowed", [
    ({"seq_len": 0}, "seq_len:", "integer >= 1"),
    ({"seq_len": "abc"}, "seq_len:", "integer >= 1"),
    ({"precision": {"name": "fp8"}}, "precision:", "fp32"),
    ({"backend": {"name": "flash"}}, "backend:", "naive, sdpa, chunked"),
    ({"backend": {"name": "sdpa", "kernel": "fast"}}, "backend.kernel:", "flash"),
    ({"backend": {"name": "chunked", "q_chunk": 0, "kv_chunk": None}}, "backend.q_chunk:", "integer >= 1"),
    ({"backend": {"name": "naive", "kernel": "math"}}, "backend.kernel:", "unknown key; allowed: upcast_softmax"),
    ({"scale": "big"}, "scale:", "auto, none"),
    ({"device": "tpu"}, "device:", "auto, cpu, cuda"),
    ({"causal": "yes"}, "causal:", "true or false"),
    ({"d_model": 100, "heads": 3}, "heads:", "does not divide d_model=100"),
])
def test_bad_values_raise_one_line_naming_the_key(change, key, allowed):
    with pytest.raises(ValueError) as info:
        C.point_from_config({**BASE, **change})
    message = str(info.value)
    assert "\n" not in message and message.startswith(key) and allowed in message


@pytest.mark.parametrize("budget, key", [({"timing_s": -1}, "budget.timing_s"), ({"mem_fraction": 2.0}, "budget.mem_fraction"),
                                         ({"timing": 1}, "budget.timing")])
def test_bad_budget_raises_one_line(budget, key):
    with pytest.raises(ValueError, match=rf"^{key}"):
        C.budget_kwargs({"budget": budget})


def test_d_model_derives_head_dim_and_q_len_defaults_to_seq_len():
    point = C.point_from_config({**BASE, "d_model": 96, "heads": 3})
    assert point.head_dim == 32 and point.q_len_resolved == 64


def test_point_id_is_stable_and_sees_every_axis_and_option():
    base = C.point_id(C.point_from_config(BASE))
    assert base == C.point_id(C.point_from_config(dict(BASE)))
    assert base == C.point_id(C.point_from_config({**BASE, "q_len": 64}))  # null means seq_len
    assert base == C.point_id(C.point_from_config({**BASE, "budget": {"timing_s": 5.0}}))  # budget is not the point
    changed = [{"seq_len": 32}, {"causal": True}, {"scale": "none"}, {"precision": {"name": "bf16"}},
               {"backend": {"name": "naive", "upcast_softmax": True}}, {"seed": 1}, {"mode": "fwd_bwd"}]
    ids = {C.point_id(C.point_from_config({**BASE, **c})) for c in changed}
    assert base not in ids and len(ids) == len(changed)
    chunked = {**BASE, "backend": {"name": "chunked", "q_chunk": None, "kv_chunk": None}}
    assert C.point_id(C.point_from_config(chunked)) != C.point_id(
        C.point_from_config({**chunked, "backend": {"name": "chunked", "q_chunk": 32, "kv_chunk": None}}))


def test_jobs_sharing_device_per_launcher():
    assert jobs_sharing_device({"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}, 10) == 1
    joblib = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
    assert jobs_sharing_device({"_target_": joblib, "n_jobs": 2}, 10) == 2
    assert jobs_sharing_device({"_target_": joblib, "n_jobs": 4}, 3) == 3  # never more than the jobs
    local = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"
    assert jobs_sharing_device({"_target_": local, "array_parallelism": 256}, 5) == 5
    slurm = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert jobs_sharing_device({"_target_": slurm}, 5) == 1


def test_budget_conf_mirrors_measure_budget():
    """conf's budget block is checked by BudgetConf (no torch import); it must not drift from Budget."""
    from dataclasses import fields

    from selfattn.measure import Budget

    assert {f.name: f.default for f in fields(C.BudgetConf)} == {f.name: f.default for f in fields(Budget)}
