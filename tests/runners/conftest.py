"""Runner tests: helpers live in runner_helpers.py (importable from here on)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

sys.path.insert(0, str(Path(__file__).resolve().parent))

from runner_helpers import load_fake  # noqa: E402

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.fixture(scope="module")
def composer():
    """compose(overrides) of the real conf/ (Hydra's compose API, once per test module)."""
    from runners import config

    config.register_resolvers()  # the point's defaults (Hydra's ConfigStore) and the experiments' resolvers
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield lambda overrides: compose("config", overrides=overrides, return_hydra_config=True)
    GlobalHydra.instance().clear()


@pytest.fixture
def fake_measure(monkeypatch):
    """Replace selfattn.measure by the fake for in-process job tests."""
    fake = load_fake()
    monkeypatch.setitem(sys.modules, "selfattn.measure", fake.module())
    return fake


@pytest.fixture(autouse=True)
def fresh_sweep_state(monkeypatch):
    """Each test starts with no sweep started in its process and no point skipped yet (runners/interrupts.py and
    runners/progress.py keep both per process): a job run in-process then says its own skip, as in a process of its own.
    Nor with points an earlier test's jobs ran (runners/ledger.py), which its sweep's end would miss."""
    from runners import eta, interrupts, ledger, progress

    monkeypatch.setattr(progress, "SKIPPED", progress.Skipped())
    monkeypatch.setattr(eta, "PREDICTED", eta.Predicted())  # nor an earlier sweep's predictions for the ETA
    monkeypatch.setattr(interrupts, "STATE", interrupts._State())
    monkeypatch.setattr(ledger, "LEDGER", ledger.Ledger())  # and no point of an earlier test counted as this sweep's
