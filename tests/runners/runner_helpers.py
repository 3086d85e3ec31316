"""Runner test helpers: a fake selfattn.measure, a path plugin, and the real CLI in a subprocess."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, TypeVar

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).resolve().parent / "fake_measure.py"


# A path plugin (`my_attn:quick`, `my_attn:explodes`), for the tests that run one through a sweep
# (test_plugin_sweep.py, test_sweep_parallel.py): write it as my_attn.py into a folder on the sweep's PYTHONPATH.
PATH_PLUGIN = '''
import torch
from selfattn.backends import backend

@backend(masks=("causal",), kernel_label="einsum")
def quick(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    k, v = (t.repeat_interleave(q.shape[1] // k.shape[1], 1) for t in (k, v))
    s = torch.einsum("bhmd,bhnd->bhmn", q, k) * scale
    if causal:
        m, n = q.shape[2], k.shape[2]
        s = s.masked_fill(~torch.ones(m, n, dtype=torch.bool, device=q.device).tril(n - m), float("-inf"))
    return torch.einsum("bhmn,bhnd->bhmd", s.softmax(-1), v)

def explodes(q, k, v, **kw):
    raise RuntimeError("kernel exploded")
'''


def write_path_plugin(folder: Path, imports_log: Path | None = None) -> Path:
    """my_attn.py (PATH_PLUGIN) in `folder`; with `imports_log`, each process that imports it appends a line there:
    its argv[0], a tab and its parent's command line (a plugin runs in the isolated worker, whose parent is the job's
    process)."""
    folder.mkdir(parents=True, exist_ok=True)
    log = ("import os, sys\n"
           "parent = open(f'/proc/{os.getppid()}/cmdline', 'rb').read().replace(b'\\0', b' ').decode()\n"
           f"open({str(imports_log)!r}, 'a').write(sys.argv[0] + '\\t' + parent + '\\n')\n"
           if imports_log else "")
    (folder / "my_attn.py").write_text(log + PATH_PLUGIN)
    return folder


def load_fake():
    spec = importlib.util.spec_from_file_location("fake_measure", FAKE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def sweep_cmd(*args: str, fake: bool = False) -> list[str]:
    entry = [str(FAKE)] if fake else ["-m", "runners.sweep"]
    return [sys.executable, *entry, *args]


def run_sweep(*args: str, fake: bool = False, timeout: float = 60, env: dict | None = None):
    full_env = {**os.environ, "HYDRA_FULL_ERROR": "0", **(env or {})}
    return subprocess.run(sweep_cmd(*args, fake=fake), cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def end_cells_of(stdout: str, names: set[str]) -> dict[str, str]:
    """Each back end's cell in the end table of a one-point sweep of the back ends `names` (a header line of
    names, a line of cells under it, in as many parts as the terminal's width needed)."""
    lines = stdout.splitlines()
    found: dict[str, str] = {}
    for header, cells in zip(lines, lines[1:]):
        if not header.split() or not set(header.split()) <= names:  # a header holds names only
            continue
        named, values = re.split(r"\s{2,}", header.strip()), re.split(r"\s{2,}", cells.strip())
        if len(named) == len(values):
            found.update(zip(named, values))
    return found


def run_at_once(calls: dict[str, Callable[[], T]]) -> dict[str, T]:
    """Independent command-line runs (each its own process and folder), as many at once as there are CPUs.

    A refused value costs a whole start of Python, torch and Hydra (seconds) in a process that uses one
    core; the test process only waits. Started side by side, N such runs take about N / cores starts.
    Returns name -> what its call returned, once all are done (an exception in one is raised here)."""
    with ThreadPoolExecutor(max_workers=max(1, min(len(calls), os.cpu_count() or 1))) as pool:
        futures = {name: pool.submit(call) for name, call in calls.items()}
        return {name: future.result() for name, future in futures.items()}
