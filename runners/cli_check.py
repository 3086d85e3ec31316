"""The command line's keys and names, checked before Hydra composes anything.

Hydra refuses a key the config does not hold (`seqlen=512`, without `+`) with its own advice and an
unknown group option (`precision=float16`) with its config search path, and a multirun of
`backend=naive,chunkd` measures the naive points before the job that asks for `chunkd` stops it.
So `python -m runners.sweep` reads its overrides here first (Hydra's own override parser: no
composition) and refuses, in one line per bad value, exit status 2:
- a key that nothing reads: `seqlen: unknown key; did you mean seq_len?` (with or without `+`);
- a group option with no file: `precision: expected one of ..., got 'float16'; did you mean fp16?`, and a
  back end the registry does not know (selfattn.backends.describe_name: `backend=chunkd`, with the
  nearest name);
for every value of every sweep (`a,b`, `range()`, `choice()`) and every grid of an experiment
(`grids` in conf/experiment/*.yaml). Only names are judged here; a value that only a point can
judge (seq_len=0, a shape its back end cannot take) stays an `invalid` or `unsupported` row.
Hydra's own overrides (hydra.*, hydra/launcher=..., flags) pass through untouched.
"""

from __future__ import annotations

import sys
from dataclasses import fields
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, cast

from runners import cli_syntax
from selfattn.fields import config_fields, nearest, unknown_key

LINE_MAX_CHARS = 400  # of a refusal; values inside are cut first (selfattn.fields.shown)
GROUPS = ("backend", "precision", "experiment")  # config groups of conf/ whose options the command line names


def conf_dir() -> Path | None:
    """conf/ of a checkout, else the copy a regular install carries as the package selfattn_conf."""
    here = Path(__file__).resolve().parents[1] / "conf"
    if (here / "config.yaml").is_file():
        return here
    import importlib.util

    spec = importlib.util.find_spec("selfattn_conf")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


@lru_cache(maxsize=None)
def group_options(group: str) -> tuple[str, ...]:
    """A config group's options by name: its YAML files (conf/experiment/quick.yaml -> quick), and those Hydra's
    ConfigStore holds (runners.config.register_resolvers): the precisions and the built-in back ends; back ends in
    the registry's order (the order of every table), the rest sorted."""
    root = conf_dir()
    names = sorted(p.stem for p in (root / group).glob("*.yaml")) if root else []
    if group == "precision":  # the one list of precisions
        from selfattn.precision_names import PRECISIONS

        names = sorted({*names, *PRECISIONS})
    if group == "backend":  # the built-ins, from the registry's names
        from selfattn.backends import BACKEND_NAMES

        names = [*BACKEND_NAMES, *(n for n in names if n not in BACKEND_NAMES)]
    return tuple(names)


# torch's names for the precisions, which a user may type first: only for the hint
_SPELLINGS = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16", "float32": "fp32", "float": "fp32",
              "float64": "fp64", "double": "fp64"}


def is_backend_name(name: str) -> bool:
    """A back end the command line may name: the registry's own answer (selfattn.backends.describe_name:
    a built-in, an installed entry point, or a well-formed path `module:function` whose name collides
    with none). Cheap: no plugin is imported here."""
    from selfattn.backends import describe_name

    return describe_name(name) is None


def missing_file(name: str) -> str:
    """'' unless `name` is a file path plugin whose file does not exist (refused here rather than as an
    `unsupported` row per point: a typo in a path is the command line's, like a typo in a name)."""
    import os

    from selfattn.backends.discovery import file_of, is_file_path

    if not is_file_path(name) or os.path.isfile(file_of(name)):
        return ""
    file = name.rsplit(":", 1)[0]
    where = "" if os.path.isabs(file) else f" (relative to {os.getcwd()})"
    return f"backend: {name}: no such file {file}{where}"


