"""A plugin's name reaches the job config: `backend=module:function` composes like a built-in (its options
at their defaults, settable, checked), in single runs, sweeps and grids."""

from __future__ import annotations

import uuid

import pytest
from omegaconf import OmegaConf

from runners import config
from selfattn.backends import registry

PLUGIN = '''
from dataclasses import dataclass
from selfattn.backends import backend
from selfattn.fields import spec

@dataclass(frozen=True)
class Options:
    temperature: float = spec(1.0, gt=0, help="divides the scale")
    tile: int | None = spec(None, ge=1, help="null: chosen per device")

@backend(options=Options)
def tuned(q, k, v, *, causal, window, key_lengths, document_ids, scale, temperature=1.0, tile=None):
    raise NotImplementedError
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    name = f"cfg_plugin_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield f"{name}:tuned"
    registry.forget()


def task(cfg) -> dict:
    return OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=True)


def test_a_path_composes_with_its_options_and_one_can_be_set(composer, plugin):
    cfg = composer([f"backend={plugin}", "backend.temperature=2.0", "seq_len=64"])
    assert OmegaConf.to_container(cfg.backend) == {"name": plugin, "temperature": 2.0, "tile": None}
    assert cfg.hydra.runtime.choices.backend == plugin
    job = config.parse_job(task(cfg))
    assert job.problem == "" and job.point.backend == plugin
    assert dict(job.point.backend_options) == {"temperature": 2.0}
    # the point's id is its name's: the same as an entry point named `tuned` would give
    assert job.point.columns()["backend"] == "tuned"


def test_a_builtin_still_composes_from_its_file(composer):
    assert OmegaConf.to_container(composer(["backend=sdpa"]).backend) == {"name": "sdpa", "kernel": "auto",
                                                                          "bool_mask": False}


def test_a_plugin_option_typo_is_refused_with_did_you_mean(plugin):
    job = config.parse_job({"backend": {"name": plugin, "temprature": 2.0}})
    assert job.problem == "backend.temprature: unknown key; did you mean backend.temperature?"
    bad = config.parse_job({"backend": {"name": plugin, "temperature": -1}})
    assert bad.problem.startswith("backend.temperature: expected")


def test_an_unknown_name_and_a_colliding_path_are_invalid_points():
    assert "did you mean sdpa?" in config.parse_job({"backend": {"name": "sdpx"}}).problem
    clash = config.parse_job({"backend": {"name": "my_pkg:chunked"}}).problem
    assert "selfattn.backends.chunked" in clash and "my_pkg:chunked" in clash


def test_a_plugin_that_fails_to_import_composes_and_its_point_is_valid(composer):
    cfg = composer(["backend=no_such_module_here:fast"])
    assert OmegaConf.to_container(cfg.backend) == {"name": "no_such_module_here:fast"}
    job = config.parse_job(task(cfg))
    assert job.problem == "" and job.point is not None  # measured as an unsupported row naming the error
    registry.forget()


def test_a_grid_mixes_builtins_and_plugins(plugin):
    grids = [{"backend": ["sdpa", plugin], "seq_len": [32]}]
    points = [config.parse_job({"grids": grids, "grid_point": i, "precision": {"name": "fp32"}}).point for i in range(2)]
    assert [p.backend for p in points] == ["sdpa", plugin]


def test_a_sweep_of_a_builtin_and_a_plugin_composes_each_job(composer, plugin):
    for name, expected in (("naive", "upcast_softmax"), (plugin, "temperature")):
        assert expected in composer([f"backend={name}"]).backend


def test_a_name_that_is_no_back_end_composes_and_the_runner_refuses_it_in_one_line(composer):
    cfg = composer(["backend=sdpx"])  # not Hydra's "Could not find 'backend/sdpx'" for the whole sweep
    assert OmegaConf.to_container(cfg.backend) == {"name": "sdpx"}
    assert config.parse_job(task(cfg)).problem.endswith("got 'sdpx'; did you mean sdpa?")
