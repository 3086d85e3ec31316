"""Accuracy against a float64 reference, on a seeded sample of query rows.

Only the sampled rows of the reference are computed (attention_reference(rows=...)), so the
check costs O(rows x seq_len) at any n. Errors are taken over the entries that are finite in
the measured output; `nonfinite_frac` beside them says how many were not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def sample_rows(q_len: int, count: int, seed: int) -> torch.Tensor:
    """Sorted query indices: `count` distinct rows drawn with `seed`, or all rows when fewer."""
    if q_len <= count:
        return torch.arange(q_len)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randperm(q_len, generator=generator)[:count].sort().values


@dataclass(frozen=True)
class Errors:
    max_abs_err: float | None
    rel_rms_err: float | None
    nonfinite_frac: float


def compare(measured: torch.Tensor | list[torch.Tensor], reference: torch.Tensor | list[torch.Tensor]) -> Errors:
    """max |measured - reference|, rms(diff) / rms(reference) and the non-finite share of `measured`.

    Lists are compared as one concatenated vector (e.g. the gradients w.r.t. q, k and v).
    """
    if isinstance(measured, torch.Tensor):
        measured, reference = [measured], [reference]  # type: ignore[list-item]
    got = torch.cat([t.detach().reshape(-1).to(torch.float64).cpu() for t in measured])
    ref = torch.cat([t.detach().reshape(-1).to(torch.float64).cpu() for t in reference])
    if got.shape != ref.shape:
        raise ValueError(f"measured: expected {ref.numel()} values like the reference, got {got.numel()}")
    finite = torch.isfinite(got)
    nonfinite_frac = 1.0 - finite.double().mean().item() if got.numel() else 0.0
    if not bool(finite.any()):
        return Errors(None, None, nonfinite_frac)
    diff = (got - ref)[finite]
    ref_rms = ref[finite].pow(2).mean().sqrt().item()
    rms = diff.pow(2).mean().sqrt().item()
    rel = rms / ref_rms if ref_rms > 0 else (0.0 if rms == 0 else math.inf)
    return Errors(diff.abs().max().item(), rel, nonfinite_frac)
