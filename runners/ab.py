"""`python -m runners.ab`: A against B on one machine, measured interleaved in rounds and judged by the rounds.

    python -m runners.ab --backends sdpa chunked seq_len=1024,2048 causal=true,false      # two back ends
    python -m runners.ab --checkouts ../before . backend=sdpa seq_len=1024,2048           # two commits
    python -m runners.ab --pythons venv-a/bin/python venv-b/bin/python backend=sdpa ...   # two torch versions
    python -m runners.ab backend=sdpa seq_len=1024,2048                                   # one command twice

Each round runs A's sweep and B's sweep, each in a fresh process (`python -m runners.sweep -m OVERRIDES` plus what
sets the side apart: `backend=X`, the checkout it runs from, its interpreter), A first in odd rounds and B first
in even ones (AB, BA, AB, ...), so both sides see the machine as it is that minute and a slow drift cancels.
The sweeps stay in OUT/round-NN/A and OUT/round-NN/B, listed in OUT/rounds.csv, which analysis/rounds.py reads
(`python -m analysis.compare OUT` judges them again). After `--rounds` rounds it stops as soon as every matched
point is settled (analysis/rounds.py's `settled`: slower or faster, or the same within a 95% interval inside the
factor), else after `--max-rounds`; then it prints the comparison and writes comparison.csv and comparison.png
into OUT.

A side's sweep runs with report=false and wandb disabled unless the overrides set them: the comparison is the
output. A sweep that refuses its config (exit 2) or stops otherwise stops the A/B, with the tail of its log; a
point that fails is a row like any other (not ok, so not compared).
"""

from __future__ import annotations

import argparse
import csv
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from analysis import ab, rounds

MIN_ROUNDS = rounds.MIN_ROUNDS
MAX_ROUNDS = 16  # a busy CPU leaves rounds out (analysis/rounds.py): room for 6 to count and decide
SET_BY_AB = ("hydra.sweep.dir", "hydra.run.dir")  # each round's folder is the A/B's to choose
LOG_TAIL = 15  # lines of a failed sweep's log shown


@dataclass(frozen=True)
class Side:
    """One side: what sets it apart from the other, and where and how its sweeps run."""

    name: str  # "A" or "B"
    label: str
    cwd: Path  # the checkout its sweeps run from (its code: it leads PYTHONPATH)
    python: str
    overrides: tuple[str, ...] = ()  # its own, after the shared ones: ("backend=sdpa",)
    path: str = ""  # put in front of PYTHONPATH: the checkout, when one was given


def checkout_python(folder: Path) -> str:
    """The interpreter of a checkout: its .venv's when it has one, else this one."""
    venv = folder / ".venv" / "bin" / "python"
    return str(venv) if venv.is_file() else sys.executable


def make_sides(backends: Sequence[str] | None, checkouts: Sequence[str] | None,
               pythons: Sequence[str] | None) -> tuple[Side, Side]:
    """A and B from the command line's options; each labelled by what sets it apart (nothing: the same command)."""
    folders = [Path(c).resolve() for c in checkouts] if checkouts else [Path.cwd()] * 2
    interpreters = list(pythons) if pythons else [checkout_python(f) if checkouts else sys.executable for f in folders]
    labels: list[list[str]] = [[], []]
    for i in range(2):
        if backends:
            labels[i].append(backends[i])
        if folders[0] != folders[1]:
            labels[i].append(str(folders[i]))
        if interpreters[0] != interpreters[1]:
            labels[i].append(f"python {interpreters[i]}")
    return tuple(Side(name, ", ".join(labels[i]) or f"{name}: the same command", folders[i], interpreters[i],
                      (f"backend={backends[i]}",) if backends else (), str(folders[i]) if checkouts else "")
                 for i, name in enumerate("AB"))  # type: ignore[return-value]


def sweep_command(side: Side, overrides: Sequence[str], folder: Path) -> list[str]:
    extra = [f"{key}={value}" for key, value in (("report", "false"), ("wandb.mode", "disabled"))
             if not any(o.lstrip("+~").startswith(f"{key}=") for o in overrides)]
    return [side.python, "-m", "runners.sweep", "-m", *overrides, *side.overrides, f"hydra.sweep.dir={folder}", *extra]


