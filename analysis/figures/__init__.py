"""The report's figures, in order: each takes the merged rows and a Context and returns Made or Skipped.

Each entry imports its module on its first call: importing the report (or this package) loads no figure
module, and with it no matplotlib (its import is most of a small report's serial time).
"""

from __future__ import annotations

import importlib

import pandas as pd

from analysis.figures.made import Context, Made, Skipped


class Figure:
    """A figure function named by module and function, imported when first called."""

    def __init__(self, module: str, function: str):
        self.module, self.__name__ = f"analysis.figures.{module}", function

    def __call__(self, rows: pd.DataFrame, ctx: Context) -> Made | Skipped:
        function = getattr(importlib.import_module(self.module), self.__name__)
        return function(rows, ctx)

    def __repr__(self) -> str:
        return f"Figure({self.module}.{self.__name__})"


FIGURES = (
    Figure("cost", "time_vs_seq_len"),  # 1
    Figure("cost", "memory_vs_seq_len"),  # 2
    Figure("cost", "throughput_vs_seq_len"),  # 3
    Figure("causal", "causal_saving"),  # 4
    Figure("stability", "scaling_stability"),  # 5
    Figure("overflow", "low_precision_overflow"),  # 6
    Figure("accuracy", "accuracy_vs_seq_len"),  # 7
    Figure("heads", "heads_at_fixed_width"),  # 8
    Figure("devices", "devices_compared"),  # 9
    Figure("layer", "layer_share"),  # 10
    Figure("masks", "masks_vs_density"),  # 11
    Figure("masks", "gqa_vs_kv_heads"),  # 12
    Figure("decode", "roofline"),  # 13
    Figure("decode", "decode_time"),  # 14
    Figure("decode", "generation"),  # 15
    Figure("compiled", "compiled_time_memory"),  # 16
    Figure("compiled", "compile_cost"),  # 17
    Figure("recurrence", "sensitivity_vs_distance"),  # 18
    Figure("training", "training_curves"),  # 19
    Figure("fp8", "fp8_error"),  # 20
    Figure("fp8", "fp8_overflow"),  # 21
    Figure("variants", "variant_costs"),  # 22
    Figure("mask_functions", "time_vs_density"),  # 23
)

__all__ = ["FIGURES", "Context", "Figure", "Made", "Skipped"]
