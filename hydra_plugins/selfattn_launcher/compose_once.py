"""The default local launcher: Hydra's basic launcher, composing a job's config in full only when it must.

Hydra's basic launcher composes every job's config from the YAML files again (its load_sweep_config:
parse each file with PyYAML's pure-Python loader, build the defaults list, merge), about twice as long
with an experiment as without, and a sweep's jobs read the same files again each time. A grid's jobs differ only in plain
values (grid_point=N, seed=S), and composition applies those last, after every file is merged
(ConfigLoaderImpl._apply_overrides_to_config). So for a job whose overrides differ from the previous
composed job's only in the values of plain keys, this launcher copies that job's config and applies the
job's overrides with the same function, then sets what composition derives from the override list
(hydra.overrides.task, hydra.job.override_dirname). Anything else (a config group such as backend=sdpa,
an added or deleted key, a hydra.* key) is composed in full. tests/runners/test_launcher.py checks, job
by job, that both ways give the same config.

It is the default (conf/config.yaml: hydra/launcher: compose_once); `hydra/launcher=basic` is Hydra's own.
Hydra takes launchers from the hydra_plugins namespace package only, hence this folder.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Sequence

import hydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from hydra.errors import MissingConfigException
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)

# Hydra's private classes and functions this launcher builds on, as Hydra 1.3 has them (pyproject.toml pins
# hydra-core to 1.3). Another Hydra, or one that moved them: WHY_NOT says so and the module defines no launcher,
# so Hydra's plugin scan finds none here and runners/launcher.py runs Hydra's basic launcher with a notice.
WRITTEN_FOR = "1.3."
WHY_NOT: str | None = None
try:
    from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
    from hydra._internal.core_plugins.basic_launcher import BasicLauncher
except ImportError as exc:
    WHY_NOT = f"{type(exc).__name__}: {exc}"
    BasicLauncher = object  # type: ignore[misc,assignment]  (the class below is deleted)
else:
    if not str(hydra.__version__).startswith(WRITTEN_FOR):
        WHY_NOT = f"it was written for Hydra {WRITTEN_FOR}x, this is Hydra {hydra.__version__}"
    elif not hasattr(ConfigLoaderImpl, "_apply_overrides_to_config"):
        WHY_NOT = "Hydra's ConfigLoaderImpl._apply_overrides_to_config is gone"


class _Composed:
    """The last job composed in full: its overrides (parsed) and its config. (Not a dataclass: Hydra's
    plugin scan runs this module without registering it in sys.modules, which dataclasses need.)"""

    def __init__(self, overrides: list[Override], config: DictConfig) -> None:
        self.overrides, self.config = overrides, config


class ComposeOnceLauncher(BasicLauncher):
    """BasicLauncher.launch with `job_config` in place of load_sweep_config (Hydra 1.3's loop otherwise)."""

    def __init__(self) -> None:
        super().__init__()
        self._template: _Composed | None = None
        self._parser = OverridesParser.create()
        self.composed_in_full = 0  # jobs whose config came from the files (the rest: from the template)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        setup_globals()
        assert self.hydra_context is not None and self.config is not None and self.task_function is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        log.info(f"Launching {len(job_overrides)} jobs locally")
        from runners import interrupts

        runs: list[JobReturn] = []
        for idx, overrides in enumerate(job_overrides):
            idx = initial_job_idx + idx
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            # While Hydra composes the job's config and sets the job up, Ctrl-C or SIGTERM waits: raised inside
            # OmegaConf's flag_override, the interrupt left a list half set and its exit raised AttributeError in
            # its place (a traceback and exit 1, not one line and 143). The job's task releases it at its start
            # (runners/job.py), so a point being measured is still interrupted at once. A composition that does not
            # end within half a second of the signal (a plugin's import hanging) is ended by interrupts' watcher.
            interrupts.hold(composing=True)  # at most interrupts.COMPOSING_GRACE_S: a plugin's import may hang here
            try:
                sweep_config = self.job_config(list(overrides))
                with open_dict(sweep_config):
                    sweep_config.hydra.job.id = idx
                    sweep_config.hydra.job.num = idx
                _job_folder_inside(sweep_config)  # before Hydra makes the folder: one line and exit 2 if outside
                ret = run_job(hydra_context=self.hydra_context, task_function=self.task_function,
                              config=sweep_config, job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
                # The sweeper keeps every job's return to the sweep's end (it reads only return_value); each held
                # its composed config, 0.12 MiB a job (12 GiB at 100,000 points). The callbacks have seen it by now.
                ret.cfg = ret.hydra_cfg = None  # type: ignore[assignment]
                runs.append(ret)
            except OSError as exc:  # Hydra could not make the job's folder (a full or read-only disk): one line
                if isinstance(exc, MissingConfigException):  # an OSError to Hydra, but a config, not the disk
                    raise
                from runners.ledger import job_folder_failed

                job_folder_failed(exc, idx, len(job_overrides))  # the sweep goes on, or stops on a read-only one
            finally:
                interrupts.release()
            interrupts.raise_pending()
            configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return runs

    def job_config(self, overrides: list[str]) -> DictConfig:
        """The config Hydra's load_sweep_config(self.config, overrides) gives, composed in full or not."""
        assert self.hydra_context is not None and self.config is not None
        parsed = self._parser.parse_overrides(overrides=overrides)
        template = self._template
        if template is not None and _plain_changes(template, parsed):
            config = copy.deepcopy(template.config)
            changed = [new for old, new in zip(template.overrides, parsed) if old.input_line != new.input_line]
            ConfigLoaderImpl._apply_overrides_to_config(changed, config)  # composition's own last step
            with open_dict(config.hydra):
                config.hydra.overrides.task = [o.input_line for o in parsed]  # no hydra.* override here
                options = config.hydra.job.config.override_dirname
                config.hydra.job.override_dirname = get_overrides_dirname(
                    overrides=parsed, kv_sep=options.kv_sep, item_sep=options.item_sep,
                    exclude_keys=list(options.exclude_keys))
            OmegaConf.copy_cache(from_config=self.config, to_config=config)  # as load_sweep_config does
            return config
        config = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        self.composed_in_full += 1
        self._template = _Composed(parsed, copy.deepcopy(config))  # before the launcher sets job id and num
        return config


if WHY_NOT is not None:
    del ComposeOnceLauncher


def _job_folder_inside(config: DictConfig) -> None:
    """Refuse (one line, exit 2) a job whose folder, hydra.sweep.subdir resolved, is not inside the sweep folder."""
    from runners.paths import job_folder_problem

    sweep_dir = Path(str(config.hydra.sweep.dir))
    if problem := job_folder_problem(sweep_dir, sweep_dir / str(config.hydra.sweep.subdir)):
        import sys

        print(f"error: {problem}", file=sys.stderr, flush=True)
        sys.exit(2)


def _plain_changes(template: _Composed, parsed: list[Override]) -> bool:
    """Whether `parsed` is the template's override list with only plain values changed: the same keys
    in the same order, no hydra.* override, and every change a plain `key=value` of a key that is not a
    config group (a group's value picks files, so that job is composed from them), to a value that is
    not a mapping (a scalar or a list replaces the node; a mapping would merge into it)."""
    if len(parsed) != len(template.overrides):
        return False
    groups = set(template.config.hydra.runtime.choices.keys())
    for old, new in zip(template.overrides, parsed):
        if old.key_or_group != new.key_or_group or old.package != new.package or new.is_hydra_override():
            return False
        if old.input_line == new.input_line:
            continue
        if (new.type != OverrideType.CHANGE or old.type != OverrideType.CHANGE or new.is_sweep_override()
                or new.key_or_group in groups or new.package is not None):
            return False
        if isinstance(old.value(), dict) or isinstance(new.value(), dict):  # a mapping merges into the node:
            return False  # onto the template's it would keep the keys the template's own value added
    return True
