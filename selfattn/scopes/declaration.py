"""`Scope`: what one scope declares (selfattn/scopes/__init__.py says who reads it)."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class Scope:
    """What one scope measures and accepts (data), and how it is built and costed (functions of a Point).

    The functions live in the scope's module and import torch and the measurement code inside their bodies, so
    the data stays readable without torch (validation, the config checks, the analysis)."""

    name: str
    help: str
    attention: bool = True  # an attention back end runs in it (False: the scope's own module runs, `kernel` names it)
    kernel: str = ""  # what runs where no back end does: the row's `kernel` (torch.nn.LSTM)
    gates: int = 0  # a recurrent cell's gates (torch.nn.LSTM 4, nn.GRU 3); 0 for attention
    gives_qkv: bool = False  # Q, K, V are given to the back end (the attention core): outliers, score transforms, additive scores apply
    over_x: bool = False  # self-attention over X (q_len = seq_len), the causal mask its only mask
    autoregressive: bool = False  # a generation loop: causal, one query per new token, no other mask
    trains: bool = False  # a training run: forward and backward, always
    own_axes: tuple[str, ...] = ()  # axes only this scope reads (elsewhere at their defaults: one id per measurement)
    pos_encodings: tuple[str, ...] = ("none",)  # the positional encodings it takes
    block_rows: bool = False  # its sampled rows are one attention call's query rows: the sample holds block edges
    path_length: bool = False  # the path-length metric applies (gradient vs distance through X)
    path_draws: int = 16  # draws of X the path-length metric averages (measure/path_length.py)
    one_thread_on_cpu: bool = False  # every call on one thread on a CPU (a recurrence's serial steps)
    # where a scope cannot take a field's own default: this value, for a config that does not give the field
    defaults: Mapping[str, Any] = field(default_factory=dict)
    # the time guard's fraction of the matmul peak where no back end runs (a back end declares its own)
    efficiency: float = 0.1
    _: KW_ONLY
    # Functions of a Point (selfattn/point.py), what the harness asks instead of the scope's name:
    flops: Callable[[Any], float]  # FLOPs of one timed call (the field's convention, measure/flops.py)
    bytes_moved: Callable[[Any], int]  # the least bytes one timed call reads and writes (measure/traffic.py)
    input_bytes: Callable[[Any], int]  # what exists before a call: its inputs, weights, upstream gradient
    call_bytes: Callable[[Any, Any, str], int]  # (point, Resolved, device type): one call's peak beyond its inputs
    drawn: Callable[[Any, int], list[int]]  # (point, sampled rows): element counts drawn from the seed on its device
    reference_bytes: Callable[[Any, int], int]  # (point, rows): the float64 reference's (and stability pass's) peak
    host_weights: Callable[[Any], int] = lambda point: 0  # elements of the weights drawn on the host
    # (point, dtype, device, rows, seed, Resolved) -> measure.workload.Workload; None: no timed call (train's loop)
    build: Callable[..., Any] | None = None
    # the path-length pass (path_length=True): (point, x, device, back end) -> the last output, and its bytes
    last_output: Callable[..., Any] | None = None
    path_bytes: Callable[[Any, int], int] = lambda point, draws: 0  # (point, draws) beyond X and its gradient
