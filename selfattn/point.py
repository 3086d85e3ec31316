"""One point of a sweep: everything that decides what is measured, and nothing else.

A `Point` is what `selfattn.measure.measure_point` takes and what the sweep runner builds
from a Hydra job's config. It knows nothing of Hydra or files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

BACKENDS_DOC = "naive | sdpa | chunked"
PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16")
DEVICES = ("auto", "cpu", "cuda")
MODES = ("fwd", "fwd_bwd")
SCOPES = ("core", "layer")


def parse_scale(value: Any) -> float | None:
    """Turn the config spelling of `scale` into what `selfattn.attention` takes.

    "auto" (or None) -> None, meaning 1/sqrt(head_dim); "none" -> 1.0, the unscaled
    ablation; a number -> that number (positive and finite).
    """
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    if isinstance(value, str) and value.strip().lower() == "none":
        return 1.0
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"scale: expected auto, none or a positive number, got {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"scale: expected auto, none or a positive finite number, got {value!r}")
    return number


def scale_label(value: Any) -> str:
    """The spelling stored in the `scale` column: "auto", "none" or the number as text."""
    scale = parse_scale(value)
    if scale is None:
        return "auto"
    if isinstance(value, str) and value.strip().lower() == "none":
        return "none"
    return repr(scale)


@dataclass(frozen=True)
class Point:
    """One measured configuration. Field names are the sweep's flat config keys."""

    backend: str = "naive"
    backend_options: Mapping[str, Any] = field(default_factory=dict)
    precision: str = "fp32"
    device: str = "cpu"  # "auto" is resolved by the caller or by measure_point
    batch: int = 1
    heads: int = 8
    q_len: int | None = None  # None: q_len == seq_len (self-attention over the whole sequence)
    seq_len: int = 1024
    head_dim: int = 64
    causal: bool = False
    scale: Any = "auto"  # "auto" | "none" | positive number, see parse_scale
    mode: str = "fwd"
    scope: str = "core"
    input_std: float = 1.0
    seed: int = 0

    @property
    def q_len_resolved(self) -> int:
        return self.seq_len if self.q_len is None else self.q_len

    @property
    def scale_value(self) -> float:
        """The factor the logits are multiplied by."""
        scale = parse_scale(self.scale)
        return 1.0 / math.sqrt(self.head_dim) if scale is None else scale

    @property
    def d_model(self) -> int:
        return self.heads * self.head_dim

    def validate(self) -> None:
        """Raise ValueError with one line naming the field and what is allowed."""
        for name in ("batch", "heads", "seq_len", "head_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
        if self.q_len is not None and (
            isinstance(self.q_len, bool) or not isinstance(self.q_len, int) or self.q_len < 1
        ):
            raise ValueError(f"q_len: expected null or an integer >= 1, got {self.q_len!r}")
        if self.scope == "layer" and self.q_len is not None and self.q_len != self.seq_len:
            raise ValueError(f"q_len: scope=layer is self-attention over X, so q_len must be null or seq_len, got {self.q_len!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision: expected one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device: expected one of {', '.join(DEVICES)}, got {self.device!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode: expected one of {', '.join(MODES)}, got {self.mode!r}")
        if self.scope not in SCOPES:
            raise ValueError(f"scope: expected one of {', '.join(SCOPES)}, got {self.scope!r}")
        if not isinstance(self.causal, bool):
            raise ValueError(f"causal: expected true or false, got {self.causal!r}")
        parse_scale(self.scale)
        std = self.input_std
        if isinstance(std, bool) or not isinstance(std, (int, float)) or not math.isfinite(std) or std <= 0:
            raise ValueError(f"input_std: expected a positive finite number, got {std!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed: expected an integer >= 0, got {self.seed!r}")
