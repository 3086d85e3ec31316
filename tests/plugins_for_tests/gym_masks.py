"""Masks written in attention-gym's convention, for the tests (attention-gym itself is not installed here).

Small equivalents of attention-gym's `generate_prefix_lm_mask`, `generate_dilated_sliding_window` and a
sliding window with global tokens: factories returning mask_mod(b, h, q_idx, kv_idx), written top-left as
flex_attention's q_idx is (the row). The harness passes each query's bottom-right position as q_idx (row +
seq_len - q_len: the offset added for them), so at q_len < seq_len they are the project's bottom-right masks.
`off_by_one_*` is a kernel-side mask that differs from the reference by one key; `needs_offset` shows a
function that really means top-left rows, which subtracts the offset itself.
"""


def causal_mask(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def generate_prefix_lm_mask(prefix_length: int = 24):
    """Bidirectional over the first prefix_length keys, causal after them (attention-gym's prefix LM)."""
    def prefix_lm(b, h, q_idx, kv_idx):
        return (kv_idx < prefix_length) | causal_mask(b, h, q_idx, kv_idx)

    return prefix_lm


def generate_dilated_sliding_window(window_size: int = 16, dilation: int = 2):
    """Look back window_size keys, every dilation-th (attention-gym's dilated sliding window)."""
    def dilated_sliding_window(b, h, q_idx, kv_idx):
        diff = q_idx - kv_idx
        return (diff >= 0) & (diff < window_size) & (diff % dilation == 0)

    return dilated_sliding_window


def generate_global_sliding_window(window_size: int = 8, global_tokens: int = 4):
    """A causal sliding window plus the first global_tokens keys for every query (a sliding window with global
    tokens, as attention-gym's examples combine them with or_masks / and_masks)."""
    def global_sliding_window(b, h, q_idx, kv_idx):
        in_window = (q_idx - kv_idx < window_size) | (kv_idx < global_tokens)
        return in_window & causal_mask(b, h, q_idx, kv_idx)

    return global_sliding_window


def head_striped(b, h, q_idx, kv_idx):
    """A mask_mod itself (no parameters) that reads the head: odd heads causal, even heads see every key."""
    return (h % 2 == 0) | (q_idx >= kv_idx)


def relative_bias(score, b, h, q_idx, kv_idx):
    """A score_mod itself: a bias growing with the distance, per head."""
    return score - 0.05 * (h + 1) * (q_idx - kv_idx).abs()


def plain_kernel(q, k, v, *, causal=False, window=None, key_lengths=None, document_ids=None, scale=None):
    """A back end that declares nothing: it takes the mask arguments, not a mask function."""
    from selfattn.reference import attention_reference

    return attention_reference(q, k, v, causal=causal, window=window, key_lengths=key_lengths,
                               document_ids=document_ids, scale=scale).to(q.dtype)


def _one_key_more(q, k, v, *, masks, scale):
    """A kernel whose mask is its mask function's plus one key: each query also sees the key after its position
    (a kernel-side mask one key off the reference's)."""
    import dataclasses

    from selfattn.mods import dense
    from selfattn.mods.contract import from_callable

    if masks.mask_mod is None:
        return dense.attention(q, k, v, masks=masks, scale=scale)
    fn = masks.mask_mod.fn

    def wider(b, h, q_idx, kv_idx):
        return fn(b, h, q_idx, kv_idx) | (kv_idx == q_idx + 1)

    return dense.attention(q, k, v, masks=dataclasses.replace(masks, mask_mod=from_callable(wider, "mask")), scale=scale)


def _declare_one_key_more():
    from selfattn.backends.contract import backend

    return backend(_one_key_more, takes_masks=True, masks=("causal", "window", "key_lengths", "document_ids", "mask_mod"))


one_key_more = _declare_one_key_more()


# Kernels with the common mistakes the incorrect rows' hints name (selfattn/measure/hints.py).

def _dense(q, k, v, keep, scale):
    import torch

    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = (q @ k.transpose(-1, -2)) * scale
    return torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1) @ v


def top_left_causal(q, k, v, *, causal=False, window=None, key_lengths=None, document_ids=None, scale=None):
    """Causal counted from the top-left corner (query i sees keys j <= i), as torch's is_causal is."""
    import torch

    keep = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device)
    return _dense(q, k, v, keep.tril() if causal else keep, scale)


def window_one_wider(q, k, v, *, causal=False, window=None, key_lengths=None, document_ids=None, scale=None):
    """A window that counts w + 1 keys (p - j <= w), as attention-gym's sliding_window(W) does."""
    import torch

    p = torch.arange(q.shape[2], device=q.device)[:, None] + k.shape[2] - q.shape[2]
    j = torch.arange(k.shape[2], device=q.device)[None, :]
    keep = ((p - j).abs() <= window) if window is not None else torch.ones_like(p - j, dtype=torch.bool)
    return _dense(q, k, v, keep & (j <= p) if causal else keep, scale)


def empty_rows_averaged(q, k, v, *, masks, scale):
    """Right with every row that sees a key; a row that sees none gets the mean of V instead of zeros."""
    from selfattn.reference import attention_reference

    out = attention_reference(q, k, v, causal=masks.causal, window=masks.window, key_lengths=masks.key_lengths,
                              document_ids=masks.document_ids, mask_mod=masks.mask_mod, scale=scale).to(q.dtype)
    keep = masks.keep_heads(q.shape[2], k.shape[2], batch=q.shape[0], heads=q.shape[1], device=q.device)
    empty = ~keep.any(-1, keepdim=True)
    mean = v.mean(2, keepdim=True).repeat_interleave(q.shape[1] // k.shape[1], 1)
    return out + empty * mean


def _declare(fn, **declared):
    from selfattn.backends.contract import backend

    return backend(fn, **declared)


top_left_causal = _declare(top_left_causal, masks=("causal",), kernel_label="top_left")
window_one_wider = _declare(window_one_wider, masks=("causal", "window"))
empty_rows_averaged = _declare(empty_rows_averaged, takes_masks=True,
                               masks=("causal", "window", "key_lengths", "document_ids", "mask_mod"))


def late_keys(b, h, q_idx, kv_idx):
    """A mask_mod whose first rows see no key: causal over the keys from 20 on."""
    return (kv_idx >= 20) & (q_idx >= kv_idx)
