"""scope=train: a training run of a tiny model around the layer on an associative-recall task (selfattn/train/)."""

from selfattn.scopes.declaration import Scope

# a training run steps the optimizer after a backward pass; its sequences hold 8 (key, value) pairs and the
# query (selfattn/train/task.py takes at most 64 pairs), as the training experiment's do
SCOPE = Scope("train", "a training run", over_x=True, trains=True, own_axes=("steps", "lr"),
              defaults={"mode": "fwd_bwd", "seq_len": 9})
