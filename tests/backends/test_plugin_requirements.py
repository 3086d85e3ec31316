"""What a plugin needs to run: a required environment and a speed hint (contract.Declaration), as data with
one-line errors, read by the listing, by the unsupported rows and by the time guard."""

from __future__ import annotations

import uuid

import pytest

from selfattn.backends import Declaration, Speed, get_backend, registry
from selfattn.backends.__main__ import main as listing_main
from selfattn.backends.capability import unavailable
from selfattn.measure import Budget, measure_point
from tests.predicted import predicted_call_s
from selfattn.point import Point

PLUGINS = '''
import torch
from selfattn.backends import Speed, backend

CALLS = []


def _attend(q, k, v, scale):
    CALLS.append(q.shape)
    return torch.softmax((q @ k.transpose(-1, -2)) * scale, -1) @ v


@backend(masks=(), requires_env={"TRITON_INTERPRET": "1"}, requires_env_on=("cpu",))
def interpreted(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    return _attend(q, k, v, scale)


@backend(masks=(), speed={"cpu": Speed(flops_per_s=1e2, fixed_s=0.01)})
def crawls(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    return _attend(q, k, v, scale)


@backend(masks=(), efficiency=1e-9)
def crawls_by_efficiency(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    return _attend(q, k, v, scale)


@backend(masks=(), speed={"cpu": Speed(flops_per_s=1e9, fixed_s=0.002)})
def hinted(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    return _attend(q, k, v, scale)
'''


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    name = f"needs_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(PLUGINS)
    (tmp_path / f"broken_{name}.py").write_text("raise ImportError('needs a library this machine lacks')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    yield name
    registry.forget()


def point(backend: str, **axes) -> Point:
    return Point(**{"backend": backend, "device": "cpu", "seq_len": 32, "heads": 1, "head_dim": 8, **axes})


BUDGET = Budget(timing_s=0.02, accuracy_rows=4, measure_device_peak=False)


@pytest.mark.parametrize("declared, message", [
    (dict(requires_env=["TRITON_INTERPRET=1"]), r"^requires_env: expected a mapping of variable names to values"),
    (dict(requires_env={"TRITON INTERPRET": "1"}), r"^requires_env: expected variable names \(letters, digits, _\)"),
    (dict(requires_env={"TRITON_INTERPRET": 1}), r"^requires_env: TRITON_INTERPRET's value must be a string"),
    (dict(requires_env_on=("tpu",)), r"^requires_env_on: expected some of cpu, cuda, got 'tpu'$"),
    (dict(speed=2e8), r"^speed: expected a mapping of device types to Speed"),
    (dict(speed={"gpu": Speed(1e9)}), r"^speed: expected device types cpu, cuda as keys, got 'gpu'$"),
    (dict(speed={"cpu": 1e9}), r"^speed: cpu's hint must be a Speed\(flops_per_s=..., fixed_s=...\), got 1000000000.0$"),
])
def test_a_bad_requirement_is_a_one_line_error_naming_the_field(declared, message):
    with pytest.raises(ValueError, match=message):
        Declaration(**declared)


@pytest.mark.parametrize("flops_per_s, fixed_s, field", [(0, 0.0, "flops_per_s"), (float("inf"), 0.0, "flops_per_s"),
                                                         (1e9, -1.0, "fixed_s"), ("fast", 0.0, "flops_per_s")])
def test_a_bad_speed_is_a_one_line_error(flops_per_s, fixed_s, field):
    with pytest.raises(ValueError, match=rf"^speed\.{field}: expected a finite number"):
        Speed(flops_per_s=flops_per_s, fixed_s=fixed_s)


def test_the_required_environment_is_checked_per_device_type():
    d = Declaration(requires_env={"TRITON_INTERPRET": "1", "MY_LIB_HOME": None}, requires_env_on=("cpu",))
    assert d.missing_env("cpu", {}) == ["TRITON_INTERPRET=1", "MY_LIB_HOME=..."]
    assert d.missing_env("cpu", {"TRITON_INTERPRET": "0", "MY_LIB_HOME": "/opt"}) == ["TRITON_INTERPRET=1"]
    assert d.missing_env("cpu", {"TRITON_INTERPRET": "1", "MY_LIB_HOME": "/opt"}) == []
    assert d.missing_env("cuda", {}) == []  # compiled there: nothing needed


def test_a_missing_environment_says_no_in_the_listing_and_is_an_unsupported_row(plugins, monkeypatch, capsys):
    name = f"{plugins}:interpreted"
    assert listing_main([name]) == 0
    line = [row for row in capsys.readouterr().out.splitlines() if row.startswith("interpreted")][0]
    assert "cpu: no (needs TRITON_INTERPRET=1)" in line, line
    row = measure_point(point(name), BUDGET, ())
    assert row.status == "unsupported", row
    assert row.error == (f"Unsupported: backend interpreted ({name}) needs TRITON_INTERPRET=1 on cpu "
                         "(here: TRITON_INTERPRET unset); set it before the sweep starts")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # set: it runs
    assert measure_point(point(name), BUDGET, ()).status == "ok"
    assert unavailable(get_backend(name), "cpu") is None


def test_the_listing_exits_1_when_a_named_plugin_cannot_load(plugins, capsys):
    assert listing_main([f"broken_{plugins}:attention"]) == 1
    assert "import failed: ImportError: needs a library this machine lacks" in capsys.readouterr().out
    assert listing_main([f"{plugins}:no_such_function"]) == 1
    assert listing_main([f"{plugins}:hinted"]) == 0


def test_the_guard_uses_the_speed_hint_on_its_device_type(plugins):
    hinted, plain = point(f"{plugins}:hinted", seq_len=256, head_dim=64), point("naive", seq_len=256, head_dim=64)
    flops = 4 * 256 * 256 * 64
    assert predicted_call_s(hinted, 1.0) == pytest.approx(0.002 + flops / 1e9)  # the hint, not the peak
    assert predicted_call_s(hinted.with_device("cuda"), 1.0) == pytest.approx(flops / (1e12 * 0.5))  # none there
    assert predicted_call_s(plain, 1.0) == pytest.approx(flops / (1e12 * 0.6))
    assert get_backend(f"{plugins}:hinted").defaulted == ("mem_model", "kernel_label")  # its time is declared


def test_a_point_hinted_past_max_point_s_is_skipped_before_its_first_call(plugins):
    module = __import__(plugins)
    row = measure_point(point(f"{plugins}:crawls"), BUDGET, ())
    assert row.status == "skipped_budget" and "exceeds max_point_s=60" in row.error, row.error
    assert module.CALLS == []  # not one call: the prediction alone skipped it
    # a point its hint says takes about a second runs, where an efficiency that slow would skip it
    budget = Budget(timing_s=0.5, accuracy_rows=4, measure_device_peak=False, max_point_s=30)
    ran = measure_point(point(f"{plugins}:hinted", seq_len=512, head_dim=64), budget, ())
    assert ran.status == "ok" and ran.predicted_time_ms == pytest.approx(2 + 4 * 512 * 512 * 64 / 1e6), ran
    slow = measure_point(point(f"{plugins}:crawls_by_efficiency", seq_len=512, head_dim=64), budget, ())
    assert slow.status == "skipped_budget", slow  # the negative control: a FLOP share of the peak cannot say it
