"""The config group `backend`'s options for plugins: `backend=my_pkg.attn:fast`, `backend=<entry point>`.

A built-in back end's option is in Hydra's ConfigStore (runners/config.py). A plugin has none there, so this config
source (scheme `selfattn-backend://`, on the search path through conf/config.yaml's `hydra.searchpath`)
answers `backend/<name>` for every name that is not a built-in: `{name: <name>, <option>: <default>, ...}`,
its options read from the plugin's own `Options` (in the sweep's process through a child that describes them:
selfattn/backends/description.py; a name that is no back end: `{name: <name>}`, which the
runner refuses with the reason, selfattn.backends.describe_name). So
`backend=my_pkg.attn:fast`, `-m backend=sdpa,my_pkg.attn:fast` and `backend.some_option=3` compose as a
built-in's do, in every process that composes a job's config (the local launchers, and a SLURM job,
which composes its own and so imports the plugin itself). A plugin that fails to import gets
`{name: <name>}`: its points become `unsupported` rows naming the error (selfattn/backends/registry.py).

The same source answers the groups `mask` and `score_mod` (selfattn/mods/), which have no files at all:
`mask=<name>` is `{name: <name>, <parameter>: <default>, ...}` for a built-in, an entry point or a path alike,
its parameters read from the function's declaration or signature, so `mask=prefix_lm mask.prefix=64` composes;
a name that is none is `{name: <name>}`, which the runner refuses with the reason.

Hydra takes config sources from its hydra_plugins namespace package, hence this folder (Hydra glue, like
hydra_plugins/selfattn_launcher/). Selfattn is imported only when a plugin's config is asked for.
"""

from __future__ import annotations

from typing import Any, List, Optional

from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigResult, ConfigSource
from omegaconf import OmegaConf

GROUP = "backend"
FUNCTION_GROUPS = ("mask", "score_mod")  # selfattn/mods/: every option generated, the built-ins' too


def _group_and_name(config_path: str) -> tuple[str, str] | None:
    """`backend/my_pkg.attn:fast(.yaml)` -> (backend, `my_pkg.attn:fast`), `backend/plugins/attn.py:fast` ->
    (backend, `plugins/attn.py:fast`) (a back end's file keeps its folders; `backend=/abs/attn.py:fast` arrives as
    `backend//abs/attn.py:fast`); None for another group, or a folder that names no back end's file (mask and
    score functions are named by module path only: selfattn/mods/discovery.py)."""
    group, _, name = config_path.rstrip("/").partition("/")
    name = name[: -len(".yaml")] if name.endswith(".yaml") else name
    if group not in (GROUP, *FUNCTION_GROUPS) or not name:
        return None
    if "/" in name and not (group == GROUP and _is_file_path(name)):
        return None
    return group, name


def _is_file_path(name: str) -> bool:
    from selfattn.backends.discovery import is_file_path

    return is_file_path(name)


def function_node(kind: str, name: str) -> dict[str, Any]:
    """The group option of mask or score function `name`: its name and every parameter at its default."""
    from selfattn.mods.discovery import resolve

    node: dict[str, Any] = {"name": name}
    if name == "none":
        return node
    try:
        params = resolve(kind, name).params
    except ValueError:  # not a function's name: the runner refuses it with its reason
        return node
    for param in params:
        value = param.default
        if value is None or isinstance(value, (bool, int, float, str)):
            node[param.name] = value
    return node


def plugin_node(name: str) -> dict[str, Any]:
    """The group option of plugin `name`: its name and every option at its default."""
    from selfattn.backends import get_backend
    from selfattn.fields import config_fields, default_of

    node: dict[str, Any] = {"name": name}
    try:
        entry = get_backend(name)  # a plugin that fails to import is a broken Backend: no options
    except ValueError:  # not a back end's name: the runner refuses it with its reason
        return node
    for f in config_fields(entry.options_type):
        value = default_of(f)
        node[f.name] = value if value is None or isinstance(value, (bool, int, float, str)) else str(value)
    return node


class SelfattnBackendSource(ConfigSource):
    """`backend/<plugin>`: generated from the plugin, never a file."""

    @staticmethod
    def scheme() -> str:
        return "selfattn-backend"

    def load_config(self, config_path: str) -> ConfigResult:
        found = _group_and_name(config_path)
        assert found is not None and self.is_config(config_path), config_path
        group, name = found
        node = plugin_node(name) if group == GROUP else function_node(group, name)
        return ConfigResult(config=OmegaConf.create(node), path=f"{self.scheme()}://{self.path}",
                            provider=self.provider, header={"package": None})

    def available(self) -> bool:
        return True

    def is_group(self, config_path: str) -> bool:
        return config_path.rstrip("/") in (GROUP, *FUNCTION_GROUPS)

    def is_config(self, config_path: str) -> bool:
        """Every name that is not a built-in's (those are files): whether it is a back end at all is the
        runner's to say (runners/config.py, selfattn.backends.describe_name), as for any value: one line
        and exit status 2 in a single run, an `invalid` row in a sweep that goes on, not Hydra's
        "Could not find 'backend/...'" for the whole sweep."""
        found = _group_and_name(config_path)
        if found is None:
            return False
        if found[0] in FUNCTION_GROUPS:
            return True
        name = found[1]
        from selfattn.backends import BUILTIN_NAMES

        return name not in BUILTIN_NAMES

    def list(self, config_path: str, results_filter: Optional[ObjectType]) -> List[str]:
        if config_path.rstrip("/") in FUNCTION_GROUPS and results_filter != ObjectType.GROUP:
            from selfattn.mods.discovery import names

            return list(names(config_path.rstrip("/")))
        if config_path.rstrip("/") != GROUP or results_filter == ObjectType.GROUP:
            return []
        from selfattn.backends import BUILTIN_NAMES, backend_names

        return sorted(name for name in backend_names() if name not in BUILTIN_NAMES)
