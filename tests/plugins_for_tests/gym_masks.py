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
