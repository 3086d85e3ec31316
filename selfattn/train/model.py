"""The tiny model of scope=train: embeddings, one attention layer (a harness back end), an MLP, a readout.

x (B, L, d_model): position i < pairs is key_emb[key_i] + value_emb[value_i], the last position
key_emb[query] + a learned query marker. Then h = x + attention(x) (MultiHeadSelfAttention, so the
point's back end, heads, scale and back-end options, scale_at included, decide the attention),
h = h + MLP(LN(h)), and the readout reads LN(h) at the query position only (B, VALUE_VOCAB).

There is deliberately no LayerNorm before the attention: the embeddings' std (`input_std`) reaches
Q and K as the chapter assumes (unit-variance inputs give unscaled logits of std ~ 2 sqrt(d_k) at
initialization here, the sum of two embeddings having variance 2), so the scale decides whether the
softmax starts saturated. Weights are drawn in float64 on the CPU from a private generator (seeded
by the point), so a point's initial model is the same on every device.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from selfattn.layer import MultiHeadSelfAttention
from selfattn.train.task import KEY_VOCAB, VALUE_VOCAB, Batch

MLP_WIDTH = 2  # the MLP's hidden width, in d_model


class RecallModel(nn.Module):
    def __init__(self, d_model: int, heads: int, *, kv_heads: int | None = None, backend: Any = "naive",
                 causal: bool = False, scale: float | None = None, input_std: float = 1.0, seed: int = 0,
                 **backend_options: Any) -> None:
        super().__init__()
        self.key_emb = nn.Embedding(KEY_VOCAB, d_model)
        self.value_emb = nn.Embedding(VALUE_VOCAB, d_model)
        self.query_marker = nn.Parameter(torch.zeros(d_model))
        self.attn = MultiHeadSelfAttention(d_model, heads, kv_heads=kv_heads, backend=backend, causal=causal,
                                           scale=scale, **backend_options)
        self.mlp_norm = nn.LayerNorm(d_model)
        self.mlp_in = nn.Linear(d_model, MLP_WIDTH * d_model)
        self.mlp_out = nn.Linear(MLP_WIDTH * d_model, d_model)
        self.out_norm = nn.LayerNorm(d_model)
        self.readout = nn.Linear(d_model, VALUE_VOCAB)
        self.input_std = input_std
        self.reset_parameters(seed)

    @torch.no_grad()
    def reset_parameters(self, seed: int) -> None:
        """Embeddings and marker N(0, input_std²); linear weights N(0, 1/fan_in), biases zero; the
        attention layer's own init (selfattn/layer.py) from the same seed. All drawn in float64."""
        generator = torch.Generator(device="cpu").manual_seed(seed)
        self.attn.reset_parameters(seed=seed)

        def normal(t: torch.Tensor, std: float) -> None:
            t.copy_(torch.randn(t.shape, generator=generator, dtype=torch.float64) * std)

        for emb in (self.key_emb.weight, self.value_emb.weight, self.query_marker):
            normal(emb, self.input_std)
        for linear in (self.mlp_in, self.mlp_out, self.readout):
            normal(linear.weight, 1.0 / math.sqrt(linear.in_features))
            linear.bias.zero_()

    def embed(self, batch: Batch) -> torch.Tensor:
        """x (B, pairs + 1, d_model)."""
        pairs_BPD = self.key_emb(batch.keys_BP) + self.value_emb(batch.values_BP)
        query_B1D = (self.key_emb(batch.query_B) + self.query_marker).unsqueeze(1)
        return torch.cat([pairs_BPD, query_B1D], dim=1)

    def forward(self, batch: Batch) -> torch.Tensor:
        """Logits over the values at the query position, (B, VALUE_VOCAB)."""
        x_BLD = self.embed(batch)
        h_BD = (x_BLD + self.attn(x_BLD))[:, -1]  # the layer attends over every position; only the query is read
        h_BD = h_BD + self.mlp_out(nn.functional.gelu(self.mlp_in(self.mlp_norm(h_BD))))
        return self.readout(self.out_norm(h_BD))

    @torch.no_grad()
    def query_logits(self, batch: Batch) -> torch.Tensor:
        """The query position's attention logits (scale applied: the softmax's input), (B, heads, L), float64."""
        x_BLD = self.embed(batch).double()
        w_q, w_k = self.attn.w_q.weight.double(), self.attn.w_k.weight.double()
        split = self.attn.split_heads
        q_BH1D = split(x_BLD[:, -1:] @ w_q.T)
        k_BKLD = split(x_BLD @ w_k.T)
        group = self.attn.heads // self.attn.kv_heads
        k_BHLD = k_BKLD.repeat_interleave(group, dim=1)
        scale = 1.0 / math.sqrt(self.attn.head_dim) if self.attn.scale is None else self.attn.scale
        return (q_BH1D @ k_BHLD.transpose(-1, -2))[:, :, 0] * scale
