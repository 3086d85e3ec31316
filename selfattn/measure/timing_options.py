"""How a point is timed: the config's `timing` section (`timing.mode`, `timing.l2`).

- `mode`: which time a CUDA row's `time_ms` holds: the call's (CUDA events around each Python call, the host's
  launch path included) or the kernel's (the call's CUDA graph replayed: selfattn/measure/kernel_time.py). Both are
  columns of every CUDA row either way; a CPU times calls, so a CPU row's mode is always `call`.
- `l2`: whether the timed calls find their inputs in the last-level cache. `cold` (CUDA): the L2 is flushed before
  every timed call and every replay (a 256 MiB write, larger than any GPU's L2: timing.L2_FLUSH_BYTES), queued before
  the start event so its time is outside the interval; the inputs come from HBM, as a layer's do when its inputs
  were written long before. `warm`: no flush; the fresh inputs (selfattn/measure/fresh.py) were just written before
  the call, so they sit in L2 as far as they fit, as a layer's do when its predecessor just wrote them.
  `auto`: cold on CUDA, warm on a CPU. A CPU's caches are never flushed (a sweep of a buffer larger than the
  last-level cache before every call would cost more than the calls themselves at small n), so a CPU refuses
  `cold` in one line rather than time warm calls under a cold label.

Why a flush rather than FlashInfer's rotating buffers (a ring of input sets, together larger than the L2): the
back end's call reads the same tensors every time (the fresh inputs are rewritten in place, so pointer-keyed
caches go stale), and a ring would hand it new tensors; the flush leaves the same cold L2 and costs device time
only outside the timed interval. Every row records both choices as resolved (`timing_mode`, `l2`).
"""

from __future__ import annotations

from dataclasses import dataclass

from selfattn.fields import spec, validate_instance

MODES = ("call", "kernel")
L2_STATES = ("auto", "cold", "warm")


@dataclass(frozen=True)
class TimingOptions:
    """The sweep config's `timing` section."""

    mode: str = spec("call", choices=MODES,
                     help="what time_ms holds on CUDA: the call's time (events around each call) or the kernel's "
                          "(its CUDA graph replayed); both are columns either way. A CPU times calls")
    l2: str = spec("auto", choices=L2_STATES,
                   help="cold: the L2 flushed before every timed call (CUDA only) | warm: no flush, the fresh inputs "
                        "just written stay cached | auto: cold on CUDA, warm on a CPU; the row's l2 says which")

    def __post_init__(self) -> None:
        validate_instance(self, prefix="timing.")

    def l2_on(self, device: str) -> str:
        """The L2 state the timed calls on `device` get ("cold" or "warm"); ValueError (one line) where the device
        cannot give the one asked for."""
        if self.l2 == "auto":
            return "cold" if device == "cuda" else "warm"
        if self.l2 == "cold" and device != "cuda":
            raise ValueError(f"timing.l2: cold needs CUDA (its L2 flushed before every timed call); a {device}'s "
                             "caches are not flushed, so allowed there: auto, warm")
        return self.l2

    def mode_on(self, device: str) -> str:
        """The timing mode a row on `device` records: a CPU times calls."""
        return self.mode if device == "cuda" else "call"