def same_name_paths(values: Iterable[Any]) -> list[str]:
    """One line per name that two different path plugins share (`a:attn`, `b/c.py:attn`): rows, figures and
    point ids carry a path plugin's function name, so the second would resume as the first ("already
    measured"). Refused before anything runs; the same function spelt twice (`./a.py:f`, `a.py:f`) is one."""
    from selfattn.backends.discovery import is_path, path_name, same_target

    by_name: dict[str, list[str]] = {}
    for value in values:
        value = value.get("name") if isinstance(value, Mapping) else value
        if isinstance(value, str) and is_path(value):
            paths = by_name.setdefault(path_name(value), [])
            if not any(same_target(value, seen) for seen in paths):
                paths.append(value)
    return [f"backend: {' and '.join(paths)} are both named {name} (a path plugin is named by its function, and "
            "rows and point ids carry that name); rename one of the functions, or run them in two sweeps"
            for name, paths in by_name.items() if len(paths) > 1]


def options_in(group: str, extra: Sequence[Path]) -> tuple[str, ...]:
    """The group's options: conf/'s, then those of the folders the command line adds to Hydra's search path."""
    more = [p.stem for root in extra for p in sorted((Path(root) / group).glob("*.yaml"))]
    return tuple(dict.fromkeys([*group_options(group), *more]))


def check_name(group: str, value: Any, extra: Sequence[Path] | None = ()) -> str:
    """'' when `value` names an option of `group`, else the one-line problem. `extra`: folders added to
    Hydra's search path (their group folders hold options too); None: a search path that cannot be read
    cheaply (pkg://...), so any name passes and Hydra judges it."""
    if extra is None or (value is None and group == "experiment"):
        return ""
    if isinstance(value, Mapping):  # a grid's {name: naive, option: ...}
        value = value.get("name")
    name = str(value)
    options = options_in(group, extra)
    if group == "backend":  # the registry's own line: what is known, and the nearest name
        from selfattn.backends import describe_name

        return "" if name in options else (describe_name(name) or missing_file(name))
    if name in options:
        return ""
    allowed = ", ".join(options)
    near = _SPELLINGS.get(name.lower()) if group == "precision" else None
    near = near or nearest(name, options)
    return f"{group}: expected one of {allowed}, got {name!r}" + (f"; did you mean {near}?" if near else "")


def known_keys(backends: Iterable[str]) -> list[str]:
    """Every key a config may hold; `backend.*` options of the built-in back ends named."""
    from selfattn.backends import BACKEND_NAMES

    options = {f"backend.{key}" for name in backends if name in BACKEND_NAMES for key in builtin_options(name)}
    return [k for k in all_keys() if not k.startswith("backend.") or k in options or k == "backend.name"]


def all_keys() -> list[str]:
    """Every key a config may hold (runners.config.known_keys), the built-ins' options from their torch-free Options."""
    from runners.config import known_keys as config_keys

    return config_keys(builtin_options)


@lru_cache(maxsize=None)
def builtin_options(name: str) -> tuple[str, ...]:
    """A built-in back end's option keys, from its `Options` in selfattn/backends/options/ (declared without torch,
    so a typo is refused before torch has imported: seconds); none for a built-in without such a module."""
    from selfattn.backends.options import builtin_options_type

    options = builtin_options_type(name)
    return tuple(f.name for f in config_fields(options)) if options is not None else ()


@lru_cache(maxsize=None)
def _plain_keys() -> frozenset[str]:
    """The keys that need no back end's module to know (the axes, the runner's, budget.*, wandb.*)."""
    from runners.config import SECTIONS, RunnerConf
    from selfattn.point import AXES

    sections = {f"{name}.{f.name}" for name, cls in SECTIONS.items() for f in fields(cls)}
    return frozenset({*AXES, *(f.name for f in fields(RunnerConf)), *sections, "backend.name", "precision.name"})


