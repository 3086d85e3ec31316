"""flex's options (selfattn/backends/flex.py): torch's flex_attention, compiled, with a block mask."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Options:
    """flex has no options of its own: the mask arguments decide its block mask."""
