"""tf32 labels are true: refused where TF32 does not exist, and a kernel that ignores the flag is caught."""

import pytest
import torch

from selfattn.errors import Unsupported
from selfattn.precision import precision_context, resolve_dtype, tf32_ignored


@pytest.mark.parametrize("capability", [(7, 0), (7, 5)], ids=["V100", "T4"])
def test_tf32_on_a_gpu_older_than_ampere_is_unsupported(monkeypatch, capability):
    # torch accepts the TF32 flag there and silently computes plain fp32: the row would lie.
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    with pytest.raises(Unsupported, match=r"tf32: .*capability >= 8\.0.*" + rf"{capability[0]}\.{capability[1]}"):
        resolve_dtype("tf32", "cuda")
    with pytest.raises(Unsupported):
        with precision_context("tf32", "cuda"):
            pass
    assert resolve_dtype("fp32", "cuda") is torch.float32  # only tf32 needs tensor cores


def test_tf32_on_ampere_and_newer_resolves_to_float32(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert resolve_dtype("tf32", "cuda") is torch.float32


def test_tf32_ignored_tells_a_kernel_that_reads_the_flag_from_one_that_does_not():
    x = torch.randn(8, 8)

    def reads_flag() -> torch.Tensor:  # stands in for a matmul that rounds its inputs under TF32
        return x.round(decimals=1) if torch.backends.cuda.matmul.allow_tf32 else x.clone()

    flags = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    with precision_context("fp32", "cpu"):
        torch.backends.cuda.matmul.allow_tf32 = True
        assert not tf32_ignored(reads_flag(), reads_flag)
        assert tf32_ignored(x.clone(), lambda: x.clone())
        nan = torch.full((3,), float("nan"))
        assert tf32_ignored(nan, lambda: nan.clone())  # NaN in the same places is the same output
        assert torch.backends.cuda.matmul.allow_tf32  # restored after the TF32-off call
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == flags
