"""Hydra finds the project's plugins (the compose_once launcher, the back-end config source) however the
project is installed, from any folder.

Hydra knows a launcher only if its plugin scan found the class: the scan walks the folders of the
`hydra_plugins` namespace package. A regular install and a checkout on PYTHONPATH (or the current
folder, for `python -m` from the repository root) put hydra_plugins/selfattn_launcher/ in such a
folder; pip's default editable install does not: setuptools' import hook maps the module to the
checkout without adding a folder to the namespace, so the scan never sees it, though it imports.
So the class is imported and registered with Hydra's public `Plugins.register` when the scan missed
it. Should it not import at all (its files missing, a package that makes `hydra_plugins` a regular
package and hides ours, a Hydra other than the 1.3 whose internals it uses, its WHY_NOT), the command line gets Hydra's
own launcher (`hydra/launcher=basic`) and a one-line notice of what is lost, so the sweep still runs.
The config source that answers `backend=<plugin>` (hydra_plugins/selfattn_backends/, scheme
`selfattn-backend://` on conf/config.yaml's search path) is found and registered the same way; should it not
load, the search path is emptied (`hydra.searchpath=[]`) with a notice: the built-ins still run, plugins
cannot be named.
"""

from __future__ import annotations

import importlib
import sys
from typing import Sequence

from hydra.core.plugins import Plugins
from hydra.plugins.config_source import ConfigSource
from hydra.plugins.launcher import Launcher

# conf/hydra/launcher/compose_once.yaml's _target_ (tests/runners/test_launcher.py checks they agree)
LAUNCHER = "hydra_plugins.selfattn_launcher.compose_once.ComposeOnceLauncher"
FALLBACK = "hydra/launcher=basic"
# the config source behind `backend=<plugin>` (conf/config.yaml's hydra.searchpath names its scheme)
SOURCE = "hydra_plugins.selfattn_backends.backend_source.SelfattnBackendSource"
SOURCE_FALLBACK = "hydra.searchpath=[]"


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _register(dotted: str, kind: type) -> str | None:
    """Make the plugin class `dotted` (module.Class) known to Hydra's registry as a `kind`: None once it is,
    else why it cannot be (one line)."""
    plugins = Plugins.instance()  # the scan runs here, once per process (Hydra's main would run it anyway)
    if any(_qualname(found) == dotted for found in plugins.discover(kind)):
        return None  # the scan saw it: a regular install, or a checkout on sys.path
    module, _, name = dotted.rpartition(".")
    try:
        loaded = importlib.import_module(module)
        if why_not := getattr(loaded, "WHY_NOT", None):  # it checked the Hydra it was written for (compose_once)
            return str(why_not)
        cls = getattr(loaded, name)
    except (ImportError, AttributeError) as exc:  # no such module, or a name it imports from Hydra is gone
        return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    plugins.register(cls)
    return None


def register_launcher() -> str | None:
    """Make LAUNCHER known to Hydra's plugin registry: None once it is, else why it cannot be."""
    return _register(LAUNCHER, Launcher)


def register_source() -> str | None:
    """Make SOURCE known to Hydra's plugin registry: None once it is, else why it cannot be."""
    return _register(SOURCE, ConfigSource)


def launcher_overrides(args: Sequence[str]) -> list[str]:
    """Overrides to add to the command line `args`: none when the project's plugins are registered (this
    registers them); else Hydra's basic launcher (unless `args` pick a launcher themselves) and an empty
    search path, each with a notice."""
    added = []
    why_not = register_launcher()
    if why_not is not None and not any(a.lstrip("+~").startswith("hydra/launcher") for a in args):
        print(f"note: the compose_once launcher did not load ({why_not}); multiruns use Hydra's basic launcher, "
              "which composes every job's config from the YAML files again (0.16 s a job with experiment=quick)",
              file=sys.stderr)
        added.append(FALLBACK)
    why_not = register_source()
    if why_not is not None and not any(a.lstrip("+~").startswith("hydra.searchpath") for a in args):
        print(f"note: the back-end config source did not load ({why_not}); the built-in back ends run, "
              "plugins (backend=<entry point> or module:function) cannot be named", file=sys.stderr)
        added.append(SOURCE_FALLBACK)
    return added
