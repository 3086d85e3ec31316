"""The correctness verdict: is a call's output within its point's tolerance? (status `incorrect` if not)

The rule is FlashAttention's (its tests hold every kernel to it): against the float64 reference of the
same inputs,

    err <= K * err_plain + atol

where `err` is the largest absolute error of the measured output, `err_plain` the largest absolute error of
the *plain same-dtype reference* (the float64 reference's own steps run in the point's dtype, no upcast, on
the same sampled rows), and `atol` a rounding allowance of the dtype. So the bound follows the point
(dtype, size, inputs' scale, masks) and is never set per back end: a kernel may be up to K times worse than
the plainest computation in its dtype, plus the dtype's rounding.

- K = 2, FlashAttention's, where the output's rounding sets the errors (fp16, bf16, FP8: FlashAttention's
  own setting). Measured on the built-ins on this CPU (naive, sdpa, chunked; n 128 and 1024, d 16-256,
  causal or not, input_std 1 and 4): err / err_plain at most 0.67 in fp16 and bf16.
- K = 8 in fp32, tf32 and fp64, where the order of summation, not the output's rounding, sets both errors,
  and one honest order can be several times worse than another: err / err_plain reached 1.71 on the
  forward and 5.4 on a layer's gradients (sdpa's fused backward against autograd through the plain
  steps, seq_len 24). A wrong kernel's error is of the output's own size, 1e4 times these bounds.
- atol = 2 * eps(dtype) * magnitude: twice the dtype's machine epsilon at the largest magnitude the output
  is made of (`magnitude`: max |V| and max |reference| for the attention core, whose outputs are
  weighted means of V's rows; max |reference| elsewhere). FlashAttention's is 2 * rounding(ref + 0.3),
  about eps * (|ref| + 0.3) at its unit-normal inputs; the values' magnitude replaces the fixed 0.3 so the
  allowance follows `input_std`, and a mean of n values that were rounded carries an error at the values'
  scale, not the (smaller) mean's.
- fp64: the plain reference *is* the float64 reference (err_plain = 0), and an honest reordering of the
  same sums differs from it by a few ulps. Its own rule: err_plain is the plain fp32 reference's error
  scaled by eps(fp64) / eps(fp32), the first-order rounding error of the same steps (proportional to the
  unit roundoff).
- FP8 (fp8_e4m3, fp8_e5m2): the plain reference runs the point's own FP8 recipe on the reference's steps:
  Q, K, V quantized as the point asks (scaling, Hadamard rotation), float32 products, P cast with its
  p_scale (FlashAttention-3's test computes its fp8 `out_pt` the same way). Its error is that of the format,
  so the bound still catches a wrong mask or a wrong batch element (errors of the output's own size).
- Non-finite outputs: an output row (the last dimension) that is non-finite where the float64 reference
  is finite is `incorrect` in every dtype, unless the plain same-dtype reference is non-finite in that row
  too: then the dtype itself overflows there (fp16 with scale=none), which `nonfinite_frac` measures.
  Such rows are left out of both errors: what the dtype cannot compute has no error to compare.
- The unscaled ablation (scale=none) needs no rule beyond that: its overflow is the shared overflow above,
  and its saturated softmax is the plain reference's too (err_plain grows with it).

Gradients (mode=fwd_bwd) are judged the same way, as one vector (dq, dk, dv, or the layer's dx and weights).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

K = 2.0  # FlashAttention's multiple of the plain reference's error (fp16, bf16, FP8)
K_WIDE = 8.0  # fp32, tf32, fp64: summation order dominates (see the module's docstring)
ATOL_ULPS = 2.0  # atol = ATOL_ULPS * eps(dtype) * magnitude

# machine epsilon (ulp of 1) per dtype the plain reference runs in
EPS: dict[torch.dtype, float] = {torch.float64: 2.0 ** -52, torch.float32: 2.0 ** -23,
                                 torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10}


@dataclass(frozen=True)
class Judgement:
    """One output against its bound: `error` (max |out - ref| over the judged rows), `bound`, and why not."""

    error: float
    bound: float
    plain_error: float
    atol: float
    nonfinite: int  # measured non-finite entries in rows the dtype computes (plain reference finite there)
    reason: str = ""  # empty when within the bound

    @property
    def ok(self) -> bool:
        return not self.reason


def _flat(tensors: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
    """One float64 host matrix of a tensor or a list of tensors: a row per output row (the last dimension),
    or per value where the tensors' last dimensions differ (a layer's gradients: dx beside its weights)."""
    if isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    parts = [t.detach().to(torch.float64).cpu() for t in tensors]
    widths = {p.shape[-1] if p.dim() else 1 for p in parts}
    width = widths.pop() if len(widths) == 1 else 1
    return torch.cat([p.reshape(-1, width) for p in parts])


def judge(measured: torch.Tensor | Sequence[torch.Tensor], reference: torch.Tensor | Sequence[torch.Tensor],
          plain: torch.Tensor | Sequence[torch.Tensor], *, eps: float, magnitude: float | None = None,
          plain_scale: float = 1.0, what: str = "output", plain_name: str = "plain", k: float = K) -> Judgement:
    """The verdict of `measured` against the float64 `reference`, with the plain same-dtype reference `plain`.

    `eps`: the dtype's machine epsilon (EPS); `magnitude`: the largest magnitude the output is made of
    (default max |reference|); `plain_scale` multiplies the plain reference's error (fp64's rule).
    `what` and `plain_name` word the reason ("output", "plain fp16 reference"); `k` the multiple."""
    got, ref, pl = _flat(measured), _flat(reference), _flat(plain)
    if got.shape != ref.shape or pl.shape != ref.shape:
        raise ValueError(f"{what}: expected {tuple(ref.shape)} values like the reference, got {tuple(got.shape)} "
                         f"and a plain reference of {tuple(pl.shape)}")
    ref_ok = torch.isfinite(ref).all(dim=-1)  # a float64 overflow (never seen) judges nothing
    computable = ref_ok & torch.isfinite(pl).all(dim=-1)  # rows the dtype itself computes
    rows = got[computable]
    nonfinite = int((~torch.isfinite(rows)).sum())
    ref_rows, plain_rows = ref[computable], pl[computable]
    finite = torch.isfinite(rows)
    error = float((rows - ref_rows).abs()[finite].max()) if bool(finite.any()) else 0.0
    plain_error = float((plain_rows - ref_rows).abs().max()) * plain_scale if plain_rows.numel() else 0.0
    scale = magnitude if magnitude is not None else (float(ref[ref_ok].abs().max()) if bool(ref_ok.any()) else 0.0)
    atol = ATOL_ULPS * eps * scale
    bound = k * plain_error + atol
    reason = ""
    if nonfinite:
        reason = (f"{what}: {nonfinite} non-finite of {rows.numel()} sampled values in rows where the float64 "
                  f"reference and the {plain_name} reference are finite")
    elif not error <= bound:
        reason = (f"{what} error {error:.3g} > bound {bound:.3g} (rule: err <= {k:g} x err of the {plain_name} "
                  f"reference {plain_error:.3g} + atol {atol:.3g}, against float64)")
    return Judgement(error, bound, plain_error, atol, nonfinite, reason)


def within(measured: torch.Tensor | Sequence[torch.Tensor], reference: torch.Tensor | Sequence[torch.Tensor],
           plain: torch.Tensor | Sequence[torch.Tensor], bound: float, *, what: str) -> str:
    """Why `measured` misses an already computed `bound` (the last timed call against the checked call's
    bound), or "" when it holds it. Rows the dtype cannot compute (plain non-finite) are left out, as in judge."""
    got, ref, pl = _flat(measured), _flat(reference), _flat(plain)
    if got.shape != ref.shape:
        return f"{what}: {got.shape[0]} rows, expected {ref.shape[0]} like the checked call"
    computable = torch.isfinite(ref).all(dim=-1) & torch.isfinite(pl).all(dim=-1)
    rows, ref_rows = got[computable], ref[computable]
    bad = int((~torch.isfinite(rows)).sum())
    if bad:
        return f"{what}: {bad} non-finite of {rows.numel()} sampled values where the checked call was finite"
    error = float((rows - ref_rows).abs().max()) if rows.numel() else 0.0
    if not error <= bound or math.isnan(error):
        return f"{what} error {error:.3g} > the checked call's bound {bound:.3g}"
    return ""
