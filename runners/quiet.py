"""Quiet by default: the known notes of the libraries the harness drives are not shown unless
`verbose=true`, and nothing else is hidden.

- Hydra's deprecation notes (warnings that point at its upgrade pages): a Python warnings filter on
  exactly those, installed before Hydra runs when the command line does not say `verbose=true`.
- torch's allocator profiler note ("Memory block of unknown size was allocated before the profiling
  started"), printed by its C++ side during the CPU memory measurement: selfattn/measure/memory.py
  drops that one line from what the measured call writes to stderr, unless SELFATTN_VERBOSE=1, which
  `set_verbose` sets for each job from its config (an experiment may set `verbose` too).
"""

from __future__ import annotations

import os
import warnings
from typing import Sequence

VERBOSE_ENV = "SELFATTN_VERBOSE"  # read by selfattn/measure/memory.py (selfattn knows no config; spelt there too)
# Hydra's deprecation_warning() messages each end with a link to its upgrade notes
HYDRA_DEPRECATION = r"(?s).*hydra\.cc/docs/\S*upgrades"


def verbose_in(argv: Sequence[str]) -> bool:
    """Whether the command line asks for `verbose=true` (Hydra has not parsed it yet)."""
    return any(a.lstrip("+") in ("verbose=true", "verbose=True") for a in argv)


def before_hydra(argv: Sequence[str]) -> None:
    """Hide Hydra's deprecation notes unless `verbose=true`; the jobs' own setting follows per job."""
    set_verbose(verbose_in(argv))
    if not verbose_in(argv):
        warnings.filterwarnings("ignore", message=HYDRA_DEPRECATION, category=UserWarning)


def set_verbose(verbose: bool) -> None:
    if verbose:
        os.environ[VERBOSE_ENV] = "1"
    else:
        os.environ.pop(VERBOSE_ENV, None)
