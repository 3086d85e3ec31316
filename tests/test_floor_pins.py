"""scripts/floor_pins.py: what the lowest-versions CI stage installs is each direct dependency at its floor."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("floor_pins", REPO / "scripts" / "floor_pins.py")
floor_pins = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(floor_pins)


def _pyproject(tmp_path: Path, dependencies: list[str], test: list[str]) -> Path:
    path = tmp_path / "pyproject.toml"
    path.write_text("[project]\nname = 'x'\ndependencies = " + repr(dependencies) + "\n"
                    "[project.optional-dependencies]\ntest = " + repr(test) + "\n")
    return path


def test_each_requirement_becomes_its_floor_and_a_repeated_name_its_highest(tmp_path):
    path = _pyproject(tmp_path, ["torch>=2.13", "pandas>=2.1,<4", "Hydra_Core[extra] >= 1.3 , <1.4",
                                 "numpy>=1.24; python_version >= '3.10'"], ["pytest>=7.4", "numpy>=1.26"])
    assert floor_pins.floor_pins(path, ["test"]) == ["torch==2.13", "pandas==2.1", "hydra-core==1.3",
                                                     "numpy==1.26", "pytest==7.4"]
    assert floor_pins.floor_pins(path, []) == ["torch==2.13", "pandas==2.1", "hydra-core==1.3", "numpy==1.24"]


def test_a_requirement_without_a_floor_is_refused_by_name(tmp_path):
    path = _pyproject(tmp_path, ["torch>=2.13", "seaborn"], [])
    with pytest.raises(ValueError, match="'seaborn': no '>=' floor"):
        floor_pins.floor_pins(path, [])
    with pytest.raises(ValueError, match=r"extras \['gpu'\]"):
        floor_pins.floor_pins(_pyproject(tmp_path, [], []), ["gpu"])


def test_the_projects_own_requirements_all_have_floors_and_the_stage_reads_them():
    pins = floor_pins.floor_pins(REPO / "pyproject.toml", ["test", "triton"])
    names = [pin.split("==")[0] for pin in pins]
    assert {"torch", "numpy", "pandas", "matplotlib", "hydra-core", "submitit", "pytest", "scipy", "seaborn"} <= set(names)
    assert len(names) == len(set(names))
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "floor_pins.py"), str(REPO / "pyproject.toml"),
                           "test", "triton"], capture_output=True, text=True, check=True)
    assert done.stdout.split() == pins
    # CI runs the stage, and blocking: no `|| ...` turns its failure into a line of output
    runs = [line for line in (REPO / ".ci" / "run").read_text().splitlines()
            if "scripts/ci_lowest.sh" in line and not line.lstrip().startswith("#")]
    assert runs and all("||" not in line for line in runs), runs


def test_ci_main_stage_installs_into_a_fresh_venv_of_its_own():
    """The main stage's installs and tests run in a venv .ci/run makes and activates first, so that packages put on
    the machine by hand cannot hide a missing install step (the lowest stage makes its own the same way)."""
    lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    made = next(i for i, line in enumerate(lines) if re.search(r"python3 -m venv \"?\$ci_venv", line))
    active = next(i for i, line in enumerate(lines) if line.startswith("export ") and "PATH=$ci_venv/bin:" in line)
    installs = [i for i, line in enumerate(lines) if "pip install" in line]
    tests = [i for i, line in enumerate(lines) if "-m pytest" in line]
    assert installs and tests and made < active < min(installs + tests), lines
