"""scope=train: a training run of a tiny model around the layer on an associative-recall task (selfattn/train/).

It runs no timed call (selfattn/train/loop.py runs the loop); the guard sizes it as the core call of its shape, with
the core's FLOPs, bytes and memory model."""

from selfattn.scopes import core
from selfattn.scopes.declaration import Scope

# a training run steps the optimizer after a backward pass; its sequences hold 8 (key, value) pairs and the
# query (selfattn/train/task.py takes at most 64 pairs), as the training experiment's do
SCOPE = Scope("train", "a training run", over_x=True, trains=True, own_axes=("steps", "lr"),
              defaults={"mode": "fwd_bwd", "seq_len": 9}, flops=core.flops, bytes_moved=core.bytes_moved,
              input_bytes=core.input_bytes, call_bytes=core.call_bytes, drawn=core.drawn,
              reference_bytes=core.reference_bytes)
