"""A new scope is one module, checked by making the change: this test copies the repository, adds the scope
`linear` (one linear map over X, no attention back end) as selfattn/scopes/linear.py and edits no other file, then
runs `python -m runners.sweep` in the copy. Nothing registers the module (selfattn/scopes/__init__.py loads every
module of the package): the sweep validates the scope's points, predicts their memory and FLOPs from its
declaration and measures them against its float64 reference. The unedited copy refuses the scope.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.repo_copy import copy_repository, run

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("selfattn", "runners", "analysis", "hydra_plugins", "conf", "pyproject.toml")
MODULE = "selfattn/scopes/linear.py"
# The whole new scope: its declaration, its costs and its workload.
TOY_SCOPE = '''"""scope=linear: one linear map over the layer's X, Y = X W^T (d_model x d_model); no attention back end runs."""

from __future__ import annotations

from typing import Any

from selfattn.scopes.declaration import Scope


def flops(point: Any) -> float:
    forward = 2.0 * point.batch * point.seq_len * point.d_model * point.d_model
    return 3 * forward if point.mode == "fwd_bwd" else forward  # backward: dX and dW, each a forward's size


def x_bytes(point: Any) -> int:
    return point.batch * point.seq_len * point.d_model * point.element_bytes


def weight_bytes(point: Any) -> int:
    return point.d_model * point.d_model * point.element_bytes


def bytes_moved(point: Any) -> int:
    once = 2 * x_bytes(point) + weight_bytes(point)  # read X and W, write Y
    return 2 * once if point.mode == "fwd_bwd" else once  # read dY, write dX and dW


def input_bytes(point: Any) -> int:
    return x_bytes(point) * (2 if point.mode == "fwd_bwd" else 1) + weight_bytes(point)


def call_bytes(point: Any, resolved: Any, device: str) -> int:
    return x_bytes(point) * (2 if point.mode == "fwd_bwd" else 1) + (weight_bytes(point) if point.mode == "fwd_bwd" else 0)


def build(point: Any, dtype: Any, device: Any, rows: Any, seed: int, resolved: Any) -> Any:
    import torch

    from selfattn.inputs import make_x, randn
    from selfattn.masks import Masks
    from selfattn.measure.workload import Result, Workload

    grad = point.mode == "fwd_bwd"
    x = make_x(point.batch, point.seq_len, point.d_model, dtype=dtype, device=device, std=point.input_std, seed=seed,
               requires_grad=grad)
    w = randn((point.d_model, point.d_model), dtype=dtype, device=device, seed=point.seed + 1).requires_grad_(grad)
    upstream = randn(tuple(x.shape), dtype=dtype, device=device, seed=point.seed + 2) if grad else None
    rows_dev = rows.to(device)

    def call() -> Any:
        if upstream is None:
            with torch.no_grad():
                return x @ w.T
        out = x @ w.T
        return out, torch.autograd.grad(out, (x, w), upstream)

    def check_call() -> Result:
        out = call()
        return Result((out[0] if grad else out).detach()[:, rows_dev], list(out[1]) if grad else None)

    def reference() -> Result:
        x64, w64 = (t.detach().double().requires_grad_(grad) for t in (x, w))
        with torch.enable_grad() if grad else torch.no_grad():
            out = x64 @ w64.T
            grads = list(torch.autograd.grad(out, (x64, w64), upstream.double())) if upstream is not None else None
        return Result(out.detach()[:, rows_dev], grads)

    return Workload(call, check_call, reference, None, torch.zeros(1, 1, 1, 1, dtype=dtype, device=device), rows,
                    Masks())


SCOPE = Scope("linear", "one linear map over X", attention=False, kernel="torch.matmul", flops=flops,
              bytes_moved=bytes_moved, input_bytes=input_bytes, call_bytes=call_bytes,
              drawn=lambda point, rows: [point.batch * point.seq_len * point.d_model] * (2 if point.mode == "fwd_bwd" else 1),
              reference_bytes=lambda point, rows: 8 * (2 * x_bytes(point) + weight_bytes(point)) // point.element_bytes,
              host_weights=lambda point: 0, build=build)
'''
SEQ_LEN, BATCH, HEADS, HEAD_DIM = 64, 2, 2, 32
D_MODEL = HEADS * HEAD_DIM


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict[str, Path]:
    original = copy_repository(tmp_path_factory.mktemp("original"), COPIED)
    edited = copy_repository(tmp_path_factory.mktemp("edited"), COPIED)
    (edited / MODULE).write_text(TOY_SCOPE, encoding="utf-8")
    return {"original": original, "edited": edited}


def test_the_unedited_repository_refuses_the_scope(trees):
    refused = run(trees["original"], "-c", "from selfattn.point import Point; Point(scope='linear').validate()")
    assert refused.returncode != 0 and "scope: expected one of core, layer, generate, lstm, gru, train" in refused.stderr


@pytest.mark.slow
def test_a_new_scope_is_one_module_validated_predicted_and_measured_by_the_sweep(trees, tmp_path):
    out = tmp_path / "sweep"
    swept = run(trees["edited"], "-m", "runners.sweep", "-m", "scope=linear", "mode=fwd,fwd_bwd", "causal=false,true",
                f"seq_len={SEQ_LEN}", f"batch={BATCH}", f"heads={HEADS}", f"head_dim={HEAD_DIM}", "device=cpu",
                f"hydra.sweep.dir={out}", "wandb.mode=disabled")
    assert swept.returncode == 0, swept.stdout[-3000:] + swept.stderr[-3000:]
    rows = {(r["mode"], r["causal"]): r for r in csv.DictReader((out / "results.csv").open(encoding="utf-8"))}
    assert len(rows) == 4 and {r["scope"] for r in rows.values()} == {"linear"}
    # validated: the declaration says no attention runs, so an attention axis off its default is refused
    for mode in ("fwd", "fwd_bwd"):
        refused = rows[(mode, "true")]
        assert refused["status"] == "invalid", refused
        assert refused["error"].startswith("causal: scope=linear is torch.matmul with no attention"), refused["error"]
    # predicted and measured: the row says what ran, its FLOPs and memory model are the module's, its error is small
    x_bytes, w_bytes = BATCH * SEQ_LEN * D_MODEL * 4, D_MODEL * D_MODEL * 4
    forward = 2.0 * BATCH * SEQ_LEN * D_MODEL * D_MODEL
    for mode, predicted, flops in (("fwd", x_bytes, forward), ("fwd_bwd", 2 * x_bytes + w_bytes, 3 * forward)):
        row = rows[(mode, "false")]
        assert row["status"] == "ok", row
        assert row["kernel"] == "torch.matmul" and float(row["flops"]) == flops
        assert int(row["predicted_mem_bytes"]) == predicted
        assert float(row["time_ms"]) > 0 and int(row["peak_alloc_bytes"]) > 0
        assert float(row["max_abs_err"]) < 1e-3 and float(row["rel_rms_err"]) < 1e-5
