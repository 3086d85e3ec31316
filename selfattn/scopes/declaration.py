"""`Scope`: what one scope declares (selfattn/scopes/__init__.py says who reads it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class Scope:
    """What one scope measures and which axes it accepts."""

    name: str
    help: str
    attention: bool = True  # an attention back end runs in it (False: a recurrent baseline, no back end)
    gates: int = 0  # a recurrent cell's gates (torch.nn.LSTM 4, nn.GRU 3); 0 for attention
    gives_qkv: bool = False  # Q, K, V are given to the back end (the attention core): outliers, score transforms, additive scores apply
    over_x: bool = False  # self-attention over X (q_len = seq_len), the causal mask its only mask
    autoregressive: bool = False  # a generation loop: causal, one query per new token, no other mask
    trains: bool = False  # a training run: forward and backward, always
    own_axes: tuple[str, ...] = ()  # axes only this scope reads (elsewhere at their defaults: one id per measurement)
    pos_encodings: tuple[str, ...] = ("none",)  # the positional encodings it takes
    path_length: bool = False  # the path-length metric applies (gradient vs distance through X)
    one_thread_on_cpu: bool = False  # every call on one thread on a CPU (a recurrence's serial steps)
    # where a scope cannot take a field's own default: this value, for a config that does not give the field
    defaults: Mapping[str, Any] = field(default_factory=dict)