def backend_options(name: str) -> tuple[frozenset[str], str]:
    """Back end `name`'s option keys (`backend.<field>`) and, for a plugin that cannot be loaded, why.
    A plugin is imported here, and only when the command line sets a `backend.*` key; a built-in's keys are
    read from its torch-free Options (builtin_options)."""
    from selfattn.backends import BACKEND_NAMES, get_backend

    if name in BACKEND_NAMES:
        return frozenset(f"backend.{key}" for key in builtin_options(name)), ""
    try:
        entry = get_backend(name)
    except ValueError:  # not a back end: its name's own problem is reported
        return frozenset(), ""
    why = f"backend {entry.name} ({entry.origin}) cannot be used: {entry.error}" if entry.broken else ""
    return frozenset(f"backend.{f.name}" for f in config_fields(entry.options_type)), why


def check_option(key: str, backends: Sequence[str], every: bool) -> str:
    """'' when back-end option `key` is one of `backends`' (of each of them when `every`: Hydra composes every
    job of a sweep with it, and a back end without the key stops the sweep), else the one-line problem."""
    names = list(dict.fromkeys(backends))
    has = {name: backend_options(name) for name in names}
    lacking = [name for name in names if key not in has[name][0]]
    if not lacking or (not every and len(lacking) < len(names)):
        return ""
    why = "; ".join(has[name][1] for name in lacking if has[name][1])
    why = f" ({why})" if why else ""
    owners = [n for n in names if n not in lacking]
    owners += [n for n in group_options("backend") if n not in names and key in backend_options(n)[0]]
    if owners:
        return (f"{key}: not an option of {', '.join(lacking)}; "
                f"{', '.join(owners)} {'has' if len(owners) == 1 else 'have'} it{why}")
    candidates = sorted({k for name in names for k in has[name][0]})
    if not candidates:
        return f"{key}: not an option of {', '.join(names)}, which {'has' if len(names) == 1 else 'have'} none{why}"
    return f"{unknown_key(key, candidates)}{why}"


def check_key(key: str, backends: Sequence[str], every: bool = False) -> str:
    """'' when the config reads `key` (a top-level key or a section's), else the one-line problem. A
    `backend.*` key must be an option of one of `backends`, or of each of them when `every`."""
    if key in GROUPS:
        return ""
    if key.split(".", 1)[0] in FUNCTION_GROUPS:  # a function's parameter: function_key_problem
        return ""
    if key.startswith("grids.") or key == "grids":  # the union of grids: its keys are checked as a grid's
        return ""
    if key in _plain_keys():
        return ""
    if key.startswith("backend.") and (every or any(name not in group_options("backend") for name in backends)):
        return check_option(key, backends, every)  # a plugin's options are its own Options' fields
    known = known_keys(backends)
    if key in known:
        return ""
    if key in all_keys():  # a built-in's option, but not of the back ends this command runs
        owners = [n for n in group_options("backend") if key in known_keys([n])]
        return (f"{key}: not an option of {', '.join(dict.fromkeys(backends))}; "
                f"{', '.join(owners)} {'has' if len(owners) == 1 else 'have'} it")
    return str(unknown_key(key, all_keys()))


FUNCTION_GROUPS = ("mask", "score_mod")  # selfattn/mods/: `mask=NAME mask.PARAM=VALUE`


def function_name_problem(kind: str, name: str) -> str:
    """'' when `name` is a mask (score) function the sweep can load, else the one-line problem."""
    from selfattn.mods.discovery import resolve

    if name == "none":
        return ""
    try:
        resolve(kind, name)
    except ValueError as exc:
        return str(exc)
    return ""


