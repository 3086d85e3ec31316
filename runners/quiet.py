"""Quiet by default: the known notes of the libraries the harness drives are not shown unless
`verbose=true`.

- Hydra's deprecation notes (warnings that point at its upgrade pages): a Python warnings filter on
  exactly those, installed before Hydra runs when the command line does not say `verbose=true`.
- torch's allocator profiler note ("Memory block of unknown size was allocated before the profiling
  started"), which c10's allocator writes to file descriptor 2 during the CPU memory measurement
  (selfattn/measure/memory.py) with LOG(WARNING), on the first such free and every 1000th of a process:
  torch's documented TORCH_CPP_LOG_LEVEL, set to ERROR here unless `verbose=true` is on the command line or
  the user set it. c10 reads it once, when torch's library loads, so it is set before anything imports
  torch, for the sweep's process and the processes it starts; an experiment's own `verbose: true` cannot
  show the note (its jobs run after torch loaded). It hides c10's other C++ warnings too (LOG(WARNING):
  rare, and never about a measurement); TORCH_WARN warnings reach Python's warnings and are all shown, as
  is everything else written to stderr.
"""

from __future__ import annotations

import os
import warnings
from typing import Sequence

VERBOSE_ENV = "SELFATTN_VERBOSE"  # read by selfattn/measure/memory.py (selfattn knows no config; spelt there too)
CPP_LOG_ENV = "TORCH_CPP_LOG_LEVEL"  # c10's log level, read when torch's C++ library loads
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
        os.environ.setdefault(CPP_LOG_ENV, "ERROR")  # torch is not imported yet (runners/sweep.py)


def set_verbose(verbose: bool) -> None:
    if verbose:
        os.environ[VERBOSE_ENV] = "1"
    else:
        os.environ.pop(VERBOSE_ENV, None)
