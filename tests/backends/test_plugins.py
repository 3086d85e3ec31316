"""Plugins: discovery (entry points, paths), the one registry, declared non-support, and bad plugins.

Every bad plugin gives a row with a status and a one-line reason (measure_point never raises for it).
"""

from __future__ import annotations

import textwrap
import uuid

import pytest
import torch

import selfattn
from selfattn.backends import Declaration, describe_name, discovery, get_backend, registry
from selfattn.backends.capability import Ask, unavailable
from selfattn.backends.resolved import resolve
from selfattn.backends.contract import declaration_of
from selfattn.measure import Budget, measure_point
from selfattn.point import Point
from selfattn.reference import attention_reference

PLUGINS = '''
import time
from dataclasses import dataclass

import torch

from selfattn.backends import backend
from selfattn.fields import spec


def _attend(q, k, v, causal, scale):
    k, v = (t.repeat_interleave(q.shape[1] // k.shape[1], 1) for t in (k, v))
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        m, n = q.shape[-2], k.shape[-2]
        s = s.masked_fill(~torch.ones(m, n, dtype=torch.bool, device=q.device).tril(n - m), float("-inf"))
    return torch.softmax(s, -1) @ v


@dataclass(frozen=True)
class Options:
    temperature: float = spec(1.0, gt=0, help="divides the scale")


@backend(masks=("causal",), options=Options, kernel_label=lambda o: f"t{o['temperature']:g}")
def plain(q, k, v, *, causal, window, key_lengths, document_ids, scale, temperature=1.0):
    return _attend(q, k, v, causal, scale / temperature)


def undeclared(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    return _attend(q, k, v, causal, scale)


@backend(layout="BSHD", masks=("causal",), gqa=False, backward=False, devices=("cpu",), dtypes=("fp32",))
def bshd(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    assert q.is_contiguous() and q.shape[1] >= 16 > q.shape[2], q.shape  # (B, S, H, D): these tests have S >= 16 > H
    return _attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal, scale).transpose(1, 2)


def raises(q, k, v, **kw):
    raise RuntimeError("kernel exploded")


def wrong_shape(q, k, v, **kw):
    return q[..., :1]


def wrong_dtype(q, k, v, **kw):
    return q.double()


def wrong_device(q, k, v, **kw):
    return torch.empty(q.shape, dtype=q.dtype, device="meta")


def nonfinite(q, k, v, **kw):
    return torch.full_like(q, float("nan"))


def returns_tuple(q, k, v, **kw):
    return q, None


def slow(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    time.sleep(1.0)
    return _attend(q, k, v, causal, scale)


not_a_function = 3
'''


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """A module of plugins on sys.path under a fresh name; the registry forgets them afterwards."""
    name = f"plugins_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(PLUGINS)
    (tmp_path / f"broken_{name}.py").write_text("raise ImportError('needs a library this machine lacks')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    registry.forget()


def fake_entry_points(monkeypatch, tmp_path, *packages: tuple[str, dict[str, str]]):
    """Installed packages' metadata (a *.dist-info folder each, as pip writes it) declaring entry points."""
    for package, points in packages:
        info = tmp_path / f"{package.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0\n")
        lines = "".join(f"{name} = {target}\n" for name, target in points.items())
        (info / "entry_points.txt").write_text(f"[{discovery.ENTRY_POINT_GROUP}]\n{lines}")
    monkeypatch.syspath_prepend(str(tmp_path))
    discovery.refresh()
    return discovery


@pytest.fixture(autouse=True)
def _fresh_discovery():
    discovery.refresh()
    yield
    discovery.refresh()
    registry.forget()


def qkv(b=2, h=4, kv=4, m=16, n=16, d=8, dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(b, h, m, d, generator=g, dtype=dtype), torch.randn(b, kv, n, d, generator=g, dtype=dtype),
            torch.randn(b, kv, n, d, generator=g, dtype=dtype))


def small_point(backend: str, **axes) -> Point:
    values = dict(backend=backend, device="cpu", seq_len=32, heads=2, head_dim=8)
    values.update(axes)
    return Point(**values)


BUDGET = Budget(timing_s=0.02, measure_device_peak=False)


# --- names ---------------------------------------------------------------------------------------------------

def test_describe_name_knows_builtins_and_paths_and_explains_the_rest():
    for name in ("naive", "sdpa", "chunked", "flex", "my_pkg.attn:fast", "pkg:Cls.method"):
        assert describe_name(name) is None, name
    assert "did you mean sdpa?" in describe_name("sdpx")
    assert "not a path module:function" in describe_name("my_pkg.attn:")
    assert "not a path" in describe_name("1pkg:fast")
    clash = describe_name("my_pkg:naive")  # a path whose name is a built-in's
    assert "selfattn.backends.naive" in clash and "my_pkg:naive" in clash
    assert describe_name(3) and describe_name("")


