"""scope=layer: multi-head self-attention over X with Q/K/V/O projections (selfattn/layer.py)."""

from selfattn.scopes.declaration import Scope

SCOPE = Scope("layer", "X with Q/K/V/O projections", over_x=True,
              pos_encodings=("none", "sinusoidal", "learned", "rope"), path_length=True)
