"""Three command lines that ended in Hydra's traceback are one-line refusals, exit 2, before anything runs
(runners/cli_check.py's flag_problems, runners/cli_syntax.py's path_problems)."""

from __future__ import annotations

import pytest

from runner_helpers import run_sweep


@pytest.mark.parametrize("args, line", [
    (("name=${hydra:runtime.cwd}",),
     "error: name: '${hydra:runtime.cwd}' is known only inside a job (Hydra's `hydra:` resolver), but the sweep's "
     "folder and wandb group need it before the first; write the name itself"),
    (("--cfg", "job"),
     "error: --cfg: shows one run's config or Hydra's set-up, so it takes no -m (--multirun); drop -m to see what "
     "--cfg shows, or --cfg to run the sweep"),
    (("hydra.sweeper.max_batch_size=0",),
     "error: hydra.sweeper.max_batch_size: expected a positive integer (jobs launched at once) or null (all), got 0"),
], ids=["name-from-a-job-only-resolver", "cfg-with-multirun", "max-batch-size-0"])
def test_a_command_hydra_would_end_in_a_traceback_is_one_line(tmp_path, args, line):
    out = run_sweep("-m", "backend=naive", f"hydra.sweep.dir={tmp_path / 's'}", *args, fake=True)
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [line], out.stderr[-2000:]
    assert out.stdout == "" and not (tmp_path / "s").exists()