def test_a_path_is_named_by_its_attribute_and_its_point_id_by_that_name():
    assert discovery.backend_name("my_pkg.attn:fast") == "fast" == discovery.backend_name("fast")
    by_path, by_entry_point = Point(backend="my_pkg.attn:fast"), Point(backend="fast")
    assert by_path.point_id() == by_entry_point.point_id()  # moving between path and entry point keeps ids
    assert Point(backend="other.mod:quick").point_id() != by_path.point_id()  # negative control
    columns = by_path.columns()
    assert (columns["backend"], columns["backend_source"], columns["backend_path"]) == ("fast", "path", "my_pkg.attn:fast")
    assert Point(backend="sdpa").columns()["backend_source"] == "builtin"


def test_entry_points_are_discovered_without_importing_them(tmp_path, monkeypatch):
    fake_entry_points(monkeypatch, tmp_path, ("fast-attn", {"fast": "nowhere_installed:fast"}))
    assert discovery.backend_names()[-1] == "fast" and describe_name("fast") is None
    assert "nowhere_installed" not in __import__("sys").modules
    entry = get_backend("fast")  # its import fails: listed with the error, its points unsupported
    assert entry.source == "entry_point" and entry.broken and "ModuleNotFoundError" in unavailable(entry, "cpu")
    row = measure_point(small_point("fast"), BUDGET)
    assert row.status == "unsupported" and "nowhere_installed" in row.error and row.backend == "fast"
    # a path with the entry point's name but another target collides: refused, both named
    clash = describe_name("elsewhere:fast")
    assert "elsewhere:fast" in clash and "fast-attn" in clash and "nowhere_installed:fast" in clash
    assert describe_name("nowhere_installed:fast") is None  # the entry point's own target is the same back end


def test_an_entry_point_colliding_with_a_builtin_or_another_package_is_refused_naming_both(tmp_path, monkeypatch):
    fake_entry_points(monkeypatch, tmp_path, ("pkg-a", {"sdpa": "a:sdpa", "dup": "a:dup"}), ("pkg-b", {"dup": "b:dup"}))
    refused = discovery.refused_entry_points()
    assert "pkg-a" in refused["sdpa"] and "selfattn.backends.sdpa" in refused["sdpa"]
    assert "pkg-a" in refused["dup"] and "pkg-b" in refused["dup"]
    assert "dup" not in discovery.backend_names() and describe_name("dup") == refused["dup"]
    assert get_backend("sdpa").source == "builtin"  # the built-in stays itself
    from selfattn.backends.__main__ import listing

    lines = {row[0]: row for row in listing([])}
    assert lines["dup"][-1].startswith("refused:") and "pkg-b" in lines["dup"][-1]
    assert lines["naive"][7] == "asymmetric_window,softcap,alibi,sink"  # the variants it declares
    # what it declares beside them: every mask argument and both mask functions, its precisions, GQA and backward
    # (per device type where they differ)
    assert lines["naive"][3:7] == ("all,mask_mod,score_mod", "fp64,fp32,fp16,bf16,fp8_e4m3,fp8_e5m2", "yes", "yes")
    from selfattn.backends.__main__ import declared

    assert declared(get_backend("sdpa"))[0] == "all,mask_mod"  # a mask function only (a boolean attn_mask)
    assert lines["flex"][4:7] == ("cpu:fp32,fp16,bf16 cuda:fp64,fp32,fp16,bf16", "yes", "cpu:no cuda:yes")


def test_the_listing_exits_2_when_a_name_given_is_refused(capsys):
    from selfattn.backends.__main__ import main

    assert main(["naive"]) == 0
    assert main(["fp32ac"]) == 2  # a misspelt name: listed as refused, and the exit status says so
    assert "refused: backend: expected one of" in capsys.readouterr().out


# --- the one registry ----------------------------------------------------------------------------------------

