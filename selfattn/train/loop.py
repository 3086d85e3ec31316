"""One training run = one row: the loop, its precision, and what the row records of it.

Precision: fp32 (and tf32 on CUDA, fp64) train the model in that dtype. fp16 and bf16 are mixed
precision as PyTorch does it: fp32 weights, the forward under torch.autocast (matmuls, the attention
included, in the low dtype), and for fp16 loss scaling through torch.amp.GradScaler, on a CPU as on
CUDA (torch 2.3+ has both on a CPU; where autocast does not take the dtype the row is `unsupported`).
bf16 has fp32's range and needs no loss scaling. Every precision skips the update of a step whose
loss or gradient is not finite (GradScaler's rule, applied to all), and counts it (`nonfinite_steps`). Of those,
fp16's `scaler_startup_skips` are the leading steps with a finite loss whose gradient overflowed at GradScaler's
initial scale (2^16, whatever the model): the scaler halving it until the gradients fit, by design, in any
run; a step after the first finite one, or one whose loss itself overflowed, is not calibration.

The optimizer is AdamW (weight decay 0), the standard; each step draws a fresh batch of the task
from the point's seed (infinite data), and the held-out batch is evaluated at EVAL_FRACTIONS of the run.

Determinism: data and weights come from private generators of the seed; on a CPU the run uses
deterministic algorithms and one thread, so the same point gives the same loss curve bit for bit
(tests/train/test_loop.py). One thread also because the ops are tiny: with OpenMP every op ends in a
barrier across the cores, and where another process holds a core each barrier waits for a scheduler
slice, so a step on every thread can take many times its one-thread time. A GPU run is seeded the same way but not
promised bit for bit (cuBLAS and atomics).

Time: each step is timed with perf_counter from the forward to the optimizer step, the loss read
back on the host (`loss.item()`, which waits for the device) included; the batch's drawing and the
evaluations are outside. time_ms is the median step.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from typing import Any, Iterator

import torch

from selfattn.backends.resolved import Resolved
from selfattn.errors import Unsupported
from selfattn.point import Point, parse_scale
from selfattn.results import Row, encode_curve
from selfattn.train import task
from selfattn.train.model import RecallModel

EVAL_FRACTIONS = (0.25, 0.5, 0.75, 1.0)  # where the held-out loss is recorded (loss_at_25pct ... loss_final)
EVAL_BATCH = 256  # sequences of the held-out batch
TARGET_ACCURACY = 0.9  # steps_to_target_acc: the first step whose last TARGET_WINDOW batches average this
TARGET_WINDOW = 10  # steps the training accuracy is averaged over (one batch of 32 is noisy)
GUARD_STEPS = 2  # after these, the run's predicted time faces budget.max_point_s
CPU_THREADS = 1  # see the module's doc
AUTOCAST = ("fp16", "bf16")  # the mixed precisions


def train_point(point: Point, device: str, dtype: torch.dtype, row: Row, *, max_point_s: float,
                saturated_weight: float, resolved: Resolved) -> None:
    """Run the point's training and fill its row (status ok, or skipped_budget past `max_point_s`); raises for a
    failure. `saturated_weight`: the largest weight past which a row counts as one-hot (the stability pass's);
    `resolved`: the point's back end as measure_point resolved it (resolve_point), its options with it.
    The measurement's facts come as arguments: selfattn.measure calls this package, never the other way."""
    dev = torch.device(device)
    pairs = task.pairs_for(point.seq_len)
    with _cpu_threads(dev), _deterministic(dev):
        model = RecallModel(point.d_model, point.heads, kv_heads=point.kv_heads_resolved, backend=resolved,
                            causal=point.causal, scale=parse_scale(point.scale), input_std=point.input_std,
                            seed=point.seed)
        mixed = point.precision in AUTOCAST
        model = model.to(device=dev, dtype=torch.float32 if mixed else dtype)
        optimizer = torch.optim.AdamW(model.parameters(), lr=point.lr, weight_decay=0.0)
        scaler = torch.amp.GradScaler(dev.type) if point.precision == "fp16" else None
        autocast = _autocast(dev, dtype) if mixed else contextlib.nullcontext
        stream, held_out = task.stream(point.seed), task.eval_batch(EVAL_BATCH, pairs, point.seed).to(dev)
        evals_at: dict[int, list[float]] = {}  # step -> the fractions evaluated after it (a short run shares steps)
        for fraction in EVAL_FRACTIONS:
            evals_at.setdefault(max(1, math.ceil(fraction * point.steps)), []).append(fraction)
        losses, accuracies, step_s, evals, nonfinite, nonfinite_loss, startup = [], [], [], {}, 0, 0, 0
        for step in range(1, point.steps + 1):
            batch = task.draw(point.batch, pairs, stream).to(dev)
            started = time.perf_counter()
            loss, accuracy, finite, loss_finite = _step(model, optimizer, scaler, autocast, batch)
            step_s.append(time.perf_counter() - started)
            losses.append(loss)
            accuracies.append(accuracy)
            nonfinite += not finite
            nonfinite_loss += not loss_finite
            startup += scaler is not None and loss_finite and not finite and nonfinite == step
            if step in evals_at:
                evals.update(dict.fromkeys(evals_at[step], _evaluate(model, autocast, held_out)))
            if step == GUARD_STEPS and point.steps > GUARD_STEPS:
                predicted_s = sum(step_s) + (point.steps - step) * min(step_s)
                if predicted_s > max_point_s:
                    row.status = "skipped_budget"
                    row.error = (f"{step} steps took {sum(step_s):.1f} s, so {point.steps} steps would take "
                                 f"~{predicted_s:.0f} s > max_point_s={max_point_s:g} s")
                    return
        _fill(row, point, losses, accuracies, step_s, evals, (nonfinite, nonfinite_loss), model.query_logits(held_out),
              saturated_weight)
        row.scaler_startup_skips = startup if scaler is not None else None
        row.num_threads = CPU_THREADS if dev.type == "cpu" else row.num_threads
        row.note = _precision_note(point.precision)


def _step(model: RecallModel, optimizer: torch.optim.Optimizer, scaler, autocast, batch: task.Batch
          ) -> tuple[float, float, bool, bool]:
    """One optimizer step: (loss, batch accuracy, whether loss and gradient were finite, whether the loss was)."""
    optimizer.zero_grad(set_to_none=True)
    with autocast():
        logits = model(batch)
    loss = torch.nn.functional.cross_entropy(logits.float(), batch.answer_B)
    (scaler.scale(loss) if scaler is not None else loss).backward()
    if scaler is not None:
        scaler.unscale_(optimizer)  # the gradients at loss scale 1, as they are checked and applied
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    loss_finite = bool(torch.isfinite(loss.detach()))
    finite = loss_finite and bool(torch.isfinite(torch.nn.utils.get_total_norm(grads)))
    if scaler is not None:
        scaler.step(optimizer)  # skips the update itself when the gradient is not finite
        scaler.update()
    elif finite:
        optimizer.step()
    accuracy = (logits.argmax(dim=-1) == batch.answer_B).float().mean()
    return float(loss.detach()), float(accuracy), finite, loss_finite


@torch.no_grad()
def _evaluate(model: RecallModel, autocast, held_out: task.Batch) -> tuple[float, float]:
    """(loss, accuracy) on the held-out batch."""
    with autocast():
        logits = model(held_out)
    loss = torch.nn.functional.cross_entropy(logits.float(), held_out.answer_B)
    return float(loss), float((logits.argmax(dim=-1) == held_out.answer_B).float().mean())


def steps_to_target(accuracies: list[float], target: float = TARGET_ACCURACY, window: int = TARGET_WINDOW) -> int | None:
    """The first step (1-based) whose last `window` batch accuracies (fewer at the start) average >= target."""
    total = 0.0
    for step, accuracy in enumerate(accuracies, start=1):
        total += accuracy - (accuracies[step - 1 - window] if step > window else 0.0)
        if total / min(step, window) >= target - 1e-12:
            return step
    return None


def _fill(row: Row, point: Point, losses: list[float], accuracies: list[float], step_s: list[float],
          evals: dict[float, tuple[float, float]], nonfinite: tuple[int, int], logits_BHL: torch.Tensor,
          saturated_weight: float) -> None:
    row.loss_at_25pct, row.loss_at_50pct, row.loss_at_75pct = (evals[f][0] for f in EVAL_FRACTIONS[:3])
    row.loss_final, row.final_accuracy = evals[1.0]
    row.steps_to_target_acc = steps_to_target(accuracies)
    row.nonfinite_steps, row.nonfinite_loss_steps = nonfinite
    row.loss_curve = encode_curve(losses, accuracies)
    # the query row's attention at the end, in float64 on the held-out batch: (sequence, head) rows
    row.logit_std = _finite(logits_BHL.std(dim=-1).median())
    largest = logits_BHL.softmax(dim=-1).amax(dim=-1)
    row.max_weight = _finite(largest.mean())
    row.saturated_frac = _finite((largest > saturated_weight).double().mean())
    ms = sorted(s * 1e3 for s in step_s)
    row.time_ms = statistics.median(ms)
    row.time_ms_p20, row.time_ms_p80 = (ms[min(len(ms) - 1, int(q * len(ms)))] for q in (0.2, 0.8))
    row.time_samples, row.timer = len(ms), "perf_counter_step"
    row.tokens_per_s = point.batch * point.seq_len / (row.time_ms * 1e-3) if row.time_ms > 0 else None
    row.measure_s = sum(step_s)
    row.computed_as = point.precision
    row.status, row.error = "ok", ""


def _finite(value: torch.Tensor) -> float | None:
    number = float(value)
    return number if math.isfinite(number) else None


def _precision_note(precision: str) -> str:
    if precision == "fp16":
        return "fp16: autocast (matmuls and attention in fp16, fp32 weights) with GradScaler loss scaling"
    if precision == "bf16":
        return "bf16: autocast (matmuls and attention in bf16, fp32 weights), no loss scaling"
    return ""


def _autocast(device: torch.device, dtype: torch.dtype):
    """A factory of autocast contexts for `dtype` on `device`; Unsupported where autocast refuses it
    (torch then warns and runs fp32, which would mislabel the row)."""
    try:
        with torch.autocast(device.type, dtype=dtype):
            taken = torch.is_autocast_enabled(device.type) and torch.get_autocast_dtype(device.type) == dtype
    except (RuntimeError, TypeError, AttributeError) as exc:
        raise Unsupported(f"precision: autocast on {device.type} does not take {dtype} here ({exc})") from exc
    if not taken:
        raise Unsupported(f"precision: autocast on {device.type} does not take {dtype} in torch {torch.__version__}")
    return lambda: torch.autocast(device.type, dtype=dtype)


@contextlib.contextmanager
def _cpu_threads(device: torch.device) -> Iterator[None]:
    if device.type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(CPU_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def _deterministic(device: torch.device) -> Iterator[None]:
    """Deterministic algorithms on a CPU (an op without one raises, and the row says so); on CUDA they
    would need CUBLAS_WORKSPACE_CONFIG set before the process started, so a GPU run is left as it is."""
    if device.type != "cpu":
        yield
        return
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)
