"""scope=train: the task, the model's attention statistics, the loop's metrics, determinism, bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from selfattn.measure import measure_point
from selfattn.point import Point
from selfattn.results import decode_curve, encode_curve
from selfattn.train import task
from selfattn.train.loop import steps_to_target
from selfattn.train.model import RecallModel

TINY = dict(scope="train", mode="fwd_bwd", heads=2, head_dim=16, seq_len=5, batch=8, steps=6, device="cpu")


def test_every_answer_is_the_value_of_the_asked_key_and_keys_are_distinct():
    batch = task.draw(64, 8, task.stream(3))
    for keys, values, query, answer in zip(batch.keys_BP.tolist(), batch.values_BP.tolist(),
                                           batch.query_B.tolist(), batch.answer_B.tolist()):
        assert len(set(keys)) == len(keys) and query in keys
        assert answer == values[keys.index(query)]  # a plain lookup, independent of gather
    again = task.draw(64, 8, task.stream(3))
    assert torch.equal(again.keys_BP, batch.keys_BP) and torch.equal(again.answer_B, batch.answer_B)
    assert not torch.equal(task.draw(64, 8, task.stream(4)).keys_BP, batch.keys_BP)


@pytest.mark.parametrize("seq_len", [1, task.KEY_VOCAB + 2])
def test_a_sequence_that_cannot_hold_distinct_keys_is_refused(seq_len):
    with pytest.raises(ValueError, match=r"^seq_len: scope=train holds seq_len - 1 \(key, value\) pairs"):
        task.pairs_for(seq_len)


def test_steps_to_target_matches_a_rolling_mean():
    rng = np.random.default_rng(0)
    for _ in range(50):
        accs = list(rng.choice([0.5, 0.875, 0.9375, 1.0], size=40))
        means = [np.mean(accs[max(0, i - 9):i + 1]) for i in range(len(accs))]
        expected = next((i + 1 for i, m in enumerate(means) if m >= 0.9), None)
        assert steps_to_target(accs) == expected
    assert steps_to_target([0.1] * 30) is None


@pytest.mark.parametrize("scale", [None, 1.0, 0.3], ids=["auto", "none", "0.3"])
def test_the_query_rows_logits_match_a_float64_computation_of_the_same_weights(scale):
    model = RecallModel(32, 4, kv_heads=2, scale=scale, seed=5)
    batch = task.draw(3, 6, task.stream(0))
    x = model.embed(batch).detach().double().numpy()  # (B, L, 32)
    wq, wk = (w.detach().double().numpy() for w in (model.attn.w_q.weight, model.attn.w_k.weight))
    q = (x[:, -1] @ wq.T).reshape(3, 4, 8)  # (B, heads, d_k)
    k = (x @ wk.T).reshape(3, 7, 2, 8)  # (B, L, kv_heads, d_k)
    factor = 1 / math.sqrt(8) if scale is None else scale
    expected = np.stack([np.einsum("bd,bld->bl", q[:, h], k[:, :, h // 2]) for h in range(4)], axis=1) * factor
    np.testing.assert_allclose(model.query_logits(batch).numpy(), expected, rtol=1e-12, atol=1e-12)


def test_the_model_is_the_same_through_every_cpu_back_end_that_has_a_backward():
    batch = task.draw(4, 6, task.stream(1))
    outs = [RecallModel(32, 2, backend=b, seed=2)(batch) for b in ("naive", "sdpa", "chunked")]
    for out in outs[1:]:
        torch.testing.assert_close(out, outs[0], rtol=1e-5, atol=1e-5)


def test_the_same_point_twice_gives_the_same_curve_bit_for_bit_and_another_seed_does_not():
    first, second = measure_point(Point(**TINY)), measure_point(Point(**TINY))
    assert first.status == second.status == "ok", first.error
    assert first.loss_curve == second.loss_curve and first.loss_final == second.loss_final
    assert len(decode_curve(first.loss_curve)) == TINY["steps"]
    assert measure_point(Point(**{**TINY, "seed": 1})).loss_curve != first.loss_curve


def test_a_train_row_has_every_metric_and_its_held_out_numbers_are_consistent():
    row = measure_point(Point(**{**TINY, "steps": 8}))
    assert row.status == "ok", row.error
    assert all(v is not None and math.isfinite(v) for v in (row.loss_at_25pct, row.loss_at_50pct, row.loss_at_75pct,
                                                             row.loss_final, row.logit_std, row.time_ms))
    assert 0 <= row.final_accuracy <= 1 and 1 / task.VALUE_VOCAB <= row.max_weight <= 1 + 1e-12
    assert row.nonfinite_steps == 0 and row.nonfinite_loss_steps == 0 and row.steps == 8 and row.lr == 3e-3
    assert row.tokens_per_s == pytest.approx(8 * 5 / (row.time_ms * 1e-3))
    assert row.time_ms_p20 <= row.time_ms <= row.time_ms_p80 and row.time_samples == 8


@pytest.mark.parametrize("steps", [1, 2])
def test_a_run_shorter_than_its_evaluations_evaluates_once_per_step(steps):
    row = measure_point(Point(**{**TINY, "steps": steps}))
    assert row.status == "ok", row.error
    assert row.loss_at_25pct == row.loss_at_50pct and row.loss_final is not None  # ceil(0.25 s) = ceil(0.5 s)


def test_scaled_attention_learns_the_task():  # the task has a solution attention finds (about 1 s)
    row = measure_point(Point(**{**TINY, "heads": 1, "head_dim": 64, "seq_len": 9, "batch": 32, "steps": 160}))
    assert row.status == "ok" and row.final_accuracy > 0.8 and row.steps_to_target_acc is not None


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_mixed_precision_runs_under_autocast_and_says_so(precision):
    row = measure_point(Point(**{**TINY, "precision": precision}))
    assert row.status == "ok", row.error
    assert row.note.startswith(f"{precision}: autocast") and ("GradScaler" in row.note) == (precision == "fp16")


@pytest.mark.parametrize("change, status, error", [
    (dict(mode="fwd"), "invalid", "mode: scope=train runs forward and backward, so mode must be fwd_bwd, got 'fwd'"),
    (dict(q_len=2), "invalid", "q_len: scope=train is self-attention over X, so q_len must be null or seq_len, got 2"),
    (dict(window=2), "invalid", "window: scope=train supports the causal mask only, got 2"),
    (dict(seq_len=200), "invalid", "seq_len: scope=train holds seq_len - 1 (key, value) pairs of distinct keys"),
    (dict(backend="flex"), "unsupported", "backend flex does not support a backward pass on cpu"),
], ids=["fwd", "q_len", "window", "seq_len", "flex-cpu"])
def test_bad_train_points_become_rows_that_say_why(change, status, error):
    row = measure_point(Point(**{**TINY, **change}))
    assert row.status == status and error in row.error


def test_training_axes_outside_scope_train_are_refused():
    for name, value in (("steps", 10), ("lr", 0.1)):
        with pytest.raises(ValueError, match=rf"^{name}: only scope=train uses it"):
            Point(**{name: value}).validate()


def test_a_run_predicted_over_max_point_s_is_skipped_after_two_steps():
    from selfattn.measure.budget import Budget

    row = measure_point(Point(**{**TINY, "steps": 10**6}), Budget(max_point_s=1.0))
    assert row.status == "skipped_budget" and "2 steps took" in row.error and row.loss_curve == ""


def test_the_curve_cell_round_trips_exactly():
    losses, accs = [2.7725887222397811, float("1e-300"), 0.1 + 0.2], [0.0, 0.5, 1.0]
    text = encode_curve(losses, accs)
    assert decode_curve(text) == [(1, losses[0], 0.0), (2, 1e-300, 0.5), (3, 0.1 + 0.2, 1.0)]
    assert json.loads(text)[2][1] == 0.30000000000000004 and decode_curve("") == [] and decode_curve(None) == []


def test_the_loop_counts_only_leading_finite_loss_overflows_as_start_up(monkeypatch):
    from selfattn.train import loop

    # finite (loss, gradient) flags per step: two start-up skips, a finite step, a late skip, a loss overflow
    flags = iter([(True, False), (True, False), (True, True), (True, False), (False, False)] + [(True, True)] * 10)

    def fake_step(model, optimizer, scaler, autocast, batch):
        loss_finite, grad_finite = next(flags)
        return 1.0, 0.5, loss_finite and grad_finite, loss_finite

    monkeypatch.setattr(loop, "_step", fake_step)
    row = measure_point(Point(scope="train", mode="fwd_bwd", precision="fp16", heads=1, head_dim=8, seq_len=3, batch=2,
                              steps=8, device="cpu"))
    assert (row.nonfinite_steps, row.scaler_startup_skips, row.nonfinite_loss_steps) == (4, 2, 1)


def test_scale_at_query_reaches_the_training_through_the_back_ends_options():
    on_q = measure_point(Point(**{**TINY, "backend_options": {"scale_at": "query"}}))
    at_logits = measure_point(Point(**TINY))
    assert on_q.status == "ok" and on_q.kernel.endswith("-scaleq") and not at_logits.kernel.endswith("-scaleq")
    # the same math, rounded in another order: the same curve to fp32's precision, not bit for bit
    np.testing.assert_allclose([l for _, l, _ in decode_curve(on_q.loss_curve)],
                               [l for _, l, _ in decode_curve(at_logits.loss_curve)], rtol=1e-4)
