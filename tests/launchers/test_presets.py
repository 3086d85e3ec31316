"""The SLURM preset composes on top of the plugin's own submitit_slurm config.

Composition only (no cluster here): the preset must keep every plugin key and set the ones
people change. That Hydra overrides its keys from the command line and that submitit turns
them into #SBATCH lines are those projects' own behaviour, tested there.
"""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir

from runners import config

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
SLURM_TARGET = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"


def _compose(*overrides: str):
    config.register_resolvers()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
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


def test_slurm_cpu_preset_extends_the_plugin_config_and_asks_for_no_gpu() -> None:
    launcher = _compose("experiment=scaling_stability", "device=cpu", "hydra/launcher=slurm_cpu").hydra.launcher
    assert launcher._target_ == SLURM_TARGET and launcher.gpus_per_node is None
    assert launcher.cpus_per_task >= 1 and launcher.mem_gb > 0 and launcher.timeout_min > 0
    assert set(_compose("hydra/launcher=submitit_slurm").hydra.launcher) <= set(launcher)
    assert launcher.name == "selfattn-scaling_stability"
