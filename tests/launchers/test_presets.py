"""The SLURM preset composes on top of the plugin's own submitit_slurm config.

Composition only (no cluster here): the preset must keep every plugin key, set the ones
people change, and leave each one overridable from the command line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

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


def test_slurm_gpu_preset_settings_are_overridable() -> None:
    cfg = _compose("hydra/launcher=slurm_gpu", "hydra.launcher.partition=a100", "hydra.launcher.timeout_min=5",
                   "hydra.launcher.setup=[module load cuda,source .venv/bin/activate]",
                   "+hydra.launcher.additional_parameters.exclusive=true", "hydra.launcher.constraint=h100")
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=False)
    assert launcher["partition"] == "a100" and launcher["timeout_min"] == 5
    assert launcher["setup"] == ["module load cuda", "source .venv/bin/activate"]
    assert launcher["additional_parameters"] == {"exclusive": True}
    assert launcher["constraint"] == "h100"


@pytest.mark.parametrize("preset, device, lines, absent", [
    ("slurm_gpu", "cuda", ["--gpus-per-node=1", "--cpus-per-task=4", "--mem=32GB"], []),
    ("slurm_cpu", "cpu", ["--cpus-per-task=8", "--mem=16GB"], ["--gpus-per-node", "--gres"]),
])
def test_slurm_preset_becomes_the_expected_sbatch_script(preset, device, lines, absent, tmp_path, monkeypatch) -> None:
    """What submitit would submit: the preset's values as #SBATCH lines, the setup lines before srun.

    The parameters go through the same translation as the plugin's launch() (base keys as they
    are, the others prefixed with slurm_), so a key submitit does not accept fails here, not on
    a cluster. submitit only checks that `srun` exists; a stub on PATH stands in for SLURM.
    """
    submitit = pytest.importorskip("submitit")
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    stub = tmp_path / "bin" / "srun"
    stub.parent.mkdir()
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{stub.parent}:{__import__('os').environ['PATH']}")

    cfg = _compose("experiment=cross_gpu", f"device={device}", f"hydra/launcher={preset}", "hydra.launcher.partition=h100",
                   "hydra.launcher.setup=[module load cuda]", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    params = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    params.pop("_target_")
    executor = submitit.AutoExecutor(cluster="slurm", folder=params.pop("submitit_folder"),
                                     slurm_max_num_timeout=params.pop("max_num_timeout"))
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
    script = executor._executor._make_submission_file_text("python -u -m submitit.core._submit DIR", "uid")
    for line in ["--partition=h100", "--time=20", "--job-name=selfattn-cross_gpu", *lines]:
        assert f"#SBATCH {line}\n" in script, script
    for option in absent:
        assert f"#SBATCH {option}" not in script, script
    assert script.index("module load cuda") < script.index("srun ")
    assert executor._executor.parameters["array_parallelism"] == cfg.hydra.launcher.array_parallelism
