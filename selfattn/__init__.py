"""selfattn: scaled dot-product self-attention three ways, and the tools to measure it.

    import selfattn
    out = selfattn.attention(q, k, v, backend="chunked", causal=True)

The package is lazy: `import selfattn.point` or `selfattn.results` (pure Python) must not load
torch, because analysis/ reads only CSV files and needs the row schema and the sweep axes, not
seconds of torch start-up. Names below are imported on first use.
"""

from __future__ import annotations

from selfattn.lazy import lazy_exports

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "attention": "selfattn.api",
    "BACKENDS": "selfattn.backends",
    "BACKEND_NAMES": "selfattn.backends",
    "available_backends": "selfattn.backends",
    "Unsupported": "selfattn.errors",
    "make_qkv": "selfattn.inputs",
    "make_x": "selfattn.inputs",
    "MultiHeadSelfAttention": "selfattn.layer",
    "Point": "selfattn.point",
    "PRECISIONS": "selfattn.point",
    "precision_context": "selfattn.precision",
    "resolve_dtype": "selfattn.precision",
    "attention_reference": "selfattn.reference",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports("selfattn", _EXPORTS, globals())
