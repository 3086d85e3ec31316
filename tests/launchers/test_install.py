"""Every supported install runs `python -m runners.sweep` from any folder: a regular install (a wheel),
pip's default editable install, and a checkout on PYTHONPATH.

The wheel is built from a copy of the working tree (offline: no build isolation, no index) and
installed with --no-deps into a temporary target folder; the editable install goes from the same copy
into a fresh virtual environment that sees the system site-packages (torch, Hydra). Every run then
starts in a folder outside the repository: the project's packages must come from the install, the
configs from the wheel's `selfattn_conf` package (or the copy's conf/), Hydra's launcher plugin must be
found without the current folder on sys.path, and the sweep folders must land under the folder the run
starts from, never inside the install.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("selfattn", "runners", "analysis", "hydra_plugins/selfattn_launcher")  # source folders installed under their own names
CONF_PACKAGE = "selfattn_conf"                  # conf/ installs under this name (pyproject.toml)
TINY = ["experiment=smoke", "device=cpu"]  # one point of 64 keys and one head, the least effort
# What a copy of the tree needs to build; everything here is output or local state.
NOT_SOURCES = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                                     ".benchmarks", ".venv", "venv", "sweeps", "outputs", "multirun", "wandb",
                                     ".submitit", ".gpu_wheels")


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} -> {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _env(path: Path) -> dict[str, str]:
    """The caller's environment with `path` as the only PYTHONPATH entry."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PYTHONPATH": str(path), "HYDRA_FULL_ERROR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def _sweep(*args: str, cwd: Path, env: dict[str, str]) -> str:
    return _run([sys.executable, "-m", "runners.sweep", *args], cwd=cwd, env=env, timeout=120).stdout


def _config_files() -> list[str]:
    files = sorted(p.relative_to(ROOT / "conf").as_posix() for p in (ROOT / "conf").rglob("*.yaml"))
    assert {"config.yaml", "mask/none.yaml", "experiment/quick.yaml",
            "hydra/launcher/slurm_gpu.yaml"} <= set(files)
    return files


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A copy of the working tree: the builds write build/ and *.egg-info there, not in the shared tree."""
    src = tmp_path_factory.mktemp("source") / "src"
    assert ROOT not in src.parents
    shutil.copytree(ROOT, src, ignore=NOT_SOURCES)
    return src


@pytest.fixture(scope="module")
def install(tmp_path_factory, source) -> SimpleNamespace:
    tmp = tmp_path_factory.mktemp("install")
    src, wheels, target, elsewhere = source, tmp / "wheels", tmp / "target", tmp / "elsewhere"
    env = _env(tmp)
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
          "-w", str(wheels), str(src)], cwd=tmp, env=env)
    (wheel,) = wheels.glob("selfattn_bench-*.whl")
    _run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target),
          str(wheel)], cwd=tmp, env=env)
    elsewhere.mkdir()
    return SimpleNamespace(tmp=tmp, src=src, wheel=wheel, target=target, elsewhere=elsewhere, env=_env(target))


def _running_site_packages() -> list[str]:
    """The site-packages folders of the environment running the tests (a venv's own, not its base interpreter's)."""
    paths = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    return sorted(p for p in paths if p and Path(p).is_dir())


@pytest.fixture(scope="module")
def editable(tmp_path_factory, source) -> SimpleNamespace:
    """`pip install -e` (setuptools' import-hook finder, pip's default) into a fresh virtual environment.

    The build runs without isolation (offline), so it uses the setuptools of the environment the README's test
    command installed into: the `test` extra declares the one it needs (bdist_wheel built in). A nested venv's
    --system-site-packages would give the *base* interpreter's packages instead (when the tests run inside a venv,
    as CI's do), whose setuptools may be older and lack bdist_wheel; so the new venv sees the running
    environment's site-packages through a .pth file (plain folders: their own .pth files, such as this
    checkout's editable install, are not processed there)."""
    tmp = tmp_path_factory.mktemp("editable")
    venv, elsewhere = tmp / "venv", tmp / "elsewhere"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp)
    python = str(venv / "bin" / "python")
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=tmp).stdout.strip()
    (Path(purelib) / "_running_environment.pth").write_text("".join(f"{p}\n" for p in _running_site_packages()))
    env = {k: v for k, v in _env(tmp).items() if k != "PYTHONPATH"}  # only the install puts the project on sys.path
    _run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", "-e", str(source)],
         cwd=tmp, env=env)
    elsewhere.mkdir()
    return SimpleNamespace(tmp=tmp, src=source, python=python, elsewhere=elsewhere, env=env)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> SimpleNamespace:
    """The repository itself on PYTHONPATH, run from a folder outside it."""
    elsewhere = tmp_path_factory.mktemp("checkout") / "elsewhere"
    elsewhere.mkdir()
    return SimpleNamespace(src=ROOT, python=sys.executable, elsewhere=elsewhere, env=_env(ROOT))


@pytest.mark.parametrize("kind", ["install", "editable", "checkout"])
def test_multirun_from_another_folder_uses_the_default_launcher(kind, request):
    setup = request.getfixturevalue(kind)
    python = getattr(setup, "python", sys.executable)
    where = setup.elsewhere / "multirun"  # a fresh folder per test: only this run's sweep lands there
    where.mkdir()
    code = "import runners; print(runners.__file__)"
    imported = Path(_run([python, "-c", code], cwd=where, env=setup.env).stdout.strip()).resolve()
    home = setup.target if kind == "install" else setup.src
    assert home in imported.parents, f"runners imported from {imported}, not {home}"
    proc = _run([python, "-m", "runners.sweep", "-m", *TINY, "seq_len=32,64"], cwd=where, env=setup.env, timeout=180)
    assert "compose_once launcher did not load" not in proc.stderr, proc.stderr  # not the fallback
    (results,) = (where / "sweeps" / "smoke").glob("*/results.csv")
    with results.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted((r["status"], r["seq_len"]) for r in rows) == [("ok", "32"), ("ok", "64")], proc.stdout
    # the launcher that ran, as Hydra recorded it for the sweep
    assert "hydra/launcher: compose_once" in (results.parent / "multirun.yaml").read_text()


