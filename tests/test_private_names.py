"""No private name of torch or Hydra is used outside the modules that guard them by version: a new use must go
through selfattn/torch_private.py or runners/hydra_private.py (compose_once checks its own), with its fallback."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUARDS = {"selfattn/torch_private.py", "runners/hydra_private.py", "hydra_plugins/selfattn_launcher/compose_once.py"}
PACKAGES = ("selfattn", "runners", "hydra_plugins", "analysis")


def private_uses(source: str) -> list[str]:
    """`torch._x` attribute reads and imports of `torch._x` or `hydra._internal` modules in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
            if node.attr.startswith("_") and not node.attr.startswith("__"):
                found.append(f"torch.{node.attr}")
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        found += [n for n in names if n.startswith(("torch._", "hydra._internal"))]
    return found


def test_the_scan_sees_a_private_use():
    assert private_uses("import torch\ntorch._fused_sdp_choice(q)\nprint(torch.__version__)") == ["torch._fused_sdp_choice"]
    assert private_uses("from torch._dynamo.utils import counters\nimport hydra._internal.utils") == [
        "torch._dynamo.utils", "hydra._internal.utils"]


def test_private_names_only_in_the_modules_that_guard_them():
    offenders = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            relative = path.relative_to(ROOT).as_posix()
            if relative not in GUARDS and (uses := private_uses(path.read_text(encoding="utf-8"))):
                offenders[relative] = uses
    assert offenders == {}
