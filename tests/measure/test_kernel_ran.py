"""The kernel column says which SDPA kernel `auto` really ran, so two devices' rows compare like for like."""

from __future__ import annotations

import pytest
import torch

import selfattn
from selfattn.backends import sdpa
from selfattn.masks import Masks
from selfattn.measure import Budget, measure_point
from selfattn.point import Point

BUDGET = Budget(timing_s=0.02, accuracy_rows=8, measure_device_peak=False)


def test_auto_rows_name_the_kernel_torch_chose():
    row = measure_point(Point(backend="sdpa", device="cpu", seq_len=128, heads=2), BUDGET)
    q, k, v = selfattn.make_qkv(1, 2, 128, 128, 64)
    chosen = torch._fused_sdp_choice(q, k, v)
    assert row.status == "ok" and row.kernel == f"auto:{sdpa._CHOICES[int(chosen)]}"


def test_forced_and_other_back_ends_keep_their_label():
    forced = measure_point(Point(backend="sdpa", backend_options={"kernel": "math"}, device="cpu", seq_len=64, heads=2),
                           BUDGET)
    naive = measure_point(Point(backend="naive", device="cpu", seq_len=64, heads=2), BUDGET)
    assert (forced.kernel, naive.kernel) == ("math", "materialized")


@pytest.mark.parametrize("masks", [Masks(), Masks(causal=True), Masks(window=8), Masks(causal=True, window=8)],
                         ids=["none", "causal", "window", "causal-window"])
def test_kernel_ran_is_torchs_dispatch_choice_for_the_same_arguments(masks):
    q, k, v = selfattn.make_qkv(1, 4, 24, 40, 16, kv_heads=2)
    name = sdpa.kernel_ran(q, k, v, masks=masks, scale=0.25)
    mask, is_causal, _ = sdpa._mask_arguments(q, k, masks)
    if sdpa._is_causal_bias(mask):  # CausalBias: materialized on a CPU (a Tensor subclass: not isinstance)
        mask = masks.keep(24, 40)[:, None]
    expected = torch._fused_sdp_choice(q, k, v, attn_mask=mask, is_causal=is_causal, scale=0.25, enable_gqa=True)
    assert name == sdpa._CHOICES[int(expected)] and name in ("math", "flash", "efficient", "cudnn")


# The aten ops that tell which kernel a call reached (a math call decomposes into plain ops).
_FUSED_OPS = {
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_flash_attention_for_cpu": "flash",
    "_efficient_attention_forward": "efficient",
    "_scaled_dot_product_efficient_attention": "efficient",
    "_scaled_dot_product_cudnn_attention": "cudnn",
}


def _kernel_dispatched(q, k, v, masks) -> str:
    """Run sdpa's SDPA call and name the kernel its dispatch reached, from the aten ops it called. A
    fused CUDA op reached with CPU tensors is answered with zeros instead of run (it has no CPU
    kernel): what is tested is which op the dispatch picks, not the op."""
    from torch.utils._python_dispatch import TorchDispatchMode

    reached = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if name in _FUSED_OPS:
                reached.append(_FUSED_OPS[name])
            if name in ("_scaled_dot_product_flash_attention", "_efficient_attention_forward"):
                # outputs as the schema lists them; only the first, shaped like the query, is read
                fake = {"Tensor": torch.zeros_like(args[0]), "int": 0}
                return tuple(fake[str(ret.type)] for ret in func._schema.returns)
            return func(*args, **(kwargs or {}))

    mask, is_causal, _ = sdpa._mask_arguments(q, k, masks)  # a CausalBias cannot be made inside the mode
    with Record(), torch.no_grad():
        sdpa._call(q, k, v, mask, is_causal, 0.25, k.shape[1] != q.shape[1])  # what sdpa.attention calls
    return reached[0] if reached else "math"


@pytest.mark.parametrize("flash_ok, efficient_ok", [(True, False), (False, True), (False, False)],
                         ids=["flash-accepts", "efficient-accepts", "neither"])
@pytest.mark.parametrize("kv_heads", [4, 2], ids=["mha", "gqa"])
def test_lower_right_causal_names_the_kernel_causal_bias_dispatches_to(monkeypatch, flash_ok, efficient_ok, kv_heads):
    # q_len != seq_len, causal: the CausalBias path. On a CUDA GPU in fp16/bf16 flash accepts these
    # inputs asked without a mask and is_causal=False, and CausalBias calls flash directly, while
    # _fused_sdp_choice(is_causal=True) refuses flash for non-square causal: the old label said
    # efficient or math for a flash call. A CPU build's checks say False, so the test answers for
    # them, in the module CausalBias's dispatch reads them from, and records what each is asked.
    from torch.nn.attention import bias as causal_bias

    asked = []

    def answer(ok):
        def check(params, debug=False):
            asked.append((params.attn_mask, params.is_causal, params.enable_gqa))
            return ok
        return check

    monkeypatch.setattr(causal_bias, "can_use_flash_attention", answer(flash_ok))
    monkeypatch.setattr(causal_bias, "can_use_efficient_attention", answer(efficient_ok))
    q, k, v = selfattn.make_qkv(1, 4, 24, 40, 16, kv_heads=kv_heads, dtype=torch.bfloat16)
    masks = Masks(causal=True)
    named = sdpa.kernel_ran(q, k, v, masks=masks, scale=0.25)
    mirrored = list(asked)
    asked.clear()
    assert named == _kernel_dispatched(q, k, v, masks)  # the real dispatch, the same decision functions
    assert asked == mirrored  # ... asked the same questions
    assert all(mask is None and not causal and gqa == (kv_heads != 4) for mask, causal, gqa in asked)
    if flash_ok:
        assert named == "flash"
    elif efficient_ok:
        assert named == "efficient"
    else:  # materialized: SDPA's own choice for a boolean mask
        expected = torch._fused_sdp_choice(q, k, v, attn_mask=masks.keep(24, 40)[:, None], scale=0.25,
                                           enable_gqa=kv_heads != 4)
        assert named == sdpa._CHOICES[int(expected)]


def test_lower_right_causal_on_a_cpu_build_is_the_materialized_masks_choice():
    # Unpatched: on a CPU the fused CUDA checks refuse CPU tensors, so the bias is materialized.
    q, k, v = selfattn.make_qkv(1, 4, 24, 40, 16, kv_heads=2)
    masks = Masks(causal=True)
    assert sdpa.kernel_ran(q, k, v, masks=masks, scale=0.25) == _kernel_dispatched(q, k, v, masks)
