"""`python -m runners.sweep`: one Hydra job measures one point (see conf/config.yaml).

With no arguments it runs the quick study (experiment=quick) as a multirun and writes the
report. Everything but reading Hydra's runtime state lives in runners/job.py and friends.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, NoReturn, cast

from runners import interrupts

if __name__ == "__main__":  # Ctrl-C while torch and Hydra import (seconds): one line, as later, no traceback
    interrupts.before_run()
    # This process never imports a plugin: a child describes its options (selfattn/backends/description.py), within
    # this many seconds; its points import it where they run (the isolated worker, under their time limit)
    os.environ.setdefault("SELFATTN_PLUGIN_DESCRIBE_S", "60")
    if len(sys.argv) == 1:  # no arguments: the default study, as the README's first command promises
        sys.argv.append("experiment=quick")
    from runners import cli_check

    # An unknown key or name: one line each, exit 2, nothing run; before torch and Hydra import, so in a
    # fraction of a second rather than seconds.
    cli_check.refuse_typos(sys.argv[1:])

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from hydra.types import RunMode  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402
from omegaconf.errors import OmegaConfBaseException  # noqa: E402

from runners import config, given, job, launcher, paths, quiet  # noqa: E402
from runners.callbacks import claim, failed_points, nothing_measured, sweep_id, sweep_meta  # noqa: E402

config.register_resolvers()  # ${by_device:...} and ${grid_range:} in conf/experiment/*.yaml


def context(cfg: DictConfig) -> job.JobContext:
    """This job's folders, number and swept keys from Hydra's runtime config; the sweep's size,
    start and device sharing from its sweep.json (read here, once per job)."""
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    sweep_dir = Path(hc.sweep.dir if multirun else hc.runtime.output_dir)
    meta = sweep_meta(sweep_dir) if multirun else {}
    varying = [o.split("=", 1)[0].lstrip("+~") for o in hc.overrides.task if "=" in o]
    return job.JobContext(
        job_dir=Path(hc.runtime.output_dir), sweep_dir=sweep_dir, multirun=multirun,
        index=hc.job.num if multirun else None, varying=varying,
        given=given.given_keys(hc),
        jobs_sharing_device=int(meta.get("jobs_sharing_device") or 1), sweep_id=sweep_id(cfg, sweep_dir),
        total=meta.get("total"), started_unix=meta.get("started_unix"),
    )


# conf/ beside runners/ in a checkout (editable install or PYTHONPATH); else the copy a regular install
# carries as the package selfattn_conf (pyproject.toml maps it onto conf/).
@hydra.main(version_base="1.3", config_name="config",
            config_path="../conf" if (Path(__file__).resolve().parents[1] / "conf" / "config.yaml").is_file()
            else "pkg://selfattn_conf")
def main(cfg: DictConfig) -> None:
    ctx = context(cfg)
    if ctx.multirun and (problem := paths.job_folder_problem(ctx.sweep_dir, ctx.job_dir)):
        refuse(problem)  # hydra.sweep.subdir=${...} that led outside: its row would be written elsewhere
    if not ctx.multirun and (problem := claim(cfg, ctx.sweep_dir, "hydra.run.dir", shared=True)):
        refuse(problem)  # a sweep's callback claims its folder before its first job
    try:
        values = cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True))  # a DictConfig's container is a dict
    except OmegaConfBaseException as exc:  # `seq_len=${oops}` in a file: the key and why, one line
        refuse(f"{getattr(exc, 'full_key', '') or 'config'}: {str(exc).splitlines()[0]}")
    try:
        written = job.run_job(values, ctx)
    except job.InvalidPoint as exc:  # a single run with a bad value: one line, exit status 2
        refuse(str(exc))
    except job.RowNotWritten as exc:  # a full disk or no permission: one line, exit status 1
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    if not ctx.multirun and (failed_points([written]) or nothing_measured([written])):
        sys.exit(1)  # its line said why: docs/usage.md's exit statuses, as for a sweep


def refuse(problem: str) -> NoReturn:
    print(f"error: {problem}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    args = sys.argv[1:]  # as typed (the resume line repeats them)
    quiet.before_hydra(args)  # Hydra's deprecation notes only with verbose=true
    sys.argv += launcher.launcher_overrides(args)  # compose_once found in any install, or Hydra's basic
    interrupts.run(main, args)  # Ctrl-C, SIGTERM: one line with the command that resumes, exit 130/143
