"""Hydra's private names (runners/hydra_private.py, hydra_plugins/selfattn_launcher/compose_once.py) behind the
Hydra they were written for: on another one each falls back, and the sweep still runs."""

from __future__ import annotations

import importlib.util

import hydra
import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from runners import cli_check, hydra_private, launcher
from runners.launcher import FALLBACK, LAUNCHER

COMPOSE_ONCE = importlib.util.find_spec("hydra_plugins.selfattn_launcher.compose_once").origin


@pytest.fixture
def other_hydra(monkeypatch):
    from hydra.core.plugins import Plugins

    Plugins.instance()  # Hydra's plugin scan (once per process) done first: it must see the real Hydra's version
    monkeypatch.setattr(hydra, "__version__", "1.4.0")


def fresh_compose_once():
    """compose_once's module executed anew (not the one Hydra's scan registered)."""
    spec = importlib.util.spec_from_file_location("compose_once_fresh", COMPOSE_ONCE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_on_hydra_13_the_private_names_are_used():
    assert hydra_private.written_for() and hydra_private.args_parser() is not None
    overrides = OverridesParser.create().parse_overrides(["seq_len=1,2,3", "causal=true,false"])
    assert sum(len(batch) for batch in hydra_private.split_sweep(overrides)) == 6
    module = fresh_compose_once()
    assert module.WHY_NOT is None and hasattr(module, "ComposeOnceLauncher")


def test_on_another_hydra_each_falls_back(other_hydra, monkeypatch):
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    validate = BasicSweeper.validate_batch_is_legal
    assert hydra_private.args_parser() is None
    assert hydra_private.split_sweep([]) is None
    assert hydra_private.skip_batch_validation() is False
    assert BasicSweeper.validate_batch_is_legal is validate  # the up-front composition stays
    # no check before Hydra: a typo goes on to Hydra's composition and the job's own check
    assert cli_check.overrides_of(["seqlen=5"]) is None and cli_check.config_dir_of(["--config-dir", "x"]) is None
    cli_check.refuse_typos(["seqlen=5"])  # does not exit


def test_skipping_the_validation_on_hydra_13(monkeypatch):
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    monkeypatch.setattr(BasicSweeper, "validate_batch_is_legal", BasicSweeper.validate_batch_is_legal)  # undone after
    assert hydra_private.skip_batch_validation() is True
    assert BasicSweeper.validate_batch_is_legal(object(), [["seqlen=5"]]) is None


def test_compose_once_on_another_hydra_leaves_the_jobs_to_hydras_basic_launcher(other_hydra, monkeypatch, capsys):
    module = fresh_compose_once()
    assert not hasattr(module, "ComposeOnceLauncher")  # Hydra's scan finds no launcher in it
    assert module.WHY_NOT == "it was written for Hydra 1.3.x, this is Hydra 1.4.0"
    from hydra.core.plugins import Plugins

    plugins = Plugins.instance()
    monkeypatch.setattr(plugins, "discover", lambda kind: [])
    real_import = importlib.import_module
    monkeypatch.setattr(importlib, "import_module",
                        lambda name: module if name == LAUNCHER.rpartition(".")[0] else real_import(name))
    monkeypatch.setattr(launcher, "register_source", lambda: None)
    assert launcher.launcher_overrides(["-m", "seq_len=64"]) == [FALLBACK]
    (note,) = capsys.readouterr().err.splitlines()
    assert note.startswith("note: the compose_once launcher did not load (it was written for Hydra 1.3.x, this is "
                           "Hydra 1.4.0); multiruns use Hydra's basic launcher")