def test_wheel_holds_every_config_and_module(install):
    names = set(zipfile.ZipFile(install.wheel).namelist())
    missing = [f"{CONF_PACKAGE}/{f}" for f in _config_files() if f"{CONF_PACKAGE}/{f}" not in names]
    # pyproject.toml lists the packages by hand: a new subpackage left out of it shows up here
    missing += [p.relative_to(ROOT).as_posix() for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
                if "__pycache__" not in p.parts and p.relative_to(ROOT).as_posix() not in names]
    assert not missing, f"not in {install.wheel.name}: {missing}"


def test_sdist_holds_every_config(install):
    out = install.tmp / "sdist"
    _run([sys.executable, "-c", f"from setuptools import build_meta; build_meta.build_sdist({str(out)!r})"],
         cwd=install.src, env=install.env)
    (sdist,) = out.glob("selfattn_bench-*.tar.gz")
    names = {n.split("/", 1)[1] for n in tarfile.open(sdist).getnames() if "/" in n}
    assert not [f for f in _config_files() if f"conf/{f}" not in names]


def test_packages_come_from_the_target(install):
    code = "import json, analysis, runners, selfattn, selfattn_conf as c; " \
           "print(json.dumps({m.__name__: m.__file__ for m in (analysis, runners, selfattn, c)}))"
    files = json.loads(_run([sys.executable, "-c", code], cwd=install.elsewhere, env=install.env).stdout)
    for name, file in files.items():
        assert install.target in Path(file).resolve().parents, f"{name} imported from {file}, not the target"


def test_help_lists_the_same_groups_and_experiments_as_the_checkout(install):
    checkout = _env(ROOT)  # the repository's own sources, editable install or not
    assert _sweep("--help", cwd=install.elsewhere, env=install.env) == _sweep("--help", cwd=ROOT, env=checkout)
    # the launcher presets are Hydra's own group: --hydra-help lists them
    launchers = re.search(r"^hydra/launcher: (.*)$", _sweep("--hydra-help", cwd=install.elsewhere, env=install.env), re.M)
    presets = {p.stem for p in (ROOT / "conf" / "hydra" / "launcher").glob("*.yaml")}
    assert launchers and presets <= set(launchers.group(1).split(", ")), launchers


def test_tiny_point_writes_under_the_run_folder(install):
    before = sorted(p for p in install.target.rglob("*") if "__pycache__" not in p.parts)
    out = _sweep(*TINY, cwd=install.elsewhere, env=install.env)
    (results,) = (install.elsewhere / "sweeps" / "smoke").glob("*/results.csv")
    with results.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["status"], r["seq_len"], r["heads"]) for r in rows] == [("ok", "64", "1")], out
    assert sorted(p for p in install.target.rglob("*") if "__pycache__" not in p.parts) == before


def test_user_experiment_through_the_search_path(install):
    mine = install.elsewhere / "my_conf" / "experiment"
    mine.mkdir(parents=True)
    (mine / "mine.yaml").write_text("# @package _global_\nname: mine\nseq_len: 96\n")
    cfg = _sweep("experiment=mine", "hydra.searchpath=[file://my_conf]", "--cfg", "job",
                 cwd=install.elsewhere, env=install.env)
    assert "name: mine" in cfg and "seq_len: 96" in cfg


def test_without_the_launcher_a_multirun_falls_back_to_hydras_basic_one(checkout):
    """The negative control: the launcher's module cannot load (as if its files were missing)."""
    where = checkout.elsewhere / "fallback"
    where.mkdir()
    code = ("import runpy, sys; sys.modules['hydra_plugins.selfattn_launcher.compose_once'] = None; "
            "sys.argv[0] = 'runners.sweep'; runpy.run_module('runners.sweep', run_name='__main__', alter_sys=True)")
    proc = _run([sys.executable, "-c", code, "-m", *TINY, "seq_len=32,64"], cwd=where, env=checkout.env, timeout=180)
    notes = [line for line in proc.stderr.splitlines() if "compose_once launcher did not load" in line]
    assert len(notes) == 1 and "basic launcher" in notes[0], proc.stderr
    (results,) = (where / "sweeps" / "smoke").glob("*/results.csv")
    with results.open(newline="") as f:
        assert sorted((r["status"], r["seq_len"]) for r in csv.DictReader(f)) == [("ok", "32"), ("ok", "64")]
    assert "hydra/launcher: basic" in (results.parent / "multirun.yaml").read_text()


def test_the_editable_build_uses_the_running_environment_not_the_base_interpreter(editable):
    """What the build runs with: the running environment's pip and setuptools, with bdist_wheel in setuptools
    itself, whatever the base interpreter carries (setuptools 65, no `wheel`, on a stock Python 3.11)."""
    code = ("import json, pip, setuptools; from setuptools.command import bdist_wheel; "
            "print(json.dumps([pip.__file__, setuptools.__file__, setuptools.__version__]))")
    pip_file, setuptools_file, version = json.loads(_run([editable.python, "-c", code], cwd=editable.tmp,
                                                         env=editable.env).stdout)
    homes = [Path(p).resolve() for p in _running_site_packages()]
    for file in (pip_file, setuptools_file):
        assert any(home in Path(file).resolve().parents for home in homes), f"{file} not from {homes}"
    assert tuple(int(part) for part in version.split(".")[:2]) >= (70, 1), version
