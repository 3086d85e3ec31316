"""The runner's uses of Hydra's private `hydra._internal`, each behind a check of the Hydra it was written for
(1.3, the release pyproject.toml pins) and of the name's presence. Where a check fails the function returns
None (or False) and its caller does without: the sweep still runs, a little slower or saying less.

| private use | caller | without it |
|---|---|---|
| `hydra._internal.utils.get_args_parser` (Hydra's command line) | `cli_check`: typos refused before Hydra starts | Hydra composes first; each job's own check still refuses a bad key or value (an `invalid` row) |
| `BasicSweeper.split_arguments` (the jobs of a sweep) | `callbacks.count_jobs`: `[i/N]` and the ETA | `[i/?]`, as with any other sweeper |
| `BasicSweeper.validate_batch_is_legal` (replaced by a no-op) | `callbacks.skip_prevalidation` | every job's config is composed twice, as `prevalidate=true` does (~0.2 s a job) |

The default launcher's own uses (ConfigLoaderImpl, BasicLauncher) sit in hydra_plugins/selfattn_launcher/
compose_once.py, which checks the same version and, failing it, leaves Hydra's basic launcher to run the jobs.
"""

from __future__ import annotations

import argparse
import re
from typing import Any, Callable

import hydra

WRITTEN_FOR = (1, 3)  # Hydra's release these were written for and checked against (1.3.0, the floor, to 1.3.8)


def hydra_version() -> tuple[int, int]:
    found = re.match(r"(\d+)\.(\d+)", str(hydra.__version__))
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def written_for() -> bool:
    return hydra_version() == WRITTEN_FOR


def args_parser() -> argparse.ArgumentParser | None:
    """Hydra's own command-line parser, or None."""
    if not written_for():
        return None
    try:
        from hydra._internal.utils import get_args_parser
    except ImportError:
        return None
    return get_args_parser()


def _basic_sweeper() -> Any | None:
    if not written_for():
        return None
    try:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    except ImportError:
        return None
    return BasicSweeper


def split_sweep(overrides: list[Any]) -> list[list[list[str]]] | None:
    """The basic sweeper's batches of job overrides for these parsed overrides (its own product), or None."""
    sweeper = _basic_sweeper()
    split: Callable[..., Any] | None = getattr(sweeper, "split_arguments", None)
    return None if split is None else split(overrides, None)


def skip_batch_validation() -> bool:
    """Make the basic sweeper skip its up-front composition of every job's config; whether it could."""
    sweeper = _basic_sweeper()
    if sweeper is None or not hasattr(sweeper, "validate_batch_is_legal"):
        return False
    sweeper.validate_batch_is_legal = lambda self, batch: None
    return True
