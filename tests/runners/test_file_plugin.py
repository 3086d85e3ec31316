"""Plugins from a file: `backend=kernels/blocked.py:blocked` (relative to the folder the sweep starts in, or
absolute) runs with nothing on PYTHONPATH, is named by its function like a module path plugin, is judged by
the same verdict (a wrong kernel is `incorrect`), and is isolated like the others (one that ends its process is
a `crashed` row while the sweep goes on). The listing and `--json` accept it; a missing file and two path
plugins that share a function's name are refused before anything runs."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from runner_helpers import ROOT, run_at_once
from runners import cli_check
from selfattn.backends.capability import Ask
from selfattn.backends.resolved import resolve


# The kernel of docs/plugins.md's "A back end with options", as the page shows it, then one that is wrong by 1% and
# one that ends its own process.
def docs_kernel() -> str:
    page = (ROOT / "docs" / "plugins.md").read_text()
    code = page[page.index("# plugins/blocked.py"):]
    return code[:code.index("```")]


MORE = '''

@backend(masks=("causal",))
def wrong(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    return blocked(q, k, v, causal=causal, window=window, key_lengths=key_lengths, document_ids=document_ids,
                   scale=scale, block_k=16, upcast=True) * 1.01


def dies(q, k, v, **kw):
    import os

    os._exit(3)
'''


def write_plugin(folder):
    (folder / "kernels").mkdir(parents=True, exist_ok=True)
    (folder / "kernels" / "blocked.py").write_text(docs_kernel() + MORE)


def run(args, cwd, timeout=600):
    """The real command line, started in `cwd` with only the project on PYTHONPATH (not the plugin's folder)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_a_plugin_from_a_file_runs_is_judged_and_isolated_like_a_module_path(tmp_path):
    write_plugin(tmp_path)
    absolute = tmp_path / "kernels" / "blocked.py"
    sweep, options = tmp_path / "sweep", tmp_path / "options"
    common = ["seq_len=48", "causal=true,false", "experiment=smoke"]
    runs = run_at_once({
        "sweep": functools.partial(run, ["-m", "runners.sweep", "-m",
                                         f"backend=sdpa,kernels/blocked.py:blocked,kernels/blocked.py:wrong,{absolute}:dies",
                                         *common, f"hydra.sweep.dir={sweep}"], tmp_path),
        "options": functools.partial(run, ["-m", "runners.sweep", "-m", "backend=./kernels/blocked.py:blocked",
                                           "backend.block_k=8", "backend.upcast=false", *common,
                                           f"hydra.sweep.dir={options}"], tmp_path)})
    out = runs["sweep"]
    assert out.returncode == 1, out.stderr[-3000:]  # the points of `dies` failed; the sweep went on past them
    rows = pd.read_csv(sweep / "results.csv")
    by = {name: part for name, part in rows.groupby("backend")}
    assert set(by) == {"sdpa", "blocked", "wrong", "dies"} and len(rows) == 8, rows[["backend", "status"]]
    blocked = by["blocked"]
    assert (blocked["status"] == "ok").all(), blocked["error"].tolist()
    assert (blocked["backend_source"] == "path").all()
    assert (blocked["backend_path"] == "kernels/blocked.py:blocked").all()
    assert (blocked["kernel"] == "blocked16-fp32").all() and blocked["max_abs_err"].max() < 1e-5
    assert (by["wrong"]["status"] == "incorrect").all(), by["wrong"]["error"].tolist()
    assert (by["wrong"]["kernel"] == "blocked.wrong").all()  # no label declared: the file's stem and the function
    dies = by["dies"]
    assert (dies["status"] == "crashed").all() and dies["error"].str.contains("exit code 3").all(), dies["error"]
    assert (dies["backend_path"] == f"{absolute}:dies").all()

    # the options dataclass defined in the file reached the isolated worker: its values are the row's kernel
    again = runs["options"]
    assert again.returncode == 0, again.stderr[-3000:]
    assert set(pd.read_csv(options / "results.csv")["kernel"]) == {"blocked8-native"}

    # the listing and --json name it by its function, from its file, with what it declares
    table = run(["-m", "selfattn.backends", "kernels/blocked.py:blocked"], tmp_path, timeout=120)
    assert table.returncode == 0, table.stderr
    header, line = table.stdout.splitlines()[0], table.stdout.splitlines()[-1]
    assert header.split()[:8] == ["name", "source", "from", "masks", "dtypes", "gqa", "backward", "variants"]
    assert line.split()[:8] == ["blocked", "path", "kernels/blocked.py:blocked", "causal", "fp64,fp32,fp16,bf16",
                                "yes", "yes", "-"], line
    listing = run(["-m", "selfattn.backends", "kernels/blocked.py:blocked", "--json"], tmp_path, timeout=120)
    assert listing.returncode == 0, listing.stderr
    record = [b for b in json.loads(listing.stdout)["backends"] if b["name"] == "blocked"]
    assert record and record[0]["origin"] == "kernels/blocked.py:blocked" and record[0]["here"]["cpu"]["can_run"]
    assert [o["name"] for o in record[0]["declaration"]["options"]] == ["block_k", "upcast"]


def test_a_missing_file_and_two_paths_of_one_name_are_refused_before_anything_runs(tmp_path, monkeypatch):
    write_plugin(tmp_path)
    (tmp_path / "other.py").write_text("def blocked(q, k, v, **kw):\n    return q\n")
    monkeypatch.chdir(tmp_path)
    found = cli_check.problems(["backend=kernels/blocked.py:blocked,./kernels/blocked.py:blocked,other.py:blocked,"
                                "kernels/gone.py:blocked,kernels.blocked:blocked"])
    assert found == [
        f"backend: kernels/gone.py:blocked: no such file kernels/gone.py (relative to {tmp_path})",
        "backend: kernels/blocked.py:blocked and other.py:blocked and kernels/gone.py:blocked and "
        "kernels.blocked:blocked are both named blocked (a path plugin is named by its function, and rows and "
        "point ids carry that name); rename one of the functions, or run them in two sweeps"], found
    # one function spelt two ways is one back end, not two
    assert cli_check.problems([f"backend=kernels/blocked.py:blocked,{tmp_path}/kernels/blocked.py:blocked"]) == []
    assert "is not a file path" in cli_check.problems(["backend=kernels/blocked.py:2fast"])[0]


def test_the_command_line_refuses_the_pair_in_one_line(tmp_path):
    write_plugin(tmp_path)
    (tmp_path / "b.py").write_text("def blocked(q, k, v, **kw):\n    return q\n")
    out = run(["-m", "runners.sweep", "-m", "backend=kernels/blocked.py:blocked,b.py:blocked",
               f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path, timeout=120)
    assert out.returncode == 2 and "are both named blocked" in out.stderr, out.stderr
    assert not (tmp_path / "sweep").exists()


def test_the_pages_hooks_get_plain_dicts_and_fill_every_option(tmp_path, monkeypatch):
    """docs/plugins.md's resolve_options and compiles, on the page's kernel, loaded from a file in this process."""
    import torch

    from selfattn.backends import get_backend
    from selfattn.backends.registry import forget

    page = (ROOT / "docs" / "plugins.md").read_text()
    hooks = page[page.index("def resolve_options(options: dict"):]
    hooks = hooks[:hooks.index("```")]
    (tmp_path / "hooked.py").write_text(docs_kernel() + "\n\n" + hooks.replace(": ...  # as above", ":\n    return q"))
    monkeypatch.chdir(tmp_path)
    forget()
    entry = get_backend("hooked.py:blocked")
    assert not entry.broken, entry.error
    assert resolve("hooked.py:blocked", {}, Ask("cpu", "fp16"), torch.float16).options == {"block_k": 16, "upcast": True}
    assert resolve("hooked.py:blocked", {"block_k": 32}, Ask("cpu", "fp32")).options == {"block_k": 32,
                                                                                            "upcast": False}
    assert entry.compiles({"block_k": 16, "upcast": True}) is False
    assert entry.kernel_label({"block_k": 16, "upcast": True}) == "blocked16-fp32"
    assert entry.origin == "hooked.py:blocked" and entry.source == "path" and entry.name == "blocked"
    forget()
