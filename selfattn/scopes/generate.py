"""scope=generate: a generation loop of new_tokens steps through the layer, with or without a KV-cache
(selfattn/decode.py)."""

from selfattn.scopes.declaration import Scope

SCOPE = Scope("generate", "a generation loop", autoregressive=True, own_axes=("new_tokens", "kv_cache"),
              defaults={"causal": True})  # autoregressive: a new token sees the tokens before it
