"""What keeps a kernel from cheating the verdict: measure_point's checks around its calls.

selfattn/measure/run.py runs them, all outside the timed region:

1. the inputs the back end is handed are copied before its first call and compared after the warm-up
   and after the timed calls (`InputGuard`): a kernel that writes into q, k or v is `incorrect`
   ("modified its input q"), since every later call and the reference would read what it wrote;
2. the warm-up's output (and gradients) against the float64 reference, by the tolerance rule of
   selfattn/measure/verdict.py (`judge_checked`);
3. a second input: the same point (shapes, masks, weights) on values drawn from another seed, one untimed
   call judged by the same rule (`judge_second`): a kernel that returns a tensor it cached is caught;
4. the output of the last timed call (`LastOutput` keeps it: one store per call, no check inside the
   timer) against the checked call's reference and bound (`judge_last`): a kernel right on its first calls
   and wrong once timed is caught. The bound, not bit equality: the timed calls may run on another number of
   threads than the warm-up (selfattn/measure/threads.py), which changes the summation order.
   Where the workload's values are refreshed before every timed call (selfattn/measure/fresh.py: core, layer),
   the last timed call is judged instead against the reference of its own inputs, and 3. is left out: the timed
   calls' fresh values were a second input already
   (`fresh.FreshCalls.judge`): a kernel that returns what it answered for other values is caught there.

Cost (benchmarks/harness_overhead.py's tiny point: sdpa, heads 2, n 64, d 16, timing_s 0.05, 2-core VM
under load 7-13, the base and this tree alternated): point_wall_s +6 to +8 ms (68 -> 74 ms time only, 80 ->
88 ms every metric), the marginal point (job_wall_s) 120 -> 131 ms time only; two float64 and two plain
references of the sampled rows, one more build of the inputs and one more call. At large n the one more
call dominates (a call of the point's size, untimed).

Which scopes are judged: core, layer and generate (a workload with a `plain` reference); lstm and gru
run torch's own recurrent modules (no back end to judge; their plain reference would be the measured
computation itself), and scope=train is a training run, judged by its recall, not a call's output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from selfattn.measure.verdict import EPS, K, K_WIDE, Judgement, judge, within

SECOND_SEED_OFFSET = 3_000_017  # the second input's values: a seed no other draw of the point uses


class InputGuard:
    """Copies of the tensors a back end is handed; `changed` names the first one it wrote into."""

    def __init__(self, inputs: dict[str, torch.Tensor]) -> None:
        self.inputs = inputs
        with torch.no_grad():
            self.copies = {name: t.detach().clone() for name, t in inputs.items()}

    def changed(self, when: str) -> str:
        for name, tensor in self.inputs.items():
            if not torch.equal(tensor.detach(), self.copies[name]):
                return f"modified its input {name} (found after {when})"
        return ""


class LastOutput:
    """The timed call, keeping what its last call returned (read after the timer)."""

    def __init__(self, call: Callable[[], Any]) -> None:
        box: list[Any] = [None]

        def timed() -> None:
            box[0] = call()

        self.call, self._box = timed, box

    def take(self) -> Any:
        out, self._box[0] = self._box[0], None
        return out


@dataclass
class Checked:
    """The checked call's verdict: its references (reused by the accuracy columns) and judgements."""

    reference: Any  # workload.Result, float64
    plain: Any  # workload.Result in the plain reference's dtype
    out: Judgement
    grads: Judgement | None

    @property
    def reason(self) -> str:
        return self.out.reason or (self.grads.reason if self.grads is not None else "")


def _rule(point: Any, dtype: torch.dtype) -> tuple[float, float, str, float]:
    """(eps, plain_scale, the plain reference's name, k) of the point's dtype (verdict.py's rules)."""
    from selfattn.fp8_formats import fp8_format

    if fp8_format(point.precision):
        return EPS[torch.float32], 1.0, f"plain {point.precision}", K
    if dtype == torch.float64:  # the fp64 rule: the fp32 plain reference's error, scaled to fp64's roundoff
        return EPS[torch.float64], EPS[torch.float64] / EPS[torch.float32], "plain fp32 (scaled to fp64)", K_WIDE
    return EPS[dtype], 1.0, f"plain {point.precision}", (K_WIDE if dtype == torch.float32 else K)


def judge_result(point: Any, workload: Any, result: Any, dtype: torch.dtype, *, what: str = "output") -> Checked:
    """`result` (a workload.Result of `workload`'s inputs) against the workload's references."""
    eps, plain_scale, plain_name, k = _rule(point, dtype)
    reference, plain = workload.reference(), workload.plain()
    magnitude = workload.magnitude() if workload.magnitude is not None else None
    finite_ref = reference.out_rows[torch.isfinite(reference.out_rows)]
    if magnitude is not None and finite_ref.numel():
        magnitude = max(magnitude, float(finite_ref.abs().max()))
    out = judge(result.out_rows, reference.out_rows, plain.out_rows, eps=eps, magnitude=magnitude,
                plain_scale=plain_scale, what=what, plain_name=plain_name, k=k)
    grads = None
    if result.grads is not None and reference.grads is not None and plain.grads is not None:
        grads = judge(result.grads, reference.grads, plain.grads, eps=eps, plain_scale=plain_scale,
                      what=f"{what}'s gradients" if what != "output" else "gradients", plain_name=plain_name, k=k)
    return Checked(reference, plain, out, grads)


def judge_second(point: Any, build: Callable[..., Any], dtype: torch.dtype, device: str,
                 rows: torch.Tensor) -> str:
    """One untimed call on the point's second input, judged; the reason it fails, or ""."""
    second = build(point, dtype, torch.device(device), rows, values_seed=point.seed + SECOND_SEED_OFFSET)
    second.prepare()
    result = second.check_call()
    checked = judge_result(point, second, result, dtype, what="output on a second input")
    return checked.reason


def judge_last(workload: Any, output: Any, checked: Checked) -> str:
    """The last timed call's output against the checked call's reference and bound; the reason, or ""."""
    if output is None or workload.timed_rows is None:
        return ""
    rows = workload.timed_rows(output)
    return within(rows, checked.reference.out_rows, checked.plain.out_rows, checked.out.bound,
                  what="output of the last timed call")
