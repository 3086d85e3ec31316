"""naive's options (selfattn/backends/naive.py): materialized attention, softmax(Q K^T * scale) V."""

from __future__ import annotations

from dataclasses import dataclass

from selfattn.fp8_options import Fp8Options
from selfattn.fields import spec


@dataclass(frozen=True)
class Options(Fp8Options):
    upcast_softmax: bool = spec(False, help="softmax in float32 even for fp16/bf16 inputs")
    scale_at: str = spec("logits", choices=("logits", "query"),
                         help="logits: Q K^T, then scale (the chapter's order); query: scale Q first (as fused kernels do)")
    compile: bool = spec(False, help="run the steps through torch.compile (compile time is measured apart, as compile_s)")
