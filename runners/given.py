"""Which of a job's keys its user gave: typed on the command line, or set by the chosen experiment.

The composed config does not say where a value came from, and the defaults that follow the scope
(`selfattn.point.SCOPE_DEFAULTS`, applied by `runners.config.parse_job`) must replace only values
nobody gave: `scope=train` typed alone runs forward and backward, `scope=train mode=fwd` is refused.
Hydra records a job's typed overrides (`hydra.overrides.task`, an experiment's `hydra.sweeper.params`
included) and the config sources it composed from (`hydra.runtime.config_sources`, a user's
`hydra.searchpath` included); the experiment's own keys are read from its file in those sources.
A grid point's keys count too (parse_job adds them).
"""

from __future__ import annotations

import functools
from typing import Any

from hydra.core.plugins import Plugins
from hydra.plugins.config_source import ConfigSource

GROUP = "experiment"
NOT_KEYS = ("defaults", "hydra")  # an experiment's defaults list and Hydra's settings set no config key


def given_keys(hydra: Any) -> list[str] | None:
    """The top-level keys typed or set by the experiment, from a job's Hydra config (`HydraConfig.get()`,
    or a composed config's `hydra` node); None when the experiment's file cannot be read, so that every
    key counts as given (no default follows the scope)."""
    typed = [o.split("=", 1)[0].lstrip("+~").split(".", 1)[0] for o in hydra.overrides.task if "=" in o]
    experiment = hydra.runtime.choices.get(GROUP)
    if experiment is None:
        return list(dict.fromkeys(typed))
    sources = tuple((s.schema, s.provider, s.path) for s in hydra.runtime.config_sources)
    keys = experiment_keys(str(experiment), sources)
    return None if keys is None else list(dict.fromkeys([*typed, *keys]))


@functools.lru_cache(maxsize=None)  # one file read per process and experiment, not one per job
def experiment_keys(experiment: str, sources: tuple[tuple[str, str, str], ...]) -> tuple[str, ...] | None:
    """The top-level keys `experiment`'s file sets (it is `# @package _global_`), read from the first of
    `sources` (schema, provider, path: Hydra's search path, in order) that has it; None if none has it."""
    kinds = {kind.scheme(): kind for kind in Plugins.instance().discover(ConfigSource) if issubclass(kind, ConfigSource)}
    path = f"{GROUP}/{experiment}"
    for schema, provider, where in sources:
        if schema not in kinds:
            continue
        source = kinds[schema](provider, f"{schema}://{where}")
        if source.is_config(path):
            return tuple(str(k) for k in source.load_config(path).config if k not in NOT_KEYS)
    return None
