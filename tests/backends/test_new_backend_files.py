"""What a new built-in back end touches, as docs/architecture.md counts it: its module, its name in
BUILTIN_NAMES (selfattn/backends/discovery.py) and, having options, selfattn/backends/options/<name>.py (and its
own tests); no conf/ file (the config group `backend` is made from the Options). This test adds one with an option
to a copy of the packages, touching those three files alone, and runs it everywhere a back end is used: the
listing (`--json`), `selfattn.attention`, a refusal, the command line's check of its option, and a sweep point
setting it. A place that also needs editing (a hard-coded list of back ends) fails it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("selfattn", "runners", "analysis", "conf", "hydra_plugins")
MODULE = '''"""copycat: naive's steps under another name (a test's back end)."""
from selfattn.backends import naive
from selfattn.backends.contract import backend
from selfattn.backends.options.copycat import Options


def attention(q, k, v, *, masks, scale, scale_at="logits"):
    return naive.attention(q, k, v, masks=masks, scale=scale, scale_at=scale_at)


backend(attention, takes_masks=True, options=Options, dtypes=("fp32",), mem_model=naive.predict_mem_bytes,
        kernel_label="copycat", gaps={"fp64": "a test's back end takes fp32 only"})
'''
OPTIONS = '''"""copycat's options, without torch."""
from dataclasses import dataclass

from selfattn.fields import spec


@dataclass(frozen=True)
class Options:
    scale_at: str = spec("logits", choices=("logits", "query"), help="as naive's")
'''
CLI = '''
import sys
from runners import cli_check
assert cli_check.problems(["backend=copycat", "backend.scale_at=query"]) == []
(line,) = cli_check.problems(["backend=copycat", "backend.scale_att=query"])
assert "did you mean backend.scale_at?" in line, line
assert "torch" not in sys.modules
print("ok")
'''
CHECK = '''
import torch, selfattn
from selfattn.backends import BACKEND_NAMES
assert BACKEND_NAMES[-1] == "copycat", BACKEND_NAMES
q, k, v = selfattn.make_qkv(1, 2, 16, 16, 8, seed=0)
out = selfattn.attention(q, k, v, backend="copycat", causal=True)
torch.testing.assert_close(out.double(), selfattn.attention_reference(q, k, v, causal=True), atol=1e-5, rtol=0)
try:
    selfattn.attention(q.double(), k.double(), v.double(), backend="copycat")
except selfattn.Unsupported as err:
    assert "a test's back end takes fp32 only" in str(err), err
else:
    raise AssertionError("fp64 ran on a back end that declares fp32 only")
print("ok")
'''


@pytest.fixture(scope="module")
def copy_with_a_new_backend(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("newbackend")
    for name in PACKAGES:
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "selfattn" / "backends" / "copycat.py").write_text(MODULE)  # 1: its module
    discovery = root / "selfattn" / "backends" / "discovery.py"  # 2: its name among the built-ins
    text = discovery.read_text()
    old = 'BUILTIN_NAMES: tuple[str, ...] = ("naive", "sdpa", "chunked", "flex", "triton")'
    assert old in text
    discovery.write_text(text.replace(old, old[:-1] + ', "copycat")'))
    (root / "selfattn" / "backends" / "options" / "copycat.py").write_text(OPTIONS)  # 3: its options, no torch
    return root


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_new_builtin_touches_its_module_its_name_and_its_options(copy_with_a_new_backend, tmp_path):
    root = copy_with_a_new_backend
    listed = _run(root, "-m", "selfattn.backends", "--json")
    assert listed.returncode == 0, listed.stderr
    record = {b["name"]: b for b in json.loads(listed.stdout)["backends"]}["copycat"]
    assert record["source"] == "builtin" and record["here"]["cpu"]["can_run"], record
    assert record["origin"] == "selfattn.backends.copycat:attention"
    called = _run(root, "-c", CHECK)
    assert called.returncode == 0 and called.stdout.strip() == "ok", called.stderr
    checked = _run(root, "-c", CLI)
    assert checked.returncode == 0 and checked.stdout.strip() == "ok", checked.stderr
    swept = _run(root, "-m", "runners.sweep", "backend=copycat", "backend.scale_at=query", "seq_len=32", "heads=2", "head_dim=16",
                 f"hydra.run.dir={tmp_path / 'run'}", "wandb.mode=disabled", "budget.timing_s=0.02")
    assert swept.returncode == 0, swept.stdout[-2000:] + swept.stderr[-2000:]
    row = json.loads((tmp_path / "run" / "row.json").read_text())
    assert row["status"] == "ok" and row["backend"] == "copycat" and row["kernel"] == "copycat", row
    assert json.loads(row["backend_options"]) == {"scale_at": "query"}, row
