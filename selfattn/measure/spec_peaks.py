"""The spec sheet's peaks per GPU model and dtype: % of peak the way the FlashAttention benchmarks print it.

`mfu_pct` = tflops / the sheet's dense TFLOP/s for the row's dtype, `bw_pct` = gbps / the sheet's memory bandwidth,
beside the peaks measured on the spot (`device_peak_tflops`, `device_peak_gbps`: what this GPU does today, at its
clocks and power limit). Dense numbers only: the sheets print the 2:4-sparse rate beside (twice these), which no
attention kernel here uses. A GPU missing from the table says so (`spec_gpu` "unknown: <name>"), its % empty.

Sources (NVIDIA's data sheets; per GPU, SXM boards unless named):
- A100: "NVIDIA A100 Tensor Core GPU" datasheet (2021): FP64 9.7, FP32 19.5, TF32 156, BF16/FP16 312; HBM2e
  2039 GB/s (80GB SXM), 1935 GB/s (80GB PCIe), 1555 GB/s (40GB).
- H100 SXM, PCIe, NVL: "NVIDIA H100 Tensor Core GPU" datasheet (2023): SXM FP64 34, FP32 67, TF32 494.5, BF16/FP16
  989.5, FP8 1979, 3.35 TB/s; PCIe FP64 26, FP32 51, TF32 378, BF16/FP16 756, FP8 1513, 2.0 TB/s; NVL FP64 30,
  FP32 60, TF32 417.5, BF16/FP16 835, FP8 1670.5, 3.9 TB/s.
- H200: "NVIDIA H200 Tensor Core GPU" datasheet (2024), SXM: H100 SXM's compute, 4.8 TB/s.
- B200: "NVIDIA HGX B200" datasheet (2024), per GPU of 8: FP64 37, TF32 1125, BF16/FP16 2250, FP8 4500, 8 TB/s
  (FP32 without tensor cores is not on the sheet).
- L4: "NVIDIA L4 Tensor Core GPU" datasheet (2023): FP32 30.3, TF32 60, BF16/FP16 121, FP8 242.5, 300 GB/s.
- L40S: "NVIDIA L40S" datasheet (2023): FP32 91.6, TF32 183, BF16/FP16 362.05, FP8 733, 864 GB/s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

# The rows' precisions -> the sheet's column (fp8_e4m3 and fp8_e5m2 share the FP8 tensor-core rate).
SPEC_DTYPE = {"fp64": "fp64", "fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16",
              "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}


@dataclass(frozen=True)
class Spec:
    model: str
    tflops: Mapping[str, float]  # dense TFLOP/s per SPEC_DTYPE column (a column missing: not on the sheet)
    gbps: float  # memory bandwidth, GB/s (1e9 bytes)


def _spec(model: str, gbps: float, *, fp64: float | None, fp32: float | None, tf32: float, half: float,
          fp8: float | None) -> Spec:
    table = {"fp64": fp64, "fp32": fp32, "tf32": tf32, "bf16": half, "fp16": half, "fp8": fp8}
    return Spec(model, {k: v for k, v in table.items() if v is not None}, gbps)


# (what the device name contains, lower case, every part) -> its sheet; the first match wins, so the more specific
# names come first (an "H100 PCIe" before any H100, an A100's memory size before the bare name).
SPECS: tuple[tuple[tuple[str, ...], Spec], ...] = (
    (("a100", "pcie", "80gb"), _spec("A100 PCIe 80GB", 1935, fp64=9.7, fp32=19.5, tf32=156, half=312, fp8=None)),
    (("a100", "80gb"), _spec("A100 SXM 80GB", 2039, fp64=9.7, fp32=19.5, tf32=156, half=312, fp8=None)),
    (("a100",), _spec("A100 40GB", 1555, fp64=9.7, fp32=19.5, tf32=156, half=312, fp8=None)),
    (("h100", "pcie"), _spec("H100 PCIe", 2000, fp64=26, fp32=51, tf32=378, half=756, fp8=1513)),
    (("h100", "nvl"), _spec("H100 NVL", 3900, fp64=30, fp32=60, tf32=417.5, half=835, fp8=1670.5)),
    (("h100",), _spec("H100 SXM", 3350, fp64=34, fp32=67, tf32=494.5, half=989.5, fp8=1979)),
    (("h200",), _spec("H200 SXM", 4800, fp64=34, fp32=67, tf32=494.5, half=989.5, fp8=1979)),
    (("b200",), _spec("B200", 8000, fp64=37, fp32=None, tf32=1125, half=2250, fp8=4500)),
    (("l40s",), _spec("L40S", 864, fp64=None, fp32=91.6, tf32=183, half=362.05, fp8=733)),
    (("l4",), _spec("L4", 300, fp64=None, fp32=30.3, tf32=60, half=121, fp8=242.5)),
)


def spec_for(device_name: str) -> Spec | None:
    """The sheet of the GPU named `device_name` (torch.cuda.get_device_name's text), or None when not in SPECS."""
    name = device_name.lower().replace("-", " ")
    words = set(name.split())
    for parts, spec in SPECS:
        # "l4" must be a word of its own ("NVIDIA L4"), not a prefix of "L40S"; the others are substrings
        if all((part in words) if part == "l4" else (part in name) for part in parts):
            return spec
    return None


def spec_columns(device: str, device_name: str, precision: str, tflops: float | None,
                 gbps: float | None) -> dict[str, Any]:
    """The row's spec columns: spec_gpu, spec_tflops, spec_gbps, mfu_pct, bw_pct (CUDA rows only; {} elsewhere)."""
    if device != "cuda":
        return {}
    spec = spec_for(device_name or "")
    if spec is None:
        return {"spec_gpu": f"unknown: {device_name or 'no name'} (not in selfattn/measure/spec_peaks.py)"}
    peak = spec.tflops.get(SPEC_DTYPE.get(precision, ""))
    columns: dict[str, Any] = {"spec_gpu": spec.model, "spec_tflops": peak, "spec_gbps": spec.gbps}
    columns["mfu_pct"] = 100.0 * tflops / peak if tflops and peak else None
    columns["bw_pct"] = 100.0 * gbps / spec.gbps if gbps else None
    return columns


def fill(row: Any) -> None:
    """Set the spec columns on `row` from its device, device_name, precision, tflops and gbps."""
    for name, value in spec_columns(row.device, row.device_name, row.precision, row.tflops, row.gbps).items():
        setattr(row, name, value)
