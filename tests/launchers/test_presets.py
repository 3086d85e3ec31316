"""The SLURM preset composes on top of the plugin's own submitit_slurm config.

Composition only (no cluster here): the preset must keep every plugin key, set the ones
people change, and leave each one overridable from the command line.
"""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from runners import config

SLURM_TARGET = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"


def _compose(*overrides: str):
    config.register_resolvers()
    with initialize_config_dir(str(config.CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=True)


def test_slurm_gpu_preset_extends_the_plugin_config() -> None:
    cfg = _compose("experiment=cross_gpu", "device=cuda", "hydra/launcher=slurm_gpu")
    launcher = cfg.hydra.launcher
    assert launcher._target_ == SLURM_TARGET
    assert launcher.gpus_per_node == 1 and launcher.tasks_per_node == 1
    assert launcher.timeout_min > 0 and launcher.array_parallelism >= 1 and launcher.cpus_per_task >= 1
    assert launcher.partition is None and list(launcher.setup) == []
    # every key of the plugin's own config is still there, so its documentation applies as is
    plugin = _compose("hydra/launcher=submitit_slurm").hydra.launcher
    assert set(plugin) <= set(launcher)
    assert launcher.name == "selfattn-cross_gpu"
    # the submitting process sizes the sweep: device=cuda must give the GPU sizes (see the preset)
    assert "65536" in str(cfg.hydra.sweeper.params.seq_len)


def test_slurm_gpu_preset_settings_are_overridable() -> None:
    cfg = _compose("hydra/launcher=slurm_gpu", "hydra.launcher.partition=a100", "hydra.launcher.timeout_min=5",
                   "hydra.launcher.setup=[module load cuda,source .venv/bin/activate]",
                   "+hydra.launcher.additional_parameters.exclusive=true", "hydra.launcher.constraint=h100")
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=False)
    assert launcher["partition"] == "a100" and launcher["timeout_min"] == 5
    assert launcher["setup"] == ["module load cuda", "source .venv/bin/activate"]
    assert launcher["additional_parameters"] == {"exclusive": True}
    assert launcher["constraint"] == "h100"


def test_unknown_launcher_preset_gets_hydras_message() -> None:
    from hydra.errors import MissingConfigException

    with pytest.raises(MissingConfigException, match="slurm_gpux"):
        _compose("hydra/launcher=slurm_gpux")
