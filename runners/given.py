"""Which of a job's keys its user gave: typed on the command line, or set by the chosen experiment.

The composed config does not say where a value came from, and the defaults that follow the scope
(`selfattn.point.SCOPE_DEFAULTS`, applied by `runners.config.parse_job`) must replace only values
nobody gave: `scope=train` typed alone runs forward and backward, `scope=train mode=fwd` is refused.
Hydra records the typed overrides of a job (`hydra.overrides.task`, an experiment's
`hydra.sweeper.params` included); the experiment's own keys are read from its file through Hydra's
config sources, so a user's experiment on `hydra.searchpath` counts as well. A grid point's keys
count too (parse_job adds them).
"""

from __future__ import annotations

import functools
from typing import Sequence

from hydra.core.global_hydra import GlobalHydra

GROUP = "experiment"
NOT_KEYS = ("defaults", "hydra")  # an experiment's defaults list and Hydra's settings set no config key


def given_keys(task_overrides: Sequence[str], experiment: str | None) -> list[str] | None:
    """The top-level keys typed or set by `experiment` (a choice of conf/experiment/); None when the
    experiment's file cannot be read, so that every key counts as given (no default follows the scope)."""
    typed = [o.split("=", 1)[0].lstrip("+~").split(".", 1)[0] for o in task_overrides if "=" in o]
    if experiment is None:
        return list(dict.fromkeys(typed))
    keys = experiment_keys(experiment)
    return None if keys is None else list(dict.fromkeys([*typed, *keys]))


@functools.lru_cache(maxsize=None)  # one file read per process and experiment, not one per job
def experiment_keys(experiment: str) -> tuple[str, ...] | None:
    """The top-level keys `experiment`'s file sets (it is `# @package _global_`), or None if not found."""
    if not GlobalHydra.instance().is_initialized():
        return None
    path = f"{GROUP}/{experiment}"
    for source in GlobalHydra.instance().config_loader().get_sources():  # in the search path's order
        if source.is_config(path):
            config = source.load_config(path).config
            return tuple(str(k) for k in config if k not in NOT_KEYS)
    return None
