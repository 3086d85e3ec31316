"""The report's figures, in order: each takes the merged rows and a Context and returns Made or Skipped."""

from __future__ import annotations

from analysis.figures.accuracy import accuracy_vs_seq_len
from analysis.figures.causal import causal_saving
from analysis.figures.common import Context, Made, Skipped
from analysis.figures.compiled import compile_cost, compiled_time_memory
from analysis.figures.cost import memory_vs_seq_len, throughput_vs_seq_len, time_vs_seq_len
from analysis.figures.decode import decode_time, generation, roofline
from analysis.figures.devices import devices_compared
from analysis.figures.fp8 import fp8_error, fp8_overflow
from analysis.figures.heads import heads_at_fixed_width
from analysis.figures.masks import gqa_vs_kv_heads, masks_vs_density
from analysis.figures.layer import layer_share
from analysis.figures.overflow import low_precision_overflow
from analysis.figures.recurrence import sensitivity_vs_distance
from analysis.figures.stability import scaling_stability
from analysis.figures.training import training_curves

FIGURES = (
    time_vs_seq_len,  # 1
    memory_vs_seq_len,  # 2
    throughput_vs_seq_len,  # 3
    causal_saving,  # 4
    scaling_stability,  # 5
    low_precision_overflow,  # 6
    accuracy_vs_seq_len,  # 7
    heads_at_fixed_width,  # 8
    devices_compared,  # 9
    layer_share,  # 10
    masks_vs_density,  # 11
    gqa_vs_kv_heads,  # 12
    roofline,  # 13
    decode_time,  # 14
    generation,  # 15
    compiled_time_memory,  # 16
    compile_cost,  # 17
    sensitivity_vs_distance,  # 18
    training_curves,  # 19
    fp8_error,  # 20
    fp8_overflow,  # 21
)

__all__ = ["FIGURES", "Context", "Made", "Skipped"]
