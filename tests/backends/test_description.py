"""A plugin's options learned from a child process (selfattn/backends/description.py): the same options, the same
checks, no plugin code in this process; a hang, a crash or garbage leaves it `unknown`, never broken."""

from __future__ import annotations

import sys
import textwrap
import time

import pytest

from selfattn.backends import description, registry
from selfattn.fields import check_fields, config_fields, defaults

PLUGIN = textwrap.dedent('''
    import os
    from dataclasses import dataclass
    from pathlib import Path
    from selfattn.backends import backend
    from selfattn.fields import spec

    Path(os.environ["MARKER"]).write_text(str(os.getpid()))
    print("chatter on stdout at import")

    def _mode(value):
        if value not in ("auto", 1, 2):
            raise ValueError(f"mode: expected auto, 1 or 2, got {value!r}")
        return value

    @dataclass(frozen=True)
    class Options:
        block: int = spec(64, ge=16, le=4096, help="block size")
        ratio: float | None = spec(None, gt=0, help="a ratio")
        kind: str = spec("fast", choices=("fast", "exact"), help="which")
        flag: bool = spec(False, help="a flag")
        sizes: tuple = spec((1, 2), help="a tuple default")
        mode: object = spec("auto", parse=_mode, help="its own spelling")
        derived: str = spec("x", config=False, help="not in a config")

    @backend(options=Options)
    def attn(q, k, v, *, causal, window, key_lengths, document_ids, scale, **options):
        return q
''')


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    path = tmp_path / "described_plugin.py"
    path.write_text(PLUGIN)
    monkeypatch.setenv("MARKER", str(tmp_path / "marker"))
    yield f"{path}:attn"
    registry.forget()


def test_a_description_has_the_plugins_options_and_checks(plugin, tmp_path, monkeypatch):
    monkeypatch.setattr(description, "LIMIT_S", 120.0)
    entry = registry.get_backend(plugin)
    assert entry.described and entry.fn is None and not entry.broken
    assert int((tmp_path / "marker").read_text()) != __import__("os").getpid()  # imported in the child
    assert not any("described_plugin" in name for name in sys.modules)  # never here
    described = entry.options_type
    assert defaults(described) == {"block": 64, "ratio": None, "kind": "fast", "flag": False, "sizes": [1, 2],
                                   "mode": "auto", "derived": "x"}
    assert [f.name for f in config_fields(described)] == ["block", "ratio", "kind", "flag", "sizes", "mode"]
    real = registry.get_backend(plugin, here=True)  # a point measured in this process imports it
    assert real.fn is not None and not real.described and registry.get_backend(plugin) is real
    for bad, words in (({"block": 8}, "block: expected an integer >= 16 and <= 4096, got 8"),
                       ({"kind": "slow"}, "kind: expected one of fast, exact, got 'slow'"),
                       ({"flag": 1}, "flag: expected true or false, got 1"),
                       ({"ratio": 0}, "ratio: expected null or a finite number > 0, got 0"),
                       ({"nope": 1}, "nope: unknown key")):
        for options_type in (described, real.options_type):  # the same one-line refusal from both
            with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
                check_fields(options_type, bad)
    assert check_fields(described, {"mode": "anything"})["mode"] == "anything"  # its parse is the worker's to run


def test_a_plugin_that_fails_to_import_is_broken_with_its_error(tmp_path, monkeypatch):
    monkeypatch.setattr(description, "LIMIT_S", 120.0)
    path = tmp_path / "fails_at_import.py"
    path.write_text("raise RuntimeError('no kernel library here')\n")
    try:
        entry = registry.get_backend(f"{path}:attn")
        assert entry.broken and "RuntimeError: no kernel library here" in entry.error, entry.error
    finally:
        registry.forget()


def test_a_hanging_import_is_unknown_within_the_limit_and_the_child_is_gone(tmp_path, monkeypatch):
    monkeypatch.setattr(description, "LIMIT_S", 3.0)
    path = tmp_path / "hangs.py"
    path.write_text(f"import os, time\nopen({str(tmp_path / 'pid')!r}, 'w').write(str(os.getpid()))\n"
                    "time.sleep(600)\n")
    start = time.monotonic()
    try:
        entry = registry.get_backend(f"{path}:attn")
        took = time.monotonic() - start
        assert not entry.broken and entry.fn is None and "did not finish within 3 s" in entry.described
        assert defaults(entry.options_type) == {}  # nothing known: its points meet the hang in the worker
        assert took < 20, took
        child = int((tmp_path / "pid").read_text())
        assert not __import__("os").path.exists(f"/proc/{child}")  # killed and reaped
        registry.get_backend(f"{path}:attn")  # asked once per process: no second wait
        assert time.monotonic() - start - took < 1
    finally:
        registry.forget()


@pytest.mark.parametrize("answer", ["not json", "[1, 2]", '{"name": "x", "options": "no"}',
                                    '{"name": "x", "options": [{"name": "a b", "kind": "int"}]}',
                                    '{"name": "x", "options": [{"name": "a", "kind": "code"}]}',
                                    '{"name": "x", "options": [{"name": "a", "kind": "int", "ge": "0"}]}'])
def test_an_answer_that_is_no_description_is_unknown(answer):
    told = description.from_answer("x", answer)
    assert told.options is None and told.error is None and "could not be read" in told.unknown
