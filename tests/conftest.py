"""Shared test set-up: CUDA-only tests carry @pytest.mark.gpu and skip without a GPU."""

import os

import pytest
import torch

# Tests never talk to wandb's servers, whatever the developer's environment says.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
