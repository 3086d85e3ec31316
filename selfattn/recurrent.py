"""The recurrent baselines: one torch.nn.LSTM or nn.GRU layer over X, hidden size d_model.

The chapter's comparison table: an RNN passes information one step at a time (a path of length
O(n) between two tokens, n serial steps), attention connects any two tokens directly with one
large matrix product. scope=lstm and scope=gru measure the first on the same seeded X
(batch, n, d_model) as scope=layer, d_model = heads x head_dim; the output is the hidden state of
every step, (batch, n, d_model), like the layer's.

Weights are torch's own initialisation, U(-1/sqrt(d_model), 1/sqrt(d_model)) for every weight
and bias, but drawn in float64 on the CPU from a private generator in parameter order (W_ih,
W_hh, b_ih, b_hh) and copied in, so a point is reproducible anywhere, as the layer's are.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from selfattn.validate import check_positive_int, check_seed

_MODULES = {"lstm": nn.LSTM, "gru": nn.GRU}


class Recurrent(nn.Module):
    """One recurrent layer, batch first: X (B, L, d_model) -> every step's hidden state (B, L, d_model)."""

    def __init__(self, kind: str, d_model: int, *, seed: int = 0) -> None:
        super().__init__()
        if kind not in _MODULES:
            raise ValueError(f"scope: expected one of {', '.join(_MODULES)} for a recurrent layer, got {kind!r}")
        check_positive_int("d_model", d_model)
        self.kind, self.d_model = kind, d_model
        self.rnn = _MODULES[kind](d_model, d_model, num_layers=1, batch_first=True)
        self.reset_parameters(seed=seed)

    @torch.no_grad()
    def reset_parameters(self, seed: int = 0) -> None:
        generator = torch.Generator(device="cpu").manual_seed(check_seed(seed))
        bound = 1.0 / math.sqrt(self.d_model)
        for p in self.rnn.parameters():  # weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0
            w = torch.rand(p.shape, generator=generator, dtype=torch.float64) * (2 * bound) - bound
            p.copy_(w)

    def forward(self, x_BLD: torch.Tensor) -> torch.Tensor:
        if not isinstance(x_BLD, torch.Tensor) or x_BLD.dim() != 3 or x_BLD.shape[-1] != self.d_model:
            shape = tuple(x_BLD.shape) if isinstance(x_BLD, torch.Tensor) else type(x_BLD).__name__
            raise ValueError(f"x: expected shape (batch, seq_len, {self.d_model}), got {shape}")
        out_BLD, _ = self.rnn(x_BLD)
        return out_BLD

    def kernel_label(self) -> str:
        return f"torch.nn.{type(self.rnn).__name__}"

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, d_model={self.d_model}"
