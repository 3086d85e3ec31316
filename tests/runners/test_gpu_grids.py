"""The GPU grids of decode and gqa: fused-kernel precisions, and decode sized to finish in minutes
on one H200 (every point fits its memory beside the harness's own passes; no input waits on the host).

Composed with device=cuda on any machine: ${by_device:...} picks the GPU values, and the guard's
predictions need no GPU."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from runners import config
from selfattn.measure.flops import point_flops
from selfattn.measure.predict import (
    accuracy_bytes,
    after_warmup_s,
    input_bytes,
    input_draw_s,
)
from selfattn.measure.traffic import bytes_moved
from tests.predicted import predicted_mem_bytes

CONF = Path(__file__).resolve().parents[2] / "conf"
config.register_resolvers()

H200_BYTES = 140e9  # what torch sees free on an idle H200 (143,771 MiB in all), rounded down
H200_BF16_FLOPS = 400e12  # well under its dense bf16 peak: an estimate of what these kernels reach
H200_BYTES_PER_S = 3e12  # likewise under its 4.8 TB/s
JOB_OVERHEAD_S = 1.5  # a multirun job's own cost: Hydra, the row, the device probes' share
ROWS = 8  # decode.yaml's budget.accuracy_rows


def _task(cfg) -> dict:
    return OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=True)


def _decode_points(composer, device: str):
    cfg = composer(["experiment=decode", f"device={device}", "grid_point=0"])
    task = _task(cfg)
    points = []
    for index in range(len(config.grid_points(task["grids"]))):
        parsed = config.parse_job({**task, "grid_point": index, "device": device})
        assert not parsed.problem, parsed.problem
        points.append(parsed.point)
    return cfg, points


def test_decode_runs_bf16_on_a_gpu_and_keeps_fp32_on_a_cpu(composer):
    _, gpu = _decode_points(composer, "cuda")
    _, cpu = _decode_points(composer, "cpu")
    assert {p.precision for p in gpu if p.scope == "core"} == {"bf16", "fp8_e4m3"}  # the decode grid: fused kernels
    assert {p.precision for p in gpu if p.scope == "generate"} == {"fp32", "fp8_e4m3"}  # no GQA there: fused in fp32
    assert {p.precision for p in cpu} == {"fp32", "fp8_e4m3"}  # the CPU grid as before, and the FP8 cache's points
    assert {p.backend for p in gpu if p.precision == "fp8_e4m3"} <= {"naive", "chunked"}  # the back ends with FP8


@pytest.mark.parametrize("device, precision", [("cuda", "bf16"), ("cpu", "fp32")])
def test_gqa_runs_bf16_on_a_gpu_and_keeps_fp32_on_a_cpu(composer, device, precision):
    cfg = composer(["experiment=gqa", f"device={device}"])
    assert OmegaConf.to_container(cfg.hydra.sweeper.params, resolve=True)["precision"] == precision


def test_decode_gpu_grid_fits_an_h200_and_finishes_in_minutes(composer):
    cfg, points = _decode_points(composer, "cuda")
    total_s = 0.0
    for point in points:
        need = input_bytes(point) + predicted_mem_bytes(point) + accuracy_bytes(point, ROWS)
        assert need <= 0.8 * H200_BYTES, f"{point}: {need / 1e9:.0f} GB would be skipped_budget"
        call_s = max(point_flops(point) / H200_BF16_FLOPS, bytes_moved(point) / H200_BYTES_PER_S)
        # the harness's own passes touch about the accuracy pass's bytes once
        harness_s = input_draw_s(point, ROWS) + accuracy_bytes(point, ROWS) / H200_BYTES_PER_S
        total_s += (JOB_OVERHEAD_S + harness_s + call_s
                    + after_warmup_s("cuda", call_s, cfg.budget.timing_s, point.precision))
        assert input_draw_s(point, ROWS) < 1.0  # drawn on the device: no point waits on one host thread
    assert len(points) == 140 and total_s < 6 * 60, f"{len(points)} points, ~{total_s / 60:.1f} min"
    # the negative control: the old grid's 256K cache at batch 8 x 32 K/V heads does not fit
    largest = max(points, key=lambda p: input_bytes(p) + predicted_mem_bytes(p) + accuracy_bytes(p, ROWS))
    old = replace(largest, seq_len=262144)
    assert input_bytes(old) + predicted_mem_bytes(old) + accuracy_bytes(old, ROWS) > H200_BYTES
