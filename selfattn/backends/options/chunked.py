"""chunked's options (selfattn/backends/chunked.py): online-softmax attention over query/key blocks."""

from __future__ import annotations

from dataclasses import dataclass

from selfattn.fp8_options import Fp8Options
from selfattn.fields import spec


@dataclass(frozen=True)
class Options(Fp8Options):
    q_chunk: int | None = spec(None, ge=1, help="query rows per block; null: auto, sized to the mask (chunk_sizes: the "
                                                "tuned 512 x 512, or 256 x 512 causal, on a CPU; on CUDA from a memory "
                                                "budget, cuda_chunk_sizes; a window's own size, blocks cut at "
                                                "document starts)")
    kv_chunk: int | None = spec(None, ge=1, help="key rows per block; null: auto, sized to the mask like q_chunk")
    compute: str = spec("auto", choices=("auto", "fp32", "input"),
                        help="fp16/bf16 block matmuls: fp32 (upcast copies) | input (the input dtype accumulating in "
                             "fp32, as FlashAttention) | auto (input on CUDA, fp32 on a CPU)")
    compile: bool = spec(False, help="run each block's work through torch.compile (compile time is measured apart, as compile_s)")
