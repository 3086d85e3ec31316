"""The scopes as declared (selfattn/scopes/): one module each, read by validation, capability and measurement."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import selfattn.scopes as scopes_package
from selfattn.measure.path_length import PATH_SCOPES
from selfattn.point import SCOPE_DEFAULTS, Point, axis_default
from selfattn.scopes import SCOPES, Scope


def test_every_module_declares_the_scope_it_is_named_for_and_all_are_loaded():
    modules = {m.name for m in pkgutil.iter_modules(scopes_package.__path__) if not m.name.startswith("_")} - {"declaration"}
    for name in modules:
        declared = importlib.import_module(f"selfattn.scopes.{name}").SCOPE
        assert isinstance(declared, Scope) and declared.name == name
    assert set(SCOPES) == modules


def test_the_facts_others_read_come_from_the_declarations():
    assert tuple(SCOPES) == Point.__dataclass_fields__["scope"].metadata["choices"]
    assert {name: scope.gates for name, scope in SCOPES.items() if scope.gates} == {"lstm": 4, "gru": 3}
    assert [scope.kernel for scope in SCOPES.values() if not scope.attention] == ["torch.nn.LSTM", "torch.nn.GRU"]
    assert PATH_SCOPES == ("layer", "lstm", "gru")
    assert SCOPE_DEFAULTS == {"generate": {"causal": True}, "train": {"mode": "fwd_bwd", "seq_len": 9}}


@pytest.mark.parametrize("name", list(SCOPES))
def test_a_scope_s_own_axes_are_refused_elsewhere(name):
    for axis in SCOPES[name].own_axes:
        other = next(s for s in SCOPES if s != name and not SCOPES[s].own_axes and SCOPES[s].attention)
        value = not axis_default(axis) if isinstance(axis_default(axis), bool) else axis_default(axis) * 2
        with pytest.raises(ValueError, match=f"^{axis}: only scope={name} uses it"):
            Point(scope=other, **{axis: value}).validate()


def test_a_declaration_changes_what_validation_accepts(monkeypatch):
    """Validation reads the declaration, not the name: a layer declared to take score transforms takes them."""
    import dataclasses

    with pytest.raises(ValueError, match="need scope=core"):
        Point(scope="layer", softcap=5.0).validate()
    monkeypatch.setitem(SCOPES, "layer", dataclasses.replace(SCOPES["layer"], gives_qkv=True))
    Point(scope="layer", softcap=5.0).validate()
