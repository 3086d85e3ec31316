"""The GPU's state over a row's timed window, through NVML: SM and memory clocks, power, temperature, throttling.

A time is only as good as the clocks it ran at: a GPU that throttles (power cap, heat, a slowed clock) in the
middle of a window gives a slower median for reasons that are not the kernel's. So a thread samples NVML every
SAMPLE_S while the timer runs (at least at its start and end), and the row keeps the median SM and memory clocks,
the largest power draw and temperature, and every throttle reason seen. A reason that slows the clocks (power or
thermal, hardware slowdown; not "idle" or the application's own clock setting) flags the row `noisy`.

NVML comes from nvidia-ml-py (`pip install "selfattn-bench[gpu]"`), imported only when a CUDA row is timed; without
it the row's `gpu_state` note says so and its columns stay empty. Device index: torch's current device, mapped
through CUDA_VISIBLE_DEVICES where that names plain indices (NVML counts every GPU on the machine).
"""

from __future__ import annotations

import os
import statistics
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

SAMPLE_S = 0.01  # NVML's clocks refresh about this often; finer sampling would only read the same values again
MISSING = "nvidia-ml-py is not installed (pip install 'selfattn-bench[gpu]'): no clocks, power or throttle state"

# NVML's clocks-event (throttle) reason bits (nvml.h, nvmlClocksEventReason*) -> the words a row uses;
# SLOWING are those that lower the clocks below what the application asked for.
REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
           0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
           0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}
SLOWING = frozenset({"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                     "hw_power_brake_slowdown"})


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in REASONS.items() if mask & bit]


def _nvml() -> Any | None:
    try:
        import pynvml  # nvidia-ml-py's module
    except ImportError:
        return None
    return pynvml


def _nvml_index(torch_index: int) -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    parts = [p.strip() for p in visible.split(",") if p.strip()]
    if parts and all(p.isdigit() for p in parts) and torch_index < len(parts):
        return int(parts[torch_index])
    return torch_index


@dataclass
class GpuState:
    """What the samples saw; `columns()` gives the row's."""

    sm_clock_mhz: list[float] = field(default_factory=list)
    mem_clock_mhz: list[float] = field(default_factory=list)
    power_w: list[float] = field(default_factory=list)
    temp_c: list[float] = field(default_factory=list)
    reasons: set[str] = field(default_factory=set)
    note: str = ""  # why nothing was sampled

    def columns(self) -> dict[str, Any]:
        def median(values: list[float]) -> float | None:
            return statistics.median(values) if values else None

        slowing = sorted(self.reasons & SLOWING)
        return {"gpu_sm_clock_mhz": median(self.sm_clock_mhz), "gpu_mem_clock_mhz": median(self.mem_clock_mhz),
                "gpu_power_w": max(self.power_w) if self.power_w else None,
                "gpu_temp_c": max(self.temp_c) if self.temp_c else None,
                "gpu_throttle": ",".join(sorted(self.reasons)), "gpu_state": self.note,
                "throttled": bool(slowing) if self.sm_clock_mhz else None}

    def fill(self, row: Any) -> None:
        """The columns on `row`; a slowing reason makes it noisy, with the reason in `noise`."""
        for name, value in self.columns().items():
            setattr(row, name, value)
        slowing = sorted(self.reasons & SLOWING)
        if slowing:
            row.noisy = True
            row.noise = "; ".join(filter(None, [row.noise, f"throttled during the timed calls ({', '.join(slowing)})"]))


def _sample(nvml: Any, handle: Any, state: GpuState) -> None:
    state.sm_clock_mhz.append(float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)))
    state.mem_clock_mhz.append(float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)))
    state.power_w.append(nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)  # milliwatts
    state.temp_c.append(float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)))
    # the newer name first (nvidia-ml-py 12.535+); the older one stays for older drivers' bindings
    reasons = (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
               or nvml.nvmlDeviceGetCurrentClocksThrottleReasons)
    state.reasons.update(reason_names(int(reasons(handle))))


@contextmanager
def sampled(device: str, torch_index: int | None = None) -> Iterator[GpuState | None]:
    """Sample the GPU while the body runs (a CUDA device); None on a CPU. Never raises for NVML's sake: a failure
    leaves the state's `note`."""
    if device != "cuda":
        yield None
        return
    state = GpuState()
    nvml = _nvml()
    if nvml is None:
        state.note = MISSING
        yield state
        return
    try:
        if torch_index is None:
            import torch

            torch_index = torch.cuda.current_device()
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(_nvml_index(torch_index))
        _sample(nvml, handle, state)
    except Exception as err:  # NVML present but unusable (no driver access in a container): the row says why
        state.note = f"NVML failed: {type(err).__name__}: {' '.join(str(err).split())[:160]}"
        yield state
        return
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(SAMPLE_S):
            try:
                _sample(nvml, handle, state)
            except Exception:  # a failed read mid-window: the samples before and after still stand
                pass

    sampler = threading.Thread(target=loop, name="selfattn-nvml", daemon=True)
    sampler.start()
    try:
        yield state
    finally:
        stop.set()
        sampler.join()
        try:
            _sample(nvml, handle, state)  # the window's end
            nvml.nvmlShutdown()
        except Exception:
            pass
