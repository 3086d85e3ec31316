"""The compose_once launcher (hydra_plugins/selfattn_launcher/compose_once.py) gives every job the config
Hydra's own load_sweep_config composes for it, whether it composed that job in full or not."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.utils import JobReturn
from hydra.types import HydraContext, RunMode
from hydra._internal.callbacks import Callbacks
from omegaconf import OmegaConf

from hydra_plugins.selfattn_launcher.compose_once import ComposeOnceLauncher
from runners import config, launcher

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.fixture()
def loader():
    config.register_resolvers()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield GlobalHydra.instance().config_loader()


def launcher_for(loader, task_overrides: list[str]) -> tuple[ComposeOnceLauncher, object]:
    master = loader.load_configuration("config", overrides=task_overrides, run_mode=RunMode.MULTIRUN)
    launcher = ComposeOnceLauncher()
    launcher.setup(hydra_context=HydraContext(config_loader=loader, callbacks=Callbacks()),
                   task_function=lambda cfg: None, config=master)
    return launcher, master


def same_as_hydra(loader, launcher, master, jobs: list[list[str]]) -> None:
    for overrides in jobs:
        ours = launcher.job_config(list(overrides))
        hydras = loader.load_sweep_config(master, list(overrides))
        assert OmegaConf.to_yaml(ours) == OmegaConf.to_yaml(hydras), overrides
        assert OmegaConf.is_struct(ours) == OmegaConf.is_struct(hydras)


def test_a_grids_jobs_reuse_the_first_composition_and_equal_hydras(loader):
    launcher, master = launcher_for(loader, ["experiment=quick"])
    jobs = [["experiment=quick", f"grid_point={i}"] for i in [0, 1, 2, 60, 215, 3]]
    same_as_hydra(loader, launcher, master, jobs)
    assert launcher.composed_in_full == 1  # the first job; the others differ in grid_point only
    job = launcher.job_config(["experiment=quick", "grid_point=60"])
    assert job.grid_point == 60 and job.hydra.job.override_dirname == "experiment=quick,grid_point=60"


def test_a_config_group_change_is_composed_from_the_files(loader):
    launcher, master = launcher_for(loader, [])
    jobs = [["backend=naive", "seq_len=64"], ["backend=naive", "seq_len=128"],  # plain: reused
            ["backend=sdpa", "seq_len=64"],  # a group: composed (the back end's file)
            ["backend=sdpa", "seq_len=128"], ["backend=chunked", "seq_len=64"]]
    same_as_hydra(loader, launcher, master, jobs)
    assert launcher.composed_in_full == 3  # naive, sdpa, chunked
    assert launcher.job_config(["backend=sdpa", "seq_len=64"]).backend.name == "sdpa"


def test_mappings_added_keys_and_other_key_lists_are_composed_in_full(loader):
    launcher, master = launcher_for(loader, [])
    jobs = [["budget={timing_s:0.1}"], ["budget={accuracy_rows:8}"],  # a mapping merges: must not keep timing_s
            ["seq_len=64"], ["seq_len=64", "heads=2"],  # another key list
            ["+extra=1"], ["+extra=2"]]  # an added key
    same_as_hydra(loader, launcher, master, jobs)
    assert launcher.composed_in_full == len(jobs)
    budget = launcher.job_config(["budget={accuracy_rows:8}"]).budget
    assert budget.accuracy_rows == 8 and budget.timing_s != 0.1


def test_launch_runs_every_job_with_its_number(loader, tmp_path):
    from hydra.core.hydra_config import HydraConfig

    launcher, master = launcher_for(loader, [f"hydra.sweep.dir={tmp_path}"])
    seen = []  # what each job's task saw: its value, and Hydra's config of that job (job number, folder)
    launcher.task_function = lambda cfg: seen.append(
        (cfg.seq_len, HydraConfig.get().job.num, HydraConfig.get().runtime.output_dir))
    runs = launcher.launch([["seq_len=64"], ["seq_len=96"], ["seq_len=128"]], initial_job_idx=0)
    assert seen == [(n, i, str(tmp_path / str(i))) for i, n in enumerate([64, 96, 128])]
    assert all(isinstance(r, JobReturn) and r.overrides == [f"seq_len={n}"] for r, (n, _, _) in zip(runs, seen))
    # the returns the sweeper keeps to the sweep's end hold no composed config (its memory at 100,000 points)
    assert all(r.cfg is None and r.hydra_cfg is None for r in runs)


def test_the_registered_name_is_the_configs_target():
    assert OmegaConf.load(CONF / "hydra" / "launcher" / "compose_once.yaml")["_target_"] == launcher.LAUNCHER
    assert f"{ComposeOnceLauncher.__module__}.{ComposeOnceLauncher.__qualname__}" == launcher.LAUNCHER


def test_hydra_knows_the_launcher_once_registered():
    from hydra.core.plugins import Plugins
    from hydra.plugins.launcher import Launcher

    assert launcher.register_launcher() is None
    names = {f"{c.__module__}.{c.__qualname__}" for c in Plugins.instance().discover(Launcher)}
    assert launcher.LAUNCHER in names


def test_a_launcher_that_cannot_load_gives_way_to_hydras_basic_one(monkeypatch, capsys):
    assert launcher.launcher_overrides(["-m", "seq_len=64"]) == []  # it loads here: nothing added, nothing said
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(launcher, "register_launcher", lambda: "ModuleNotFoundError: no module named x")
    assert launcher.launcher_overrides(["-m", "seq_len=64"]) == ["hydra/launcher=basic"]
    (note,) = capsys.readouterr().err.splitlines()
    assert "ModuleNotFoundError" in note and "basic launcher" in note
    # a launcher typed by the user stays the user's choice
    assert launcher.launcher_overrides(["-m", "hydra/launcher=slurm_gpu"]) == []


def test_hydra_knows_the_backend_source_once_registered():
    from hydra.core.plugins import Plugins
    from hydra.plugins.config_source import ConfigSource

    assert launcher.register_source() is None
    names = {f"{c.__module__}.{c.__qualname__}" for c in Plugins.instance().discover(ConfigSource)}
    assert launcher.SOURCE in names


def test_a_backend_source_that_cannot_load_empties_the_search_path(monkeypatch, capsys):
    monkeypatch.setattr(launcher, "register_source", lambda: "ModuleNotFoundError: no module named y")
    assert launcher.launcher_overrides(["seq_len=64"]) == ["hydra.searchpath=[]"]
    (note,) = capsys.readouterr().err.splitlines()
    assert "ModuleNotFoundError" in note and "plugins" in note
    assert launcher.launcher_overrides(["seq_len=64", "hydra.searchpath=[file:///x]"]) == []  # the user's own
