"""selfattn: scaled dot-product self-attention three ways, and the tools to measure it.

    import selfattn
    out = selfattn.attention(q, k, v, backend="chunked", causal=True)
"""

from selfattn.errors import Unsupported
from selfattn.point import Point

__all__ = ["Unsupported", "Point"]