def function_key_problem(key: str, named: Sequence[str]) -> str:
    """'' when `mask.<param>` (or `score_mod.<param>`) is a parameter of every function the command line names
    (conf/config.yaml's default: none), else the one-line problem from the function's own check."""
    from selfattn.mods.discovery import resolve

    kind, _, param = key.partition(".")
    for name in dict.fromkeys(named or ["none"]):
        if name == "none":
            return f"{key}: {kind}=none takes no parameters; name a {kind} first ({kind}=NAME)"
        try:
            resolve(kind, name).check_options({param: None})
        except ValueError as exc:
            if "unknown key" in str(exc) or "takes no parameters" in str(exc):
                return str(exc)
        except Exception:  # a parameter's type check on the placeholder: the key itself is known
            pass
    return ""


def _values(override: Any) -> list[Any]:
    """The values an override sets: each of a sweep's, else its one value. The values themselves, not
    their re-parseable strings (those escape ':', so `my_pkg.attn:fast` would read `my_pkg.attn\\:fast`)."""
    try:
        if override.is_sweep_override():
            return list(override.sweep_iterator())
        return [override.value()]
    except Exception:  # a sweep Hydra itself cannot expand: its own message says why, later
        return []


def experiment_grids(name: str, extra: Sequence[Path] = ()) -> list[dict[str, Any]]:
    """experiment/NAME.yaml's `grids` (each a {key: [values]}), read without resolving anything."""
    from omegaconf import DictConfig, OmegaConf

    files = [Path(root) / "experiment" / f"{name}.yaml" for root in [conf_dir(), *extra] if root is not None]
    found = [f for f in files if f.is_file()]
    if not found:
        return []
    node = OmegaConf.load(found[-1])  # a search path's file wins over conf/'s, as in Hydra
    grids = node.get("grids") if isinstance(node, DictConfig) else None
    if grids is None:
        return []
    container = OmegaConf.to_container(grids, resolve=False)
    return list(container.values()) if isinstance(container, Mapping) else list(cast(Iterable[dict[str, Any]], container))


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


PLUGIN_SOURCE = "selfattn-backend://"  # conf/config.yaml's search path entry behind backend=<plugin>


def searchpath_of(parsed: Sequence[Any]) -> list[str] | None:
    """The entries of the command line's `hydra.searchpath=[...]` (which replaces conf/config.yaml's), or None."""
    entries = None
    for o in parsed:
        if o.key_or_group == "hydra.searchpath" and not o.is_delete():
            value = o.value()
            entries = [str(e) for e in (value if isinstance(value, list) else [value])]
    return entries


def search_dirs(parsed: Sequence[Any], config_dir: str | None = None) -> list[Path] | None:
    """Folders the command line adds to Hydra's search path (`hydra.searchpath=[file://...]`, `--config-dir`);
    None when one of them is not a plain folder (pkg://...). The plugin source holds only plugins' options,
    which the registry judges: no folder, and no reason to stop checking."""
    dirs = [Path(config_dir)] if config_dir else []
    for entry in searchpath_of(parsed) or []:
        if entry.startswith(PLUGIN_SOURCE):
            continue
        if not entry.startswith("file://"):
            return None
        dirs.append(Path(entry[len("file://"):]))
    return dirs