def test_builtins_and_plugins_are_one_kind_of_entry(plugins):
    """One class, one declaration: a built-in is a function declared with the decorator a plugin uses."""
    naive, plain = get_backend("naive"), get_backend(f"{plugins}:plain")
    assert type(naive) is type(plain) is registry.Backend
    assert isinstance(naive.declaration, Declaration) and isinstance(plain.declaration, Declaration)
    assert naive.fn is selfattn.backends.naive.attention and naive.declaration is declaration_of(naive.fn)
    assert (naive.source, plain.source, plain.name) == ("builtin", "path", "plain")
    assert naive.options_type is selfattn.backends.naive.Options  # the module's own facts, not a copy
    assert naive.declaration.takes_masks and not plain.declaration.takes_masks
    assert plain.defaulted == ("mem_model", "efficiency") and not plain.mem_model_declared
    assert naive.defaulted == () and naive.mem_model_declared
    # no member is forwarded to a module: what is not declared is not there
    assert not hasattr(naive, "predict_mem_bytes") and not hasattr(naive, "NAME")


def test_a_path_plugin_runs_through_the_public_call_exactly(plugins):
    q, k, v = qkv(kv=2, m=5)
    for causal in (False, True):
        out = selfattn.attention(q, k, v, backend=f"{plugins}:plain", causal=causal)
        torch.testing.assert_close(out, attention_reference(q, k, v, causal=causal), rtol=0, atol=1e-12)
    halved = selfattn.attention(q, k, v, backend=f"{plugins}:plain", temperature=2.0)
    torch.testing.assert_close(halved, attention_reference(q, k, v, scale=0.5 / 8 ** 0.5))


def test_a_bshd_plugin_gets_batch_seq_heads_dim_and_its_output_comes_back(plugins):
    q, k, v = qkv(dtype=torch.float32)
    out = selfattn.attention(q, k, v, backend=f"{plugins}:bshd", causal=True)
    torch.testing.assert_close(out, attention_reference(q.double(), k.double(), v.double(), causal=True).float())


def test_plugin_options_are_checked_with_did_you_mean(plugins):
    cpu = Ask("cpu", "fp32")
    assert resolve(f"{plugins}:plain", {"temperature": 2.0}, cpu).options["temperature"] == 2.0
    with pytest.raises(ValueError, match="backend.temprature: unknown key; did you mean backend.temperature"):
        resolve(f"{plugins}:plain", {"temprature": 2.0}, cpu, prefix="backend.")
    with pytest.raises(ValueError, match="backend.temperature: expected"):
        resolve(f"{plugins}:plain", {"temperature": -1.0}, cpu, prefix="backend.")


@pytest.mark.parametrize("axes, words", [
    (dict(window=4), "mask window"),
    (dict(precision="fp16"), "precision fp16"),
    (dict(kv_heads=1), "kv_heads=1"),
    (dict(mode="fwd_bwd"), "backward"),
], ids=["window", "fp16", "gqa", "backward"])
def test_what_a_plugin_does_not_declare_is_an_unsupported_row_never_a_fallback(plugins, axes, words):
    row = measure_point(small_point(f"{plugins}:bshd", **axes), BUDGET)
    assert row.status == "unsupported" and words in row.error and "bshd" in row.error, row.error
    assert row.time_ms is None  # nothing ran
    with pytest.raises(selfattn.Unsupported, match="mask window"):  # the public call refuses the same
        q, k, v = qkv(dtype=torch.float32)
        selfattn.attention(q, k, v, backend=f"{plugins}:bshd", window=4)


def test_a_plugin_row_has_every_column_a_builtin_row_has(plugins):
    rows = {name: measure_point(small_point(name, causal=True), BUDGET) for name in ("naive", f"{plugins}:plain")}
    plugin, builtin = rows[f"{plugins}:plain"], rows["naive"]
    assert plugin.status == "ok", plugin.error
    filled = lambda row: {k for k, v in row.to_dict().items() if v not in (None, "")}  # noqa: E731
    # `note` and `noise` say what was unusual about one row's run (a busy machine): either row may have them
    assert filled(builtin) - filled(plugin) <= {"note", "noise"}, filled(builtin) - filled(plugin)
    assert plugin.max_abs_err < 1e-5 and plugin.peak_mem_bytes > 0 and plugin.flops == builtin.flops
    assert (plugin.kernel, plugin.mem_model, plugin.backend_defaulted) == ("t1", "assumed", "mem_model,efficiency")
    assert (builtin.mem_model, builtin.backend_source) == ("declared", "builtin")
    assert plugin.predicted_mem_bytes > builtin.predicted_mem_bytes  # the assumed model: naive's and copies


# --- bad plugins lose nothing -------------------------------------------------------------------------------