def run_side(side: Side, command: list[str], log: Path) -> int:
    """One side's sweep of one round, its output into `log`; its exit status."""
    env = dict(os.environ)
    if side.path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (side.path, env.get("PYTHONPATH", "")) if p)
    with open(log, "w") as out:
        return subprocess.run(command, cwd=side.cwd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode


class SideFailed(Exception):
    """A round's sweep stopped without its rows (refused config, crash, interrupt): the A/B stops."""


def _ok_rows(folder: Path) -> int:
    try:
        with open(folder / "results.csv", newline="") as f:
            return sum(row.get("status") == "ok" for row in csv.DictReader(f))
    except OSError:
        return 0


def _write_manifest(out: Path, entries: list[dict]) -> None:
    tmp = out / (rounds.MANIFEST + ".tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rounds.MANIFEST_COLUMNS))
        writer.writeheader()
        writer.writerows(entries)
    os.replace(tmp, out / rounds.MANIFEST)  # a comparison read while a round runs sees whole lines only


def run_rounds(sides: tuple[Side, Side], overrides: Sequence[str], out: Path, min_rounds: int = MIN_ROUNDS,
               max_rounds: int = MAX_ROUNDS, run: Callable[[Side, list[str], Path], int] = run_side,
               say: Callable[[str], None] = print) -> ab.Comparison:
    """The rounds (module docstring), then their comparison. `run` runs one side's sweep (tests replace it)."""
    compared = "backend" if sides[0].overrides != sides[1].overrides else "sweep"
    entries: list[dict] = []
    cmp = None
    for number in range(1, max_rounds + 1):
        for order, side in enumerate(sides if number % 2 else sides[::-1], start=1):
            folder = out / f"round-{number:02d}" / side.name
            folder.parent.mkdir(parents=True, exist_ok=True)
            command = sweep_command(side, overrides, folder)
            log = folder.parent / f"{side.name}.log"
            started = time.monotonic()
            code = run(side, command, log)
            seconds = time.monotonic() - started
            entries.append({"round": number, "side": side.name, "order": order, "label": side.label,
                            "folder": folder.relative_to(out).as_posix(), "exit_code": code,
                            "seconds": round(seconds, 2), "compared": compared, "cwd": str(side.cwd),
                            "command": shlex.join(command)})
            _write_manifest(out, entries)
            say(f"round {number}: {side.name} ({side.label}) {seconds:.1f} s, {_ok_rows(folder)} rows ok"
                + ("" if code == 0 else f", exit {code}"))
            if code not in (0, 1):  # 1: some point failed, its row says why; anything else: no rows to trust
                tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL:] if log.is_file() else []
                raise SideFailed("\n".join([f"round {number}, {side.name}: the sweep exited {code} ({log}):", *tail]))
        if number >= min_rounds:
            cmp = rounds.compare_rounds(out)
            done = int(rounds.settled(cmp.matched).sum())
            say(f"after round {number}: {done} of {len(cmp.matched)} points settled")
            if done == len(cmp.matched):
                break
    return cmp if cmp is not None else rounds.compare_rounds(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m runners.ab",
        description="Measure A against B on this machine in interleaved rounds (each round: A's sweep and B's, each "
                    "its own process, in alternating order) and judge each point by how the rounds vary. The sides "
                    "differ by --backends, --checkouts and/or --pythons; with none, the same command runs twice.",
        epilog=f"Rule: {rounds.RULE}. docs/usage.md#comparing")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="the sweep's overrides, as for `python -m runners.sweep -m` (both sides)")
    parser.add_argument("--backends", nargs=2, metavar=("X", "Y"), help="A sweeps backend=X, B backend=Y")
    parser.add_argument("--checkouts", nargs=2, metavar=("DIR_A", "DIR_B"),
                        help="each side's sweeps run from this checkout (its code; its .venv's python if it has one)")
    parser.add_argument("--pythons", nargs=2, metavar=("PY_A", "PY_B"), help="each side's interpreter")
    parser.add_argument("--rounds", type=int, default=MIN_ROUNDS, metavar="N",
                        help=f"rounds before it may stop (at least {MIN_ROUNDS}: fewer give no 95%% interval)")
    parser.add_argument("--max-rounds", type=int, default=MAX_ROUNDS, metavar="N",
                        help="rounds at most, while some point is not settled")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="the rounds' sweeps, rounds.csv, comparison.csv and .png (default sweeps/ab/DATE_TIME)")
    parser.add_argument("--fail-on", default="", metavar="WHAT",
                        help=f"exit 1 when any point is this (comma separated: {', '.join(ab.FAIL_ON)})")
    argv = [a for a in (sys.argv[1:] if argv is None else argv) if a not in ("-m", "--multirun")]  # always a multirun
    args = parser.parse_intermixed_args(argv)
    try:
        fail_on = ab.fail_on_words(args.fail_on)
    except ValueError as exc:
        parser.error(str(exc))
    if args.rounds < MIN_ROUNDS or args.max_rounds < args.rounds:
        parser.error(f"--rounds: expected {MIN_ROUNDS} <= --rounds <= --max-rounds, got {args.rounds} and {args.max_rounds}")
    for override in args.overrides:
        key = override.lstrip("+~").split("=", 1)[0]
        if "=" not in override:
            parser.error(f"{override!r}: expected KEY=VALUE (a sweep override)")
        if key in SET_BY_AB:
            parser.error(f"{key}: set by the A/B (each round's folder under --out)")
        if key == "backend" and args.backends:
            parser.error("backend: given by --backends for each side")
    for folder in args.checkouts or ():
        if not (Path(folder) / "runners" / "sweep.py").is_file():
            parser.error(f"--checkouts: {folder} is not a checkout of this project (no runners/sweep.py)")
    out = Path(args.out or Path("sweeps") / "ab" / time.strftime("%Y-%m-%d_%H-%M-%S")).resolve()
    if rounds.is_rounds_folder(out):
        parser.error(f"--out: {out} already holds rounds: compare them with `python -m analysis.compare {out}`, "
                     "or give another folder")
    out.mkdir(parents=True, exist_ok=True)
    sides = make_sides(args.backends, args.checkouts, args.pythons)
    print(f"A = {sides[0].label}\nB = {sides[1].label}\nrounds -> {out}")
    try:
        cmp = run_rounds(sides, args.overrides, out, args.rounds, args.max_rounds)
    except SideFailed as exc:
        print(f"ab: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"ab: interrupted; the finished rounds compare with `python -m analysis.compare {out}`", file=sys.stderr)
        return 130
    except ValueError as exc:  # no rows to compare
        print(f"ab: {exc}", file=sys.stderr)
        return 2
    print()
    return ab.finish(cmp, out, fail_on)


if __name__ == "__main__":
    sys.exit(main())
