"""sdpa's options (selfattn/backends/sdpa.py): torch's scaled_dot_product_attention and its fused kernels."""

from __future__ import annotations

from dataclasses import dataclass

from selfattn.fields import spec

# auto lets torch choose; the others are torch.nn.attention.SDPBackend members (sdpa.py maps them)
KERNEL_NAMES: tuple[str, ...] = ("auto", "flash", "efficient", "math", "cudnn")


@dataclass(frozen=True)
class Options:
    kernel: str = spec("auto", choices=KERNEL_NAMES,
                       help="auto lets torch choose; a forced kernel that cannot run is an unsupported row")
    bool_mask: bool = spec(False, help="pass even a causal-only mask as a boolean attn_mask, to measure what is_causal saves")
