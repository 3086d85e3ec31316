"""The results.csv schema (COLUMNS, SCHEMA_VERSION, STATUSES) from selfattn/results.py.

That module is pure Python, but importing it as `selfattn.results` first runs the
`selfattn` package's __init__, which loads torch: seconds of start-up the analysis never
needs (it reads only CSV files). So the file is loaded on its own, unless selfattn is
already imported (e.g. the report called in-process at the end of a sweep).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def _results_module() -> ModuleType:
    if "selfattn.results" in sys.modules:
        return sys.modules["selfattn.results"]
    package = importlib.util.find_spec("selfattn")  # locates the package without running its __init__
    if package is None or not package.submodule_search_locations:
        raise ImportError("analysis needs the selfattn package (for the results.csv schema); install this project")
    path = Path(list(package.submodule_search_locations)[0]) / "results.py"
    spec = importlib.util.spec_from_file_location("_selfattn_results_schema", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


_results = _results_module()
COLUMNS: tuple[str, ...] = _results.COLUMNS
SCHEMA_VERSION: int = _results.SCHEMA_VERSION
STATUSES: tuple[str, ...] = _results.STATUSES