def problems(overrides: Sequence[str], config_dir: str | None = None) -> list[str]:
    """Every bad key and name in `overrides` (and in the grids of the experiments they pick), each one line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception:  # a syntax error: one line per override the grammar cannot read, naming its key
        return cli_syntax.problems(overrides)  # (none found alone: Hydra says where, in its own words)
    extra = search_dirs(parsed, config_dir)
    ours = [o for o in parsed if not o.is_hydra_override() and "/" not in o.key_or_group and o.package is None]
    named: dict[str, list[Any]] = {g: [] for g in GROUPS}
    for o in ours:
        if o.key_or_group in GROUPS and not o.is_delete():
            named[o.key_or_group] += [v for v in _values(o) if v is not None]
    found: list[str] = cli_syntax.path_problems(parsed)
    top = {k.split(".", 1)[0] for k in _plain_keys()} | set(GROUPS) | {"hydra"}
    for o in ours:
        for value in _values(o):
            if problem := cli_syntax.interpolation_problem(o.key_or_group, value, top):
                found.append(problem)
    for group in GROUPS:
        for value in dict.fromkeys(str(v) for v in named[group]):
            if problem := check_name(group, value, extra):
                found.append(problem)
    grid_backends = [b for experiment in dict.fromkeys(str(v) for v in named["experiment"])
                     if extra is not None and experiment in options_in("experiment", extra)
                     for grid in experiment_grids(experiment, extra) if isinstance(grid, Mapping)
                     for b in _as_list(grid.get("backend", []))]
    found += same_name_paths([*named["backend"], *grid_backends])
    searchpath = searchpath_of(parsed)
    if searchpath is not None and not any(e.startswith(PLUGIN_SOURCE) for e in searchpath):
        # Hydra would compose the built-ins' jobs, then stop at "Could not find 'backend/<plugin>'"
        files = options_in("backend", extra or [])  # a built-in, or a YAML of one of the user's folders
        plugins = [n for n in dict.fromkeys(str(v) for v in named["backend"]) if n not in files and is_backend_name(n)]
        if plugins:
            found.append(f"backend: {', '.join(plugins)} {'is a plugin' if len(plugins) == 1 else 'are plugins'}, "
                         f"named through the search path entry {PLUGIN_SOURCE}, which hydra.searchpath="
                         f"{searchpath} leaves out: add it (hydra.searchpath=[{PLUGIN_SOURCE},...])")
        for kind in FUNCTION_GROUPS:  # every function but none is an option the source makes (selfattn/mods/)
            names = [n for n in dict.fromkeys(str(v) for o in ours if o.key_or_group == kind for v in _values(o)
                                              if v is not None) if n != "none"]
            if names:
                found.append(f"{kind}: {', '.join(names)} named through the search path entry {PLUGIN_SOURCE}, "
                             f"which hydra.searchpath={searchpath} leaves out: add it "
                             f"(hydra.searchpath=[{PLUGIN_SOURCE},...])")
    # backend.* keys: options of the back ends named (conf/config.yaml's default: naive); an experiment
    # may pick others in its grids or defaults, so with one every built-in's options are keys
    backends = [str(v) for v in named["backend"]] or ["naive"]
    if named["experiment"]:
        backends += list(group_options("backend"))
    functions = {kind: [str(v) for o in ours if o.key_or_group == kind for v in _values(o) if v is not None]
                 for kind in FUNCTION_GROUPS}
    for kind, values in functions.items():  # a function's name: the registry's own line (selfattn/mods/discovery.py)
        for value in dict.fromkeys(values):
            if problem := function_name_problem(kind, value):
                found.append(problem)
    for o in ours:
        kind = o.key_or_group.split(".", 1)[0]
        if kind in FUNCTION_GROUPS and "." in o.key_or_group and not named["experiment"]:
            if problem := function_key_problem(o.key_or_group, functions[kind]):
                found.append(problem)
    for o in ours:  # `+backend.x` adds the key where it is missing (the point refuses it there)
        every = not named["experiment"] and not o.is_add() and not o.is_force_add()
        if problem := check_key(o.key_or_group, backends, every):
            found.append(problem)
    for experiment in dict.fromkeys(str(v) for v in named["experiment"]):
        if extra is not None and experiment in options_in("experiment", extra):
            grids = experiment_grids(experiment, extra)
            found += grid_problems(grids, extra)
            found += overridden_by_grids(experiment, grids, ours)
    return list(dict.fromkeys(found))


def overridden_by_grids(experiment: str, grids: Sequence[Mapping[str, Any]], ours: Sequence[Any]) -> list[str]:
    """The command line's keys an experiment's grids set: refused, since each grid point's own value wins.

    The one rule for `experiment=X key=value`: a key reaches every point of X (Hydra puts the command line over
    X's file and its sweeper params), or, where X's grids set it per point, is refused here; never ignored."""
    setters = {str(key) for grid in grids if isinstance(grid, Mapping) for key in grid}
    found = []
    for o in ours:
        if o.is_delete() or o.key_or_group not in setters:
            continue
        key = o.key_or_group
        found.append(f"{key}: experiment={experiment}'s grids set it for each of their points, so {key}= on the "
                     f"command line would change nothing; leave it out, or sweep {key} without experiment={experiment}")
    return found


def grid_problems(grids: Sequence[Mapping[str, Any]], extra: Sequence[Path] = ()) -> list[str]:
    """Unknown keys and names in an experiment's grids (each grid: {key: [values]})."""
    found: list[str] = []
    for grid in grids:
        if not isinstance(grid, Mapping):
            continue
        backends = _as_list(grid.get("backend", ["naive"]))
        for group in ("backend", "precision"):
            for value in _as_list(grid.get(group, [])):
                if isinstance(value, str) and value.startswith("${"):
                    continue  # an interpolation: resolved per job, judged there
                if problem := check_name(group, value, extra):
                    found.append(problem)
        names = [b.get("name") if isinstance(b, Mapping) else b for b in backends]
        for key in grid:
            if problem := check_key(str(key), [str(n) for n in names]):
                found.append(problem)
        for backend in backends:  # {name: naive, scale_at: query}: its options are keys too
            if isinstance(backend, Mapping):
                for option in backend:
                    if option != "name" and (problem := check_key(f"backend.{option}", [str(backend.get("name"))])):
                        found.append(problem)
    return found


def overrides_of(argv: Sequence[str]) -> list[str] | None:
    """The overrides Hydra will read from `argv`; None when there is nothing to check (--help, another config).
    `--config-dir` is read by `config_dir_of`."""
    from runners import hydra_private

    parser = hydra_private.args_parser()
    if parser is None:  # a Hydra other than 1.3: its composition and each job's check refuse bad values instead
        return None
    try:
        args = parser.parse_args(list(argv))
    except SystemExit:  # argparse's own error: Hydra prints it
        return None
    if args.help or args.hydra_help or args.shell_completion or args.config_name not in (None, "config"):
        return None
    return list(args.overrides)


def config_dir_of(argv: Sequence[str]) -> str | None:
    from runners import hydra_private

    parser = hydra_private.args_parser()
    try:
        return None if parser is None else parser.parse_args(list(argv)).config_dir
    except SystemExit:
        return None


def flag_problems(argv: Sequence[str]) -> list[str]:
    """Flags Hydra takes one at a time: -m with --cfg, --info or --shell-completion (Hydra's own refusal is a
    traceback)."""
    from runners import hydra_private

    parser = hydra_private.args_parser()
    try:
        args = None if parser is None else parser.parse_args(list(argv))
    except SystemExit:  # argparse's own error: Hydra prints it
        return []
    if args is None or not args.multirun:
        return []
    other = "--cfg" if args.cfg else "--info" if args.info else "--shell-completion" if args.shell_completion else ""
    if not other:
        return []
    return [f"{other}: shows one run's config or Hydra's set-up, so it takes no -m (--multirun); "
            f"drop -m to see what {other} shows, or {other} to run the sweep"]


def refuse_typos(argv: Sequence[str]) -> None:
    """Exit with status 2 and one line per bad key or name, before Hydra composes anything."""
    overrides = overrides_of(argv)
    found = flag_problems(argv) + (problems(overrides, config_dir_of(argv)) if overrides else [])
    if not found:
        return
    for problem in found:  # each one line, however long the value it quotes
        problem = " ".join(problem.split())
        print(f"error: {problem if len(problem) <= LINE_MAX_CHARS else problem[:LINE_MAX_CHARS] + '...'}", file=sys.stderr)
    if len(found) > 1:
        print(f"nothing was measured: {len(found)} bad values on the command line", file=sys.stderr)
    sys.exit(2)