@pytest.mark.parametrize("fn, status, words", [
    ("raises", "error", "RuntimeError: kernel exploded"),
    ("wrong_shape", "error", "returned shape (1, 2, 32, 1), expected (1, 2, 32, 8)"),
    ("wrong_dtype", "error", "returned dtype torch.float64, expected q's torch.float32"),
    ("wrong_device", "error", "on meta, expected q's device cpu"),
    ("returns_tuple", "error", "returned tuple, expected one tensor"),
    ("nonfinite", "incorrect", "non-finite of"),  # the verdict's (selfattn/measure/verdict.py), in every dtype
    ("not_a_function", "unsupported", "is a int, not a function"),
], ids=lambda v: v if isinstance(v, str) and " " not in v else None)
def test_a_bad_plugin_gives_a_row_with_a_status_and_a_one_line_reason(plugins, fn, status, words):
    row = measure_point(small_point(f"{plugins}:{fn}"), BUDGET)
    assert (row.status, row.backend) == (status, fn), row.error
    assert words in row.error and "\n" not in row.error, row.error


def test_a_plugin_that_fails_to_import_gives_unsupported_rows_naming_the_error(plugins):
    row = measure_point(small_point(f"broken_{plugins}:fast"), BUDGET)
    assert row.status == "unsupported" and "needs a library this machine lacks" in row.error


class _Signal(BaseException):
    """As the sweep's handler raises on SIGINT/SIGTERM (runners.interrupts.Interrupted): no Exception."""


def test_a_signal_during_a_plugins_import_stops_the_run_and_is_no_broken_plugin(plugins, tmp_path):
    # a plugin's import that raises SystemExit is a broken plugin; Ctrl-C while it imports (a heavy library)
    # must end the sweep, not become unsupported rows "import failed: Interrupted" that a resume then skips
    (tmp_path / f"exits_{plugins}.py").write_text("raise SystemExit(3)\n")
    assert "import failed: SystemExit" in registry.get_backend(f"exits_{plugins}:fast").error
    (tmp_path / f"signalled_{plugins}.py").write_text(
        f"import {__name__} as t\nraise t._Signal('SIGINT')\n")
    with pytest.raises(_Signal):
        registry.get_backend(f"signalled_{plugins}:fast")
    with pytest.raises(_Signal):  # not remembered as broken: the next try imports it again
        registry.get_backend(f"signalled_{plugins}:fast")


def test_a_misspelt_function_of_a_path_names_the_nearest_one(plugins, tmp_path):
    reason = registry.get_backend(f"{plugins}:plian").error
    assert f"has no attribute 'plian'; did you mean {plugins}:plain?" in reason, reason
    reason = registry.get_backend(f"{plugins}:zzzzzz").error
    assert reason.endswith("has no attribute 'zzzzzz'"), reason  # nothing near: no guess
    (tmp_path / f"attr_{plugins}.py").write_text("import os\nos.no_such_thing\n")  # raised by its import
    reason = registry.get_backend(f"attr_{plugins}:plain").error
    assert "import failed: AttributeError" in reason and "did you mean" not in reason, reason


def test_non_finite_output_of_a_builtin_in_fp16_stays_a_measurement(plugins):
    # the chapter's overflow (fp16, unscaled, large inputs) is a measured row, not a broken contract
    row = measure_point(small_point("naive", precision="fp16", scale="none", input_std=300.0, head_dim=64), BUDGET)
    assert row.status == "ok" and row.nonfinite_frac > 0


def test_a_plugin_far_slower_than_predicted_is_stopped_after_one_call(plugins):
    budget = Budget(timing_s=0.02, measure_device_peak=False, max_point_s=1.5)
    row = measure_point(small_point(f"{plugins}:slow"), budget)
    assert row.status == "skipped_budget" and "warm-up call took 1." in row.error, row.error
    assert "(predicted " in row.error and "max_point_s=1.5" in row.error
    assert row.predicted_time_ms < 10  # the guard predicted it fast; the measured call said otherwise


def test_the_example_package_is_exact_against_float64():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "selfattn-fp32acc"))
    try:
        q, k, v = qkv(kv=2, m=12)
        lengths, docs = torch.tensor([10, 16]), torch.tensor([[0] * 5 + [1] * 11, [0] * 8 + [2] * 8])
        for masks in (dict(causal=True), dict(window=3), dict(causal=True, window=4, key_lengths=lengths)):
            out = selfattn.attention(q, k, v, backend="selfattn_fp32acc:fp32acc", **masks)
            torch.testing.assert_close(out, attention_reference(q, k, v, **masks), rtol=0, atol=1e-12)
        q16 = torch.randn(1, 2, 16, 8, dtype=torch.float16)
        out = selfattn.attention(q16, q16, q16, backend="selfattn_fp32acc:fp32acc", document_ids=docs[:1])
        assert out.dtype == torch.float16
    finally:
        sys.path.remove(str(Path(__file__).resolve().parents[2] / "examples" / "selfattn-fp32acc"))
