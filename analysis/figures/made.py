"""What a figure function takes and returns: its Context, and Made or Skipped. Pure Python, so the report
imports them without matplotlib, which comes with the first figure module it calls."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence


@dataclass
class Context:
    out_dir: Path  # figures are written to out_dir / "<name>.<format>"
    formats: Sequence[str] = ("png",)  # PDF copies when asked (analysis.report --pdf)
    baseline_device: str | None = None


@dataclass
class Made:
    name: str
    title: str
    how_to_read: str
    files: list[Path]
    notes: list[str] = field(default_factory=list)  # slices and caveats computed from the data


@dataclass
class Skipped:
    name: str
    title: str
    reason: str
    experiment: str  # the named experiment whose rows make this figure
