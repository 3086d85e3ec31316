"""What scope=lstm and scope=gru share: the recurrent baselines torch.nn.LSTM and nn.GRU over the layer's X
(selfattn/recurrent.py), no attention back end. Each scope's module declares its gates and its measured memory units
and calls `recurrent_scope`.

FLOPs count the recurrence (`flops`); bytes X, the weights (each read once: a kernel that re-reads W_hh every step
moves more) and the output; memory is measured units of the output's size plus copies of the weights."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from selfattn.scopes.declaration import Scope

if TYPE_CHECKING:
    import torch

    from selfattn.backends.resolved import Resolved
    from selfattn.measure.workload import Workload
    from selfattn.point import Point

# n serial steps of (batch x d_model) @ (d_model x gates*d_model) reach ~1-5% of the peak on a CPU (measured);
# 0.1 keeps the time guard optimistic, as it is for the back ends.
EFFICIENCY = 0.1
DRAWS = 4  # the path-length metric's draws: a recurrence's decay is many orders of magnitude, each draw a recurrence


def mem_bytes(point: Point, units: Mapping[str, tuple[float, int]], element_bytes: int | None = None,
              batch: int | None = None, mode: str | None = None) -> int:
    """Predicted peak bytes of one call beyond its inputs: units[mode] = (units of B x n x d_model elements, copies
    of the weights); element_bytes, batch and mode default to the point's (the float64 reference and the path-length
    pass use their own)."""
    s = point.element_bytes if element_bytes is None else element_bytes
    b = point.batch if batch is None else batch
    activations, weight_copies = units[mode or point.mode]
    return int((activations * b * point.seq_len * point.d_model + weight_copies * point.recurrent_weights) * s)


def flops(point: Point) -> float:
    """Every step multiplies its input and the previous hidden state by the gates' weights, x_t W_ih^T
    (gates*d_model x d_model) and h_{t-1} W_hh^T (the same size), 2 FLOPs per weight, batch and step:
    4 * gates * d_model^2 * B * n. As with attention's softmax, the biases and the gates' element-wise work
    (sigmoid, tanh, products; GRU's reset gate on h W_hh) are not counted. (The first step's h_0 is zero but
    still multiplied, so it counts.) fwd_bwd: a matmul's backward is two of its size (LINEAR_FWD_BWD_FACTOR),
    less the gradient of h_0 (a constant: nothing asks for it)."""
    from selfattn.measure.flops import LINEAR_FWD_BWD_FACTOR
    from selfattn.scopes import declared

    step = 2.0 * point.batch * declared(point).gates * point.d_model * point.d_model  # one product of one step
    forward = 2 * step * point.seq_len
    return LINEAR_FWD_BWD_FACTOR * forward - step if point.mode == "fwd_bwd" else forward


def input_bytes(point: Point) -> int:
    from selfattn.measure.predict import x_input_bytes

    return x_input_bytes(point, point.recurrent_weights)


def bytes_moved(point: Point) -> int:
    from selfattn.measure.traffic import x_bytes_moved

    return x_bytes_moved(point, point.recurrent_weights)


def drawn(point: Point, rows: int) -> list[int]:
    x = point.batch * point.seq_len * point.d_model
    return [x, x] if point.mode == "fwd_bwd" else [x]


def last_output(point: Point, x: torch.Tensor, device: torch.device | str, backend: Any) -> torch.Tensor:
    """The path-length pass: the last step's output of the point's recurrence in float64, (draws, d_model)."""
    import torch

    from selfattn.recurrent import Recurrent

    rnn = Recurrent(point.scope, point.d_model, seed=point.seed).to(device=device, dtype=torch.float64)
    return rnn(x)[:, -1]


def recurrent_scope(name: str, gates: int, units: Mapping[str, tuple[float, int]]) -> Scope:
    """The declaration of a recurrent baseline: torch.nn.<NAME> with `gates` gates and memory `units` per mode."""

    def reference_bytes(point: Point, rows: int) -> int:
        """A float64 copy of X and the whole recurrence (a recurrence has no row to compute alone)."""
        from selfattn.measure.predict import stored_bytes

        return mem_bytes(point, units, 8) + input_bytes(point) * (8 // stored_bytes(point))

    return Scope(name, "a recurrent baseline", attention=False, kernel=f"torch.nn.{name.upper()}", gates=gates,
                 path_length=True, path_draws=DRAWS, one_thread_on_cpu=True, efficiency=EFFICIENCY, flops=flops,
                 bytes_moved=bytes_moved, input_bytes=input_bytes, call_bytes=lambda point, resolved, device:
                 mem_bytes(point, units), drawn=drawn, reference_bytes=reference_bytes,
                 host_weights=lambda point: point.recurrent_weights, build=build, last_output=last_output,
                 path_bytes=lambda point, draws: mem_bytes(point, units, 8, draws, "fwd_bwd"))


def build(point: Point, dtype: torch.dtype, device: torch.device, rows: torch.Tensor, seed: int,
          resolved: Resolved) -> Workload:
    """scope=lstm/gru (selfattn/recurrent.py) on the layer's X, with the layer's fwd_bwd and its float64
    reference: a float64 copy of the same module on the same X, every step (a recurrence has no row
    to compute alone). No attention inside: no stability metrics (`stability_inputs` None). The point's own seed
    draws X and the weights (`seed` is not read: the verdict's second input is not drawn for a recurrence)."""
    import copy

    import torch

    from selfattn.inputs import make_x
    from selfattn.masks import Masks
    from selfattn.measure.workload import UPSTREAM_SEED_OFFSET, Result, Workload, on_rows, seeded_randn
    from selfattn.recurrent import Recurrent

    b, seq_len, d_model = point.batch, point.seq_len, point.d_model
    grad = point.mode == "fwd_bwd"
    rnn = Recurrent(point.scope, d_model, seed=point.seed).to(device=device, dtype=dtype).requires_grad_(grad)
    x = make_x(b, seq_len, d_model, dtype=dtype, device=device, std=point.input_std, seed=point.seed, requires_grad=grad)
    upstream = seeded_randn((b, seq_len, d_model), point.seed + UPSTREAM_SEED_OFFSET, dtype, device) if grad else None
    rows_dev = rows.to(device)
    params = list(rnn.parameters())

    def call() -> Any:
        if upstream is None:  # fwd
            with torch.no_grad():
                return rnn(x)
        out = rnn(x)
        return out, torch.autograd.grad(out, [x, *params], upstream)

    def check_call() -> Result:
        if upstream is None:  # fwd
            return Result(call()[:, rows_dev], None)
        out = rnn(x)
        grads = torch.autograd.grad(out, [x, *params], on_rows(upstream, rows_dev, 1))
        return Result(out.detach()[:, rows_dev], list(grads))

    def reference() -> Result:
        rnn64 = copy.deepcopy(rnn).to(torch.float64).requires_grad_(grad)
        x64 = x.detach().to(torch.float64).requires_grad_(grad)
        with torch.enable_grad() if grad else torch.no_grad():
            out = rnn64(x64)[:, rows_dev]
            if upstream is None:  # fwd
                return Result(out, None)
            loss = (out * upstream[:, rows_dev].to(torch.float64)).sum()
            grads = torch.autograd.grad(loss, [x64, *rnn64.parameters()])
        return Result(out.detach(), list(grads))

    upstream_rows = torch.zeros(b, 1, 1, 1, dtype=dtype, device=device)  # no stability pass reads it
    return Workload(call, check_call, reference, None, upstream_rows, rows, Masks())
