"""selfattn: scaled dot-product self-attention three ways, and the tools to measure it.

    import selfattn
    out = selfattn.attention(q, k, v, backend="chunked", causal=True)
"""

from selfattn.attention import attention
from selfattn.backends import BACKENDS, available_backends, default_options, kernel_label
from selfattn.errors import Unsupported
from selfattn.inputs import make_qkv, make_x
from selfattn.layer import MultiHeadSelfAttention
from selfattn.point import Point
from selfattn.precision import PRECISIONS, precision_context, resolve_dtype
from selfattn.reference import attention_reference, causal_keep_mask

__all__ = [
    "BACKENDS",
    "MultiHeadSelfAttention",
    "PRECISIONS",
    "Point",
    "Unsupported",
    "attention",
    "attention_reference",
    "available_backends",
    "causal_keep_mask",
    "default_options",
    "kernel_label",
    "make_qkv",
    "make_x",
    "precision_context",
    "resolve_dtype",
]
