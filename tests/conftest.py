"""Shared test set-up: CUDA-only tests carry @pytest.mark.gpu and skip without a GPU; the whole
matrix of compiled back ends (@pytest.mark.compile_matrix, many minutes of compiling) runs only
with `--compile-matrix`."""

import atexit
import os
import shutil
import tempfile

import pytest
import torch

# Tests never talk to wandb's servers, whatever the developer's environment says.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
# The device probes' cache (selfattn/measure/probes.py) goes to a folder of this test session, never the
# developer's: a test neither reads a stale value nor leaves one behind; subprocess tests inherit it.
os.environ["SELFATTN_CACHE_DIR"] = _CACHE_DIR = tempfile.mkdtemp(prefix="selfattn-test-cache-")
atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)  # gone with the session (a pytest run inside a
# test, such as the GPU check's collection, makes and removes its own)


def pytest_addoption(parser):
    parser.addoption("--compile-matrix", action="store_true",
                     help="also run every case of the compiled back ends (slow: minutes of torch.compile)")


def pytest_collection_modifyitems(config, items):
    skip_matrix = pytest.mark.skip(reason="the compiled back ends' whole matrix: run with --compile-matrix")
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "compile_matrix" in item.keywords and not config.getoption("--compile-matrix"):
            item.add_marker(skip_matrix)
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)
